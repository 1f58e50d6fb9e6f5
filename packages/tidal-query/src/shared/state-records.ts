import type { RelatedTask, UserQueryState } from '../types.js';

/*
 * The byte layouts of the per-process read state kept in shared records (records.ts): a user's
 * state, an open session, an item's co-engagement list. Each is written by the database's thread
 * after a commit and decoded by whichever thread answers a query; a decoded value's typed arrays are
 * views of the reader's private copy, so nothing is copied twice.
 *
 * user (little-endian, 8-byte aligned sections):
 *   Int32 × 8: hidden count, seen count, preference dims (−1: none), affinity count, id hash,
 *              string bytes, user key, next seen position
 *   Float64 affinity decay rate (1/ms)
 *   Int32 hidden[], Int32 seen[] (padded to 8), Float64 affinity scores[], Float64 affinity times[],
 *   Float32 preference[] (padded to 8), UTF-8 JSON [blocked, following, affinity creators]
 * session:  Float64 expiresAt, Int32 seen count, Int32 agent bytes, Int32 seen[] (padded to 8), UTF-8 agent id
 * related:  Int32 item ordinal, Int32 n, Float64 lambda, Float64 at, Int32 partners[n], Float32 scores[n]
 */

/**
 * A user's whole state as the database's thread stores it: what a query reads and what a write
 * needs to go on from it (the key of its rows, the next seen position, each affinity's own time),
 * so the records are the only copy of a user the database's thread keeps.
 */
export interface UserRecord {
  /** The user's key in the user tables. */
  key: number;
  /** The position the next seen entry gets (user_seen.pos). */
  seenPos: number;
  hidden: Int32Array;
  blocked: readonly string[];
  /** The seen set's ordinals, oldest first. */
  seen: Int32Array;
  following: readonly string[];
  preference: Float32Array | null;
  affinityCreators: readonly string[];
  /** Each affinity's score at its own time (`affinityAt`), in ms since the epoch. */
  affinityScores: Float64Array;
  affinityAt: Float64Array;
  /** The affinities' decay rate (ln 2 / half-life, per ms). */
  lambda: number;
  idHash: number;
}

const USER_HEADER = 8;
/** The header and the decay rate. */
const USER_FIXED = 4 * USER_HEADER + 8;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function pad8(n: number): number {
  return (n + 7) & ~7;
}

/** A user's state as a record (see the layout above). */
export function encodeUserState(u: UserRecord): Uint8Array {
  const strings = encoder.encode(JSON.stringify([u.blocked, u.following, u.affinityCreators]));
  const seen = u.seen;
  const nAffinity = u.affinityScores.length;
  const dims = u.preference === null ? -1 : u.preference.length;
  const scoresAt = pad8(USER_FIXED + 4 * (u.hidden.length + seen.length));
  const prefAt = scoresAt + 16 * nAffinity;
  const stringsAt = pad8(prefAt + 4 * Math.max(0, dims));
  const out = new Uint8Array(stringsAt + strings.length);
  new Int32Array(out.buffer, 0, USER_HEADER).set([
    u.hidden.length,
    seen.length,
    dims,
    nAffinity,
    u.idHash | 0,
    strings.length,
    u.key,
    u.seenPos,
  ]);
  new Float64Array(out.buffer, 4 * USER_HEADER, 1)[0] = u.lambda;
  new Int32Array(out.buffer, USER_FIXED, u.hidden.length).set(u.hidden);
  new Int32Array(out.buffer, USER_FIXED + 4 * u.hidden.length, seen.length).set(seen);
  new Float64Array(out.buffer, scoresAt, nAffinity).set(u.affinityScores);
  new Float64Array(out.buffer, scoresAt + 8 * nAffinity, nAffinity).set(u.affinityAt);
  if (u.preference !== null) new Float32Array(out.buffer, prefAt, dims).set(u.preference);
  out.set(strings, stringsAt);
  return out;
}

/** A user record's sections, as views of `b`. */
function userSections(b: Uint8Array) {
  const buf = b.buffer;
  const base = b.byteOffset;
  const head = new Int32Array(buf, base, USER_HEADER);
  const nHidden = head[0]!;
  const nSeen = head[1]!;
  const dims = head[2]!;
  const nAffinity = head[3]!;
  const lambda = new Float64Array(buf, base + 4 * USER_HEADER, 1)[0]!;
  const hidden = new Int32Array(buf, base + USER_FIXED, nHidden);
  const seen = new Int32Array(buf, base + USER_FIXED + 4 * nHidden, nSeen);
  const scoresAt = pad8(USER_FIXED + 4 * (nHidden + nSeen));
  const scores = new Float64Array(buf, base + scoresAt, nAffinity);
  const at = new Float64Array(buf, base + scoresAt + 8 * nAffinity, nAffinity);
  const prefAt = scoresAt + 16 * nAffinity;
  const preference = dims < 0 ? null : new Float32Array(buf, base + prefAt, dims);
  const stringsAt = pad8(prefAt + 4 * Math.max(0, dims));
  const [blocked, following, affinityCreators] = JSON.parse(decoder.decode(b.subarray(stringsAt, stringsAt + head[5]!))) as [
    string[],
    string[],
    string[],
  ];
  return {
    key: head[6]!,
    seenPos: head[7]!,
    lambda,
    hidden,
    seen,
    scores,
    at,
    preference,
    blocked,
    following,
    affinityCreators,
    idHash: head[4]! >>> 0,
  };
}

/**
 * Creator affinities as a query reads them: each score `S` last moved at `at` decayed to the latest
 * of the times, `S·e^(−λ·(latest − at))`. The one formula for a user's state wherever it is kept.
 */
export function decayedAffinities(scores: ArrayLike<number>, at: ArrayLike<number>, lambda: number): Float64Array {
  let ref = -Infinity;
  for (let i = 0; i < at.length; i++) if (at[i]! > ref) ref = at[i]!;
  const out = new Float64Array(scores.length);
  for (let i = 0; i < scores.length; i++) out[i] = scores[i]! * Math.exp(-lambda * (ref - at[i]!));
  return out;
}

/**
 * A user record as the state a query reads (`seen` and `following` always filled; the caller drops
 * what the query does not use): the affinities decayed to the latest of their times, as the
 * database's thread computes them.
 */
export function decodeUserState(b: Uint8Array): UserQueryState {
  const s = userSections(b);
  const affinityScores = decayedAffinities(s.scores, s.at, s.lambda);
  return {
    hidden: s.hidden,
    blocked: s.blocked,
    seen: s.seen,
    following: s.following,
    preference: s.preference,
    affinityCreators: s.affinityCreators,
    affinityScores,
    idHash: s.idHash,
  };
}

/** A user record as the whole state, every array a copy of its own (the database's thread changes it). */
export function decodeUserRecord(b: Uint8Array): UserRecord {
  const s = userSections(b);
  return {
    key: s.key,
    seenPos: s.seenPos,
    hidden: s.hidden.slice(),
    blocked: s.blocked,
    seen: s.seen.slice(),
    following: s.following,
    preference: s.preference === null ? null : s.preference.slice(),
    affinityCreators: s.affinityCreators,
    affinityScores: s.scores.slice(),
    affinityAt: s.at.slice(),
    lambda: s.lambda,
    idHash: s.idHash,
  };
}

/** What a query of another thread needs of an open session. */
export interface SessionRecord {
  readonly agentId: string;
  /** When the session expires unless a signal of it commits first (epoch ms). */
  readonly expiresAt: number;
  /** The ordinals the session signalled: a retrieve with it leaves them out. */
  readonly seen: Int32Array;
}

export function encodeSession(s: SessionRecord): Uint8Array {
  const agent = encoder.encode(s.agentId);
  const agentAt = pad8(16 + 4 * s.seen.length);
  const out = new Uint8Array(agentAt + agent.length);
  const dv = new DataView(out.buffer);
  dv.setFloat64(0, s.expiresAt, true);
  dv.setInt32(8, s.seen.length, true);
  dv.setInt32(12, agent.length, true);
  new Int32Array(out.buffer, 16, s.seen.length).set(s.seen);
  out.set(agent, agentAt);
  return out;
}

export function decodeSession(b: Uint8Array): SessionRecord {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const n = dv.getInt32(8, true);
  const agentAt = pad8(16 + 4 * n);
  return {
    expiresAt: dv.getFloat64(0, true),
    seen: new Int32Array(b.buffer, b.byteOffset + 16, n),
    agentId: decoder.decode(b.subarray(agentAt, agentAt + dv.getInt32(12, true))),
  };
}

export function encodeRelated(t: RelatedTask): Uint8Array {
  const out = new Uint8Array(24 + 8 * t.n);
  const dv = new DataView(out.buffer);
  dv.setInt32(0, t.item, true);
  dv.setInt32(4, t.n, true);
  dv.setFloat64(8, t.lambda, true);
  dv.setFloat64(16, t.at, true);
  new Int32Array(out.buffer, 24, t.n).set(t.partners.subarray(0, t.n));
  new Float32Array(out.buffer, 24 + 4 * t.n, t.n).set(t.scores.subarray(0, t.n));
  return out;
}

export function decodeRelated(b: Uint8Array): RelatedTask {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const n = dv.getInt32(4, true);
  return {
    item: dv.getInt32(0, true),
    n,
    lambda: dv.getFloat64(8, true),
    at: dv.getFloat64(16, true),
    partners: new Int32Array(b.buffer, b.byteOffset + 24, n),
    scores: new Float32Array(b.buffer, b.byteOffset + 24 + 4 * n, n),
  };
}
