/**
 * One user's state as the registry holds it in memory: its bounds, its copy-on-write clone, its
 * record for the shared records and back, the preference vector's arithmetic, and its load from
 * the user tables on open.
 */
import type Database from 'better-sqlite3';
import { blobToVector, hashString, type UserQueryState, type UserRecord } from 'tidal-query';

/**
 * One user's state: what their writes built, as the user tables hold it. The metadata and the
 * embedding a user was upserted with are not in it: they stay in the `users` row (`get` reads them).
 */
export interface UserState {
  readonly key: number;
  readonly id: string;
  preference: Float32Array | null;
  /** The seen ordinals, oldest first, `seenCount` of them. */
  seen: Int32Array;
  seenCount: number;
  /** The pos the next seen entry gets (user_seen.pos). */
  seenPos: number;
  hidden: Set<number>;
  blocked: Set<string>;
  following: Set<string>;
  affinity: Affinities;
  /** The worker copy of the state, built on demand, dropped on change. */
  query: UserQueryState | null;
  /**
   * On a batch's copy (see {@link cloneState}): the collections it still shares with the published
   * state, as bits of {@link SHARED}; `own*` copies one before its first change.
   */
  shared: number;
}

/** The collections a batch's copy shares until it changes them. */
export const SHARED = Object.freeze({ hidden: 1, blocked: 2, following: 4, affinity: 8 });
const ALL_SHARED = SHARED.hidden | SHARED.blocked | SHARED.following | SHARED.affinity;

/**
 * Items a user's seen set holds: the last 512 distinct items the user signalled (a signal on an
 * item already in it makes it the newest again). 512 × 4 bytes = 2 KiB per user at most, plus
 * 512 rows of `user_seen`. A feed rarely shows more than a few hundred items a session, and the
 * `unseen` filter's cost in a worker grows with it (a set built per query).
 */
export const SEEN_LIMIT = 512;

/**
 * Creators a user holds an affinity to. Past it, the creator with the smallest decayed affinity
 * gives its place to the new one. 64 × (two Float64 + a shared creator string) ≈ 2 KiB per user.
 */
export const MAX_AFFINITIES = 64;

/**
 * Hidden items, blocked creators and followed creators per user, each. Checked when a call is
 * admitted; past it the call is refused with `CapacityError`. Every one of them is copied into
 * each query the user makes (4 bytes a hidden item), so the bound is what keeps a query's message
 * small: 10 000 hidden items are 40 KB.
 */
export const MAX_USER_EDGES = 10_000;

/**
 * A user's creator affinities, at most {@link MAX_AFFINITIES}, in the order they were first held:
 * two parallel arrays, a creator found by a linear scan of the interned names. A `Map` of
 * `{ score, at }` objects held each creator in a table entry, an object and two boxed doubles:
 * about 30 of the 55 MiB of heap the registry held for 10 000 users of the personalization corpus.
 */
export class Affinities {
  /** The creators, interned (one string however many users hold it). */
  readonly #creators: string[];
  /** Per creator, in the same order, its score and the time the score refers to (a double array). */
  readonly #values: number[];

  constructor(creators: string[] = [], values: number[] = []) {
    this.#creators = creators;
    this.#values = values;
  }

  get size(): number {
    return this.#creators.length;
  }

  /** The position of `creator`, or −1. */
  indexOf(creator: string): number {
    return this.#creators.indexOf(creator);
  }

  creator(i: number): string {
    return this.#creators[i]!;
  }

  score(i: number): number {
    return this.#values[2 * i]!;
  }

  at(i: number): number {
    return this.#values[2 * i + 1]!;
  }

  /** The scores, in order, as a copy. */
  scores(): Float64Array {
    return Float64Array.from({ length: this.size }, (_, i) => this.#values[2 * i]!);
  }

  /** The times the scores refer to, in order, as a copy. */
  times(): Float64Array {
    return Float64Array.from({ length: this.size }, (_, i) => this.#values[2 * i + 1]!);
  }

  /** The latest time any score refers to (−Infinity when there is none). */
  latest(): number {
    let ref = -Infinity;
    for (let i = 1; i < this.#values.length; i += 2) if (this.#values[i]! > ref) ref = this.#values[i]!;
    return ref;
  }

  set(i: number, score: number, at: number): void {
    this.#values[2 * i] = score;
    this.#values[2 * i + 1] = at;
  }

  /** Holds a creator not held yet, last. */
  add(creator: string, score: number, at: number): void {
    this.#creators.push(creator);
    this.#values.push(score, at);
  }

  removeAt(i: number): void {
    this.#creators.splice(i, 1);
    this.#values.splice(2 * i, 2);
  }

  /** The creators, a copy. */
  names(): string[] {
    return this.#creators.slice();
  }

  copy(): Affinities {
    return new Affinities(this.#creators.slice(), this.#values.slice());
  }
}

/** A user with no history yet: empty seen ring, no edges, no affinities. */
export function newUserState(key: number, id: string, preference: Float32Array | null): UserState {
  return {
    key,
    id,
    preference,
    seen: new Int32Array(0),
    seenCount: 0,
    seenPos: 0,
    hidden: new Set(),
    blocked: new Set(),
    following: new Set(),
    affinity: new Affinities(),
    query: null,
    shared: 0,
  };
}

/**
 * A batch's copy of a published state: the seen ring and the preference copied (a few KiB at
 * most), the sets and the affinities shared until the batch changes them (`own*`): copying them
 * all for every user a batch touched was 9 % of the database's thread under single-event writes.
 */
export function cloneState(u: UserState): UserState {
  return {
    ...u,
    preference: u.preference === null ? null : u.preference.slice(),
    seen: u.seen.slice(),
    query: null,
    shared: ALL_SHARED,
  };
}

/** The state as its record (the shared records' copy of it, which the state can be rebuilt from). */
export function recordOf(u: UserState, lambda: number): UserRecord {
  const a = u.affinity;
  return {
    key: u.key,
    seenPos: u.seenPos,
    hidden: Int32Array.from(u.hidden),
    blocked: [...u.blocked],
    seen: u.seen.subarray(0, u.seenCount),
    following: [...u.following],
    preference: u.preference,
    affinityCreators: a.names(),
    affinityScores: a.scores(),
    affinityAt: a.times(),
    lambda,
    idHash: hashString(u.id),
  };
}

/**
 * The state a record holds, all of it this state's own (a batch changes it); `intern` gives the one
 * copy of a creator string the registry keeps.
 */
export function stateOf(id: string, r: UserRecord, intern: (creator: string) => string): UserState {
  const creators = r.affinityCreators.map(intern);
  const values: number[] = [];
  for (let i = 0; i < creators.length; i++) values.push(r.affinityScores[i]!, r.affinityAt[i]!);
  return {
    key: r.key,
    id,
    preference: r.preference,
    seen: r.seen,
    seenCount: r.seen.length,
    seenPos: r.seenPos,
    hidden: new Set(r.hidden),
    blocked: new Set(r.blocked.map(intern)),
    following: new Set(r.following.map(intern)),
    affinity: new Affinities(creators, values),
    query: null,
    shared: 0,
  };
}

/** The copy's hidden items, its own from now on. */
export function ownHidden(u: UserState): Set<number> {
  if ((u.shared & SHARED.hidden) !== 0) {
    u.hidden = new Set(u.hidden);
    u.shared &= ~SHARED.hidden;
  }
  return u.hidden;
}

/** The copy's blocked or followed creators, its own from now on. */
export function ownCreators(u: UserState, which: 'blocked' | 'following'): Set<string> {
  const bit = SHARED[which];
  if ((u.shared & bit) !== 0) {
    u[which] = new Set(u[which]);
    u.shared &= ~bit;
  }
  return u[which];
}

/** The copy's affinities (entries included: they change in place), its own from now on. */
export function ownAffinity(u: UserState): Affinities {
  if ((u.shared & SHARED.affinity) !== 0) {
    u.affinity = u.affinity.copy();
    u.shared &= ~SHARED.affinity;
  }
  return u.affinity;
}

export function vectorBlob(v: Float32Array | null): Buffer | null {
  return v === null ? null : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
}
/**
 * p ← (1 − |r|)·p ± |r|·ê in Float32 (ê the unit embedding), the same arithmetic live and after a
 * restart since the file holds the Float32 result. A first positive signal sets p = ê; a negative
 * one with no p yet leaves it unset. Returns whether p changed.
 */
export function movePreference(u: UserState, embedding: Float32Array, rate: number): boolean {
  let norm = 0;
  for (let i = 0; i < embedding.length; i++) norm += embedding[i]! * embedding[i]!;
  norm = Math.sqrt(norm);
  if (!(norm > 0)) return false;
  const r = Math.abs(rate);
  const sign = rate > 0 ? 1 : -1;
  const p = u.preference;
  if (p === null) {
    if (sign < 0) return false;
    const next = new Float32Array(embedding.length);
    for (let i = 0; i < next.length; i++) next[i] = embedding[i]! / norm;
    u.preference = next;
    return true;
  }
  const next = new Float32Array(p.length);
  let nonZero = false;
  for (let i = 0; i < p.length; i++) {
    next[i] = (1 - r) * p[i]! + sign * r * (embedding[i]! / norm);
    if (next[i] !== 0) nonZero = true;
  }
  // A vector moved exactly onto zero has no direction for cosine: keep the last one.
  if (!nonZero) return false;
  u.preference = next;
  return true;
}

/** user_creators.relation: a block or a follow. */
export const BLOCKED = 1;
export const FOLLOWED = 2;

/**
 * Every user and their state as the user tables hold them, in key order (the recovery of the user
 * tables); `intern` gives the one copy of a creator string the registry keeps.
 */
export function loadUsers(db: Database.Database, dims: number, intern: (creator: string) => string): UserState[] {
  const vec = (b: Buffer | null): Float32Array | null => (b !== null && b.byteLength === dims * 4 && dims > 0 ? blobToVector(b) : null);
  const byKey = new Map<number, UserState>();
  for (const r of db.prepare('SELECT key, id, preference FROM users ORDER BY key').all() as {
    key: number;
    id: string;
    preference: Buffer | null;
  }[]) {
    byKey.set(r.key, newUserState(r.key, r.id, vec(r.preference)));
  }
  for (const [user, ordinal, pos] of db
    .prepare('SELECT user, ordinal, pos FROM user_seen ORDER BY user, pos')
    .raw()
    .iterate() as IterableIterator<[number, number, number]>) {
    const u = byKey.get(user);
    if (!u) continue;
    if (u.seen.length === u.seenCount) u.seen = grow(u.seen);
    u.seen[u.seenCount++] = ordinal;
    u.seenPos = pos + 1;
  }
  for (const [user, ordinal] of db.prepare('SELECT user, ordinal FROM user_hidden').raw().iterate() as IterableIterator<[number, number]>) {
    byKey.get(user)?.hidden.add(ordinal);
  }
  for (const [user, relation, creator] of db
    .prepare('SELECT user, relation, creator FROM user_creators')
    .raw()
    .iterate() as IterableIterator<[number, number, string]>) {
    const u = byKey.get(user);
    if (!u) continue;
    (relation === BLOCKED ? u.blocked : u.following).add(intern(creator));
  }
  for (const [user, creator, score, at] of db
    .prepare('SELECT user, creator, score, at FROM user_affinity')
    .raw()
    .iterate() as IterableIterator<[number, string, number, number]>) {
    byKey.get(user)?.affinity.add(intern(creator), score, at);
  }
  return [...byKey.values()];
}

export function grow(a: Int32Array): Int32Array {
  const b = new Int32Array(Math.min(SEEN_LIMIT, Math.max(8, a.length * 2)));
  b.set(a);
  return b;
}
