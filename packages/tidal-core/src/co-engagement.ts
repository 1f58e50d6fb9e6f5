import type Database from 'better-sqlite3';
import type { RelatedTask } from 'tidal-query';

/** Partners kept per item: the `related` profile ranks at most this many. */
export const RELATED_PARTNERS = 32;

/**
 * When a user signals an item (any kind without a negative preference rate), it is paired with
 * the user's 8 most recent other seen items: "engaged with X, also engaged with Y" within a short
 * stretch of one user's history. 8 pairs (16 list updates) per signal.
 */
export const RELATED_WINDOW = 8;

/** Half-life of a co-engagement score: a pair engaged a week ago counts half. */
export const RELATED_HALF_LIFE_MS = 7 * 86_400_000;

/** One item's partners, struct of arrays, `n` used. */
interface PartnerList {
  n: number;
  partners: Int32Array;
  scores: Float64Array;
  at: Float64Array;
}

function emptyList(): PartnerList {
  return { n: 0, partners: new Int32Array(4), scores: new Float64Array(4), at: new Float64Array(4) };
}

function copyList(l: PartnerList): PartnerList {
  return { n: l.n, partners: l.partners.slice(), scores: l.scores.slice(), at: l.at.slice() };
}

function grow(l: PartnerList): void {
  const cap = Math.min(RELATED_PARTNERS, l.partners.length * 2);
  const p = new Int32Array(cap);
  const s = new Float64Array(cap);
  const a = new Float64Array(cap);
  p.set(l.partners);
  s.set(l.scores);
  a.set(l.at);
  l.partners = p;
  l.scores = s;
  l.at = a;
}

/** A list as its row: n × (partner, score, at), Float64 little-endian. */
function encode(l: PartnerList): Buffer {
  const f = new Float64Array(3 * l.n);
  for (let i = 0; i < l.n; i++) {
    f[3 * i] = l.partners[i]!;
    f[3 * i + 1] = l.scores[i]!;
    f[3 * i + 2] = l.at[i]!;
  }
  return Buffer.from(f.buffer, f.byteOffset, f.byteLength);
}

function decode(b: Buffer): PartnerList {
  const n = Math.floor(b.byteLength / 24);
  const f = new Float64Array(3 * n);
  new Uint8Array(f.buffer).set(b.subarray(0, 24 * n));
  const cap = Math.max(4, n);
  const l: PartnerList = { n, partners: new Int32Array(cap), scores: new Float64Array(cap), at: new Float64Array(cap) };
  for (let i = 0; i < n; i++) {
    l.partners[i] = f[3 * i]!;
    l.scores[i] = f[3 * i + 1]!;
    l.at[i] = f[3 * i + 2]!;
  }
  return l;
}

/**
 * The co-engagement index of `related`: per item, at most {@link RELATED_PARTNERS} partners, each
 * with a decayed count (S ← S·e^(−λ·dt) + 1 per pair event). Past the bound, a new partner takes
 * the place of the one with the smallest count at the list's latest reference time (ties: the
 * higher ordinal) and inherits that count (Space-Saving, Metwally et al. 2005), so the counts of a
 * full list over-estimate by at most the smallest count.
 *
 * Durable like the user state: every list a batch changed is written (one row per item) in the
 * batch's transaction and published after the commit, and an open loads the rows, so the index
 * after a crash is exactly the one of the last committed batch (the signal log cannot rebuild it:
 * it holds no users, and checkpoints truncate it).
 */
export class CoEngagementIndex {
  readonly #lambda = Math.LN2 / RELATED_HALF_LIFE_MS;
  readonly #lists = new Map<number, PartnerList>();
  /** Copies of the lists the batch being committed changed. */
  #staged = new Map<number, PartnerList>();
  readonly #write: Database.Statement;

  constructor(db: Database.Database) {
    this.#write = db.prepare('INSERT OR REPLACE INTO item_related (ordinal, partners) VALUES (?, ?)');
    for (const [ordinal, blob] of db.prepare('SELECT ordinal, partners FROM item_related').raw().iterate() as IterableIterator<[number, Buffer]>) {
      this.#lists.set(ordinal, decode(blob));
    }
  }

  /** Items with a list. */
  get size(): number {
    return this.#lists.size;
  }

  /** Starts a batch: copies left by a batch that failed to commit are dropped. */
  begin(): void {
    if (this.#staged.size > 0) this.#staged = new Map();
  }

  /** Counts one co-engagement of `a` and `b` at `at`, in both lists. */
  record(a: number, b: number, at: number): void {
    if (a === b) return;
    this.#bump(a, b, at);
    this.#bump(b, a, at);
  }

  #touch(item: number): PartnerList {
    let l = this.#staged.get(item);
    if (l !== undefined) return l;
    const published = this.#lists.get(item);
    l = published === undefined ? emptyList() : copyList(published);
    this.#staged.set(item, l);
    return l;
  }

  #bump(item: number, partner: number, at: number): void {
    const l = this.#touch(item);
    for (let i = 0; i < l.n; i++) {
      if (l.partners[i] !== partner) continue;
      const ref = l.at[i]!;
      if (at >= ref) {
        l.scores[i] = l.scores[i]! * Math.exp(-this.#lambda * (at - ref)) + 1;
        l.at[i] = at;
      } else {
        l.scores[i]! += Math.exp(-this.#lambda * (ref - at));
      }
      return;
    }
    if (l.n < RELATED_PARTNERS) {
      if (l.n === l.partners.length) grow(l);
      l.partners[l.n] = partner;
      l.scores[l.n] = 1;
      l.at[l.n] = at;
      l.n++;
      return;
    }
    // Space-Saving: the newcomer takes the smallest entry's place and count, plus its own. A pair
    // engaged often enough always gets in, and a count is over by at most the count it inherited.
    let ref = at;
    for (let i = 0; i < l.n; i++) if (l.at[i]! > ref) ref = l.at[i]!;
    let worst = 0;
    let worstValue = Infinity;
    for (let i = 0; i < l.n; i++) {
      const v = l.scores[i]! * Math.exp(-this.#lambda * (ref - l.at[i]!));
      if (v < worstValue || (v === worstValue && l.partners[i]! > l.partners[worst]!)) {
        worst = i;
        worstValue = v;
      }
    }
    l.partners[worst] = partner;
    l.scores[worst] = worstValue + Math.exp(-this.#lambda * (ref - at));
    l.at[worst] = ref;
  }

  /** Writes the lists the batch changed, inside its transaction (once per item however often it changed). */
  persist(): void {
    for (const [item, l] of this.#staged) this.#write.run(item, encode(l));
  }

  /** Publishes the lists the committed batch wrote. */
  apply(): void {
    for (const [item, l] of this.#staged) this.#lists.set(item, l);
    this.#staged = new Map();
  }

  /** What profile `related` sends its worker for `item` (an empty list when nothing co-engaged with it). */
  task(item: number): RelatedTask {
    const l = this.#lists.get(item);
    const n = l?.n ?? 0;
    return {
      item,
      partners: l ? l.partners.slice(0, n) : new Int32Array(0),
      scores: l ? l.scores.slice(0, n) : new Float64Array(0),
      at: l ? l.at.slice(0, n) : new Float64Array(0),
      lambda: this.#lambda,
    };
  }

  /** The item's partners and their counts decayed to `nowMs` (tests and tools). */
  partners(item: number, nowMs: number): Map<number, number> {
    const l = this.#lists.get(item);
    const out = new Map<number, number>();
    if (!l) return out;
    for (let i = 0; i < l.n; i++) out.set(l.partners[i]!, l.scores[i]! * Math.exp(-this.#lambda * Math.max(0, nowMs - l.at[i]!)));
    return out;
  }
}
