import type Database from 'better-sqlite3';
import { InternalError } from 'tidal-load';
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

/**
 * One item's partners: `n` partner ordinals and their scores, every score referring to the same
 * time `at` (the latest event the list counted; an older event adds its weight decayed to `at`, a
 * newer one first decays every score to itself). Scores are Float32: 8 bytes a partner, where a
 * (partner, score, time) triple of Float64 took 24; the shared records hold a list for every item
 * with one (32 partners: 280 bytes against 784). Both arrays view one buffer.
 */
interface PartnerList {
  n: number;
  at: number;
  partners: Int32Array;
  scores: Float32Array;
  /** The list as a query task, made on the first query after it was published (its arrays, read-only). */
  task?: RelatedTask;
}

function listOf(capacity: number, n: number, at: number): PartnerList {
  const buf = new ArrayBuffer(8 * capacity);
  return { n, at, partners: new Int32Array(buf, 0, capacity), scores: new Float32Array(buf, 4 * capacity, capacity) };
}

function emptyList(): PartnerList {
  return listOf(4, 0, -Infinity);
}

function copyList(l: PartnerList): PartnerList {
  const c = listOf(Math.max(4, l.n), l.n, l.at);
  c.partners.set(l.partners.subarray(0, l.n));
  c.scores.set(l.scores.subarray(0, l.n));
  return c;
}

const NO_PARTNERS = new Int32Array(0);
const NO_SCORES = new Float32Array(0);

/** In place of a list that lives in the shared records (see `CoEngagementIndex.share`). */
const IN_SHARED: PartnerList = Object.freeze({ n: -1, at: 0, partners: NO_PARTNERS, scores: NO_SCORES });

function grow(l: PartnerList): void {
  const g = listOf(Math.min(RELATED_PARTNERS, l.partners.length * 2), l.n, l.at);
  g.partners.set(l.partners.subarray(0, l.n));
  g.scores.set(l.scores.subarray(0, l.n));
  l.partners = g.partners;
  l.scores = g.scores;
}

/**
 * A list as its row: n × (partner, score, at), Float64 little-endian (the row format of storage
 * version 3; every entry carries the list's `at`).
 */
function encode(l: PartnerList): Buffer {
  const f = new Float64Array(3 * l.n);
  for (let i = 0; i < l.n; i++) {
    f[3 * i] = l.partners[i]!;
    f[3 * i + 1] = l.scores[i]!;
    f[3 * i + 2] = l.at;
  }
  return Buffer.from(f.buffer, f.byteOffset, f.byteLength);
}

/** A log row's entries: n × (item, partner, at), Float64 little-endian. */
function encodeEntries(p: number[]): Buffer {
  const f = Float64Array.from(p);
  return Buffer.from(f.buffer, f.byteOffset, f.byteLength);
}

function decodeEntries(b: Buffer): Float64Array {
  const f = new Float64Array(Math.floor(b.byteLength / 8));
  new Uint8Array(f.buffer).set(b.subarray(0, 8 * f.length));
  return f;
}

/**
 * A row as a list. Rows this version wrote hold one time and Float32 scores, so they come back
 * exactly; a row of an earlier version (a time per entry) has its scores decayed to its latest.
 */
function decode(b: Buffer, lambda: number): PartnerList {
  const n = Math.floor(b.byteLength / 24);
  const f = new Float64Array(3 * n);
  new Uint8Array(f.buffer).set(b.subarray(0, 24 * n));
  let at = -Infinity;
  for (let i = 0; i < n; i++) if (f[3 * i + 2]! > at) at = f[3 * i + 2]!;
  const l = listOf(Math.max(4, n), n, at);
  for (let i = 0; i < n; i++) {
    l.partners[i] = f[3 * i]!;
    const dt = at - f[3 * i + 2]!;
    l.scores[i] = dt > 0 ? f[3 * i + 1]! * Math.exp(-lambda * dt) : f[3 * i + 1]!;
  }
  return l;
}

/**
 * Entries the log may hold (one per list a pair moves, two a pair; 24 bytes each: 12 MiB) before
 * the lists its oldest rows changed are written out. A list changed by several batches within it
 * is written once, and an open replays at most this many entries.
 */
export const RELATED_LOG_ENTRIES = 524_288;

/**
 * The co-engagement index of `related`: per item, at most {@link RELATED_PARTNERS} partners, each
 * with a decayed count (S ← S·e^(−λ·dt) + 1 per pair event). Past the bound, a new partner takes
 * the place of the one with the smallest count at the list's latest reference time (ties: the
 * higher ordinal) and inherits that count (Space-Saving, Metwally et al. 2005), so the counts of a
 * full list over-estimate by at most the smallest count.
 *
 * Durable like the user state, without a row per changed list per batch: a batch's entries (one
 * per list a pair moves) are one row of `related_log`, in its transaction, and a list is written (with `upto`, the last log row
 * it holds) only when the log must give up the oldest row that changed it since it was last
 * written: past {@link RELATED_LOG_ENTRIES} entries, oldest row first. An open loads the lists and
 * replays each the log rows above its `upto`, in order, so the index after a crash is exactly the
 * one of the last committed batch (a list moves only by its own pairs, in the order counted; the
 * signal log cannot rebuild it: it holds no users, and checkpoints truncate it). Written per batch
 * as before, list rows were half of a write's CPU (184 against 83 µs of the database's thread per
 * single-event write naming a user, 20 000 items: each list a row on a page of its own).
 */
export class CoEngagementIndex {
  readonly #lambda = Math.LN2 / RELATED_HALF_LIFE_MS;
  /**
   * The published lists by ordinal (ordinals are dense): a query's lookup is one load, where a
   * Map of every listed item hashed the key and chased a bucket out of cache.
   */
  readonly #lists: (PartnerList | undefined)[] = [];
  #size = 0;
  /** Copies of the lists the batch being committed changed. */
  #staged = new Map<number, PartnerList>();
  /** The batch's log entries, (item, partner, at) in the order counted: its log row. */
  #entries: number[] = [];
  #onPublish: ((item: number, task: RelatedTask) => boolean) | null = null;
  /** Where a list published to the shared records is read back from (see {@link share}). */
  #sharedList: ((item: number) => RelatedTask | undefined) | null = null;
  readonly #write: Database.Statement;
  readonly #append: Database.Statement;
  readonly #trim: Database.Statement;
  readonly #logBound: number;
  /**
   * Lists changed since they were last written, each with the first log row that changed it; in
   * the order they became so, which is that row's order (a Map keeps insertion order).
   */
  readonly #dirty = new Map<number, number>();
  /** The log's rows, oldest first from `#head`: their ids and entry counts. */
  #logIds: number[] = [];
  #logEntries: number[] = [];
  #head = 0;
  /** Entries in the log's rows from `#head`. */
  #inLog = 0;
  /** The last log row id committed (or held by a stored list). */
  #lastId = 0;
  /** What the batch being committed wrote of the log and the lists, applied after its commit. */
  #pending: { id: number; entries: number; head: number; inLog: number; written: number[] } | null = null;

  constructor(db: Database.Database, logBound = RELATED_LOG_ENTRIES) {
    this.#logBound = logBound;
    this.#write = db.prepare('INSERT OR REPLACE INTO item_related (ordinal, partners, upto) VALUES (?, ?, ?)');
    this.#append = db.prepare('INSERT INTO related_log (id, entries) VALUES (?, ?)');
    this.#trim = db.prepare('DELETE FROM related_log WHERE id < ?');
    const lists = new Map<number, PartnerList>();
    const upto = new Map<number, number>();
    for (const [ordinal, blob, holds] of db.prepare('SELECT ordinal, partners, upto FROM item_related').raw().iterate() as IterableIterator<
      [number, Buffer, number]
    >) {
      lists.set(ordinal, decode(blob, this.#lambda));
      upto.set(ordinal, holds);
      if (holds > this.#lastId) this.#lastId = holds;
    }
    // The log's rows, in order: each list takes the entries its stored copy does not hold.
    for (const [id, blob] of db.prepare('SELECT id, entries FROM related_log ORDER BY id').raw().iterate() as IterableIterator<
      [number, Buffer]
    >) {
      const p = decodeEntries(blob);
      for (let i = 0; i < p.length; i += 3) {
        const item = p[i]!;
        if (id <= (upto.get(item) ?? 0)) continue;
        let l = lists.get(item);
        if (l === undefined) lists.set(item, (l = emptyList()));
        this.#bumpList(l, p[i + 1]!, p[i + 2]!);
        if (!this.#dirty.has(item)) this.#dirty.set(item, id);
      }
      this.#logIds.push(id);
      this.#logEntries.push(p.length / 3);
      this.#inLog += p.length / 3;
      if (id > this.#lastId) this.#lastId = id;
    }
    for (const [ordinal, l] of lists) this.#publish(ordinal, l);
  }

  /** Rows and entries in the log now, and the lists it holds changes of (tests and tools). */
  get log(): { rows: number; entries: number; unwritten: number } {
    return { rows: this.#logIds.length - this.#head, entries: this.#inLog, unwritten: this.#dirty.size };
  }

  /** Items with a list. */
  get size(): number {
    return this.#size;
  }

  #publish(item: number, l: PartnerList): void {
    const lists = this.#lists;
    // Filled up to `item` first, so the array stays dense (holes made it a dictionary).
    while (lists.length < item) lists.push(undefined);
    if (lists[item] === undefined) this.#size++;
    lists[item] = l;
    if (this.#onPublish?.(item, this.task(item)) === true) lists[item] = IN_SHARED;
  }

  /**
   * From now on the lists live in the shared records (once per process): `onPublish` stores a list
   * there (every list now, then each list a batch publishes) and says whether it did; a list it
   * stored is dropped here and read back with `read` when a batch changes it or a query of this
   * thread ranks it. A list it could not store stays here.
   */
  share(onPublish: (item: number, task: RelatedTask) => boolean, read: (item: number) => RelatedTask | undefined): void {
    this.#sharedList = read;
    this.#onPublish = onPublish;
    const lists = this.#lists;
    for (let item = 0; item < lists.length; item++) {
      const l = lists[item];
      if (l !== undefined && l !== IN_SHARED && onPublish(item, this.task(item))) lists[item] = IN_SHARED;
    }
  }

  /** The published list of `item`, read back from the shared records when it lives there. */
  #published(item: number): PartnerList | undefined {
    const l = this.#lists[item];
    if (l !== IN_SHARED) return l;
    const t = this.#sharedList!(item);
    if (t === undefined) throw new InternalError(`the co-engagement list of item ordinal ${item} is missing from the shared records`);
    return { n: t.n, at: t.at, partners: t.partners, scores: t.scores, task: t };
  }

  /** Starts a batch: copies left by a batch that failed to commit are dropped. */
  begin(): void {
    if (this.#staged.size > 0) this.#staged = new Map();
    if (this.#entries.length > 0) this.#entries = [];
    this.#pending = null;
  }

  /** Counts one co-engagement of `a` and `b` at `at`, in both lists. */
  record(a: number, b: number, at: number): void {
    if (a === b) return;
    this.#entries.push(a, b, at, b, a, at);
    this.#bumpList(this.#touch(a), b, at);
    this.#bumpList(this.#touch(b), a, at);
  }

  #touch(item: number): PartnerList {
    let l = this.#staged.get(item);
    if (l !== undefined) return l;
    const published = this.#published(item);
    l = published === undefined ? emptyList() : copyList(published);
    this.#staged.set(item, l);
    return l;
  }

  #bumpList(l: PartnerList, partner: number, at: number): void {
    const n = l.n;
    let w = 1;
    if (at > l.at) {
      // Every score moves to the newer time (a list holds one).
      if (n > 0) {
        const f = Math.exp(-this.#lambda * (at - l.at));
        const s = l.scores;
        for (let i = 0; i < n; i++) s[i] = s[i]! * f;
      }
      l.at = at;
    } else if (at < l.at) {
      w = Math.exp(-this.#lambda * (l.at - at));
    }
    const p = l.partners;
    for (let i = 0; i < n; i++) {
      if (p[i] !== partner) continue;
      l.scores[i] = l.scores[i]! + w;
      return;
    }
    if (n < RELATED_PARTNERS) {
      if (n === l.partners.length) grow(l);
      l.partners[n] = partner;
      l.scores[n] = w;
      l.n = n + 1;
      return;
    }
    // Space-Saving: the newcomer takes the smallest entry's place and count, plus its own. A pair
    // engaged often enough always gets in, and a count is over by at most the count it inherited.
    const s = l.scores;
    let worst = 0;
    for (let i = 1; i < n; i++) {
      if (s[i]! < s[worst]! || (s[i] === s[worst] && p[i]! > p[worst]!)) worst = i;
    }
    s[worst] = s[worst]! + w;
    p[worst] = partner;
  }

  /**
   * Inside the batch's transaction: logs its entries (one row), then writes the lists the log's
   * oldest rows changed, as far as it must give rows up to stay within its bound, and deletes
   * the rows no list needs any more.
   */
  persist(): void {
    const entries = this.#entries.length / 3;
    let id = this.#lastId;
    if (entries > 0) {
      id++;
      this.#append.run(id, encodeEntries(this.#entries));
    }
    // The oldest row kept: the log holds at most the bound's entries (this batch's row first).
    let head = this.#head;
    let inLog = this.#inLog + entries;
    const ids = this.#logIds;
    while (inLog > this.#logBound && head < ids.length) inLog -= this.#logEntries[head++]!;
    const newRowGoes = inLog > this.#logBound;
    if (newRowGoes) inLog -= entries;
    // The first row kept: the oldest left, else this batch's own, else none (every list written).
    const cut = head < ids.length ? ids[head]! : entries > 0 && !newRowGoes ? id : id + 1;
    const written: number[] = [];
    for (const [item, first] of this.#dirty) {
      if (first >= cut) break;
      this.#write.run(item, encode(this.#staged.get(item) ?? this.#published(item)!), id);
      written.push(item);
    }
    if (newRowGoes)
      for (const [item, l] of this.#staged)
        if (!this.#dirty.has(item)) {
          this.#write.run(item, encode(l), id);
          written.push(item);
        }
    if (head > this.#head || newRowGoes) this.#trim.run(cut);
    this.#pending = { id: entries > 0 ? id : 0, entries: newRowGoes ? 0 : entries, head, inLog, written };
  }

  /** Publishes the lists the committed batch changed, and what it wrote of the log. */
  apply(): void {
    for (const [item, l] of this.#staged) this.#publish(item, l);
    const p = this.#pending;
    if (p !== null) {
      if (p.id > 0) {
        this.#lastId = p.id;
        if (p.entries > 0) {
          this.#logIds.push(p.id);
          this.#logEntries.push(p.entries);
          for (const item of this.#staged.keys()) if (!this.#dirty.has(item)) this.#dirty.set(item, p.id);
        }
      }
      // After the batch's own lists joined: one it wrote is not left behind as changed.
      for (const item of p.written) this.#dirty.delete(item);
      this.#head = p.head;
      this.#inLog = p.inLog;
      if (this.#head >= 4096 && this.#head * 2 >= this.#logIds.length) {
        this.#logIds = this.#logIds.slice(this.#head);
        this.#logEntries = this.#logEntries.slice(this.#head);
        this.#head = 0;
      }
      this.#pending = null;
    }
    this.#staged = new Map();
    this.#entries = [];
  }

  /**
   * What profile `related` ranks for `item` (an empty list when nothing co-engaged with it): the
   * published list's own entries, which no batch changes (a batch stages a copy and publishes it
   * in the list's place), so the task is made once per published list, without a copy, and
   * shared by the queries until a batch replaces the list. Callers only read it.
   */
  task(item: number): RelatedTask {
    const l = this.#published(item);
    if (l === undefined) return { item, n: 0, at: 0, partners: NO_PARTNERS, scores: NO_SCORES, lambda: this.#lambda };
    return (l.task ??= { item, n: l.n, at: l.at, partners: l.partners, scores: l.scores, lambda: this.#lambda });
  }

  /** The item's partners and their counts decayed to `nowMs` (tests and tools). */
  partners(item: number, nowMs: number): Map<number, number> {
    const l = this.#published(item);
    const out = new Map<number, number>();
    if (!l) return out;
    const decay = Math.exp(-this.#lambda * Math.max(0, nowMs - l.at));
    for (let i = 0; i < l.n; i++) out.set(l.partners[i]!, l.scores[i]! * decay);
    return out;
  }
}
