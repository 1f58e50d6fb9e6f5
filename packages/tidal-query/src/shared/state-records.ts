import type { RelatedTask, UserQueryState } from '../types.js';

/*
 * The byte layouts of the per-process read state kept in shared records (records.ts): a user's
 * query state, an open session, an item's co-engagement list. Each is written by the database's
 * thread after a commit and decoded by whichever thread answers a query; a decoded value's typed
 * arrays are views of the reader's private copy, so nothing is copied twice.
 *
 * user (little-endian, 8-byte aligned sections):
 *   Int32 × 8: hidden count, seen count, preference dims (−1: none), affinity count, id hash,
 *              string bytes, 0, 0
 *   Int32 hidden[], Int32 seen[] (padded to 8), Float64 affinity scores[], Float32 preference[]
 *   (padded to 8), UTF-8 JSON [blocked, following, affinity creators]
 * session:  Float64 expiresAt, Int32 seen count, Int32 agent bytes, Int32 seen[] (padded to 8), UTF-8 agent id
 * related:  Int32 item ordinal, Int32 n, Float64 lambda, Float64 at, Int32 partners[n], Float32 scores[n]
 */

const USER_HEADER = 8;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function pad8(n: number): number {
  return (n + 7) & ~7;
}

/** The user state a query reads, as a record (see the layout above). */
export function encodeUserState(u: UserQueryState): Uint8Array {
  const strings = encoder.encode(JSON.stringify([u.blocked, u.following ?? [], u.affinityCreators]));
  const seen = u.seen ?? new Int32Array(0);
  const dims = u.preference === null ? -1 : u.preference.length;
  const ints = 4 * (USER_HEADER + u.hidden.length + seen.length);
  const scoresAt = pad8(ints);
  const prefAt = scoresAt + 8 * u.affinityScores.length;
  const stringsAt = pad8(prefAt + 4 * Math.max(0, dims));
  const out = new Uint8Array(stringsAt + strings.length);
  const head = new Int32Array(out.buffer, 0, USER_HEADER);
  head.set([u.hidden.length, seen.length, dims, u.affinityScores.length, u.idHash | 0, strings.length]);
  new Int32Array(out.buffer, 4 * USER_HEADER, u.hidden.length).set(u.hidden);
  new Int32Array(out.buffer, 4 * (USER_HEADER + u.hidden.length), seen.length).set(seen);
  new Float64Array(out.buffer, scoresAt, u.affinityScores.length).set(u.affinityScores);
  if (u.preference !== null) new Float32Array(out.buffer, prefAt, dims).set(u.preference);
  out.set(strings, stringsAt);
  return out;
}

/** A user record as the state a query reads (`seen` and `following` always filled; the caller drops what the query does not use). */
export function decodeUserState(b: Uint8Array): UserQueryState {
  const buf = b.buffer;
  const base = b.byteOffset;
  const head = new Int32Array(buf, base, USER_HEADER);
  const [nHidden, nSeen, dims, nAffinity, idHash, nStrings] = head as unknown as [number, number, number, number, number, number];
  const hidden = new Int32Array(buf, base + 4 * USER_HEADER, nHidden);
  const seen = new Int32Array(buf, base + 4 * (USER_HEADER + nHidden), nSeen);
  const scoresAt = pad8(4 * (USER_HEADER + nHidden + nSeen));
  const affinityScores = new Float64Array(buf, base + scoresAt, nAffinity);
  const prefAt = scoresAt + 8 * nAffinity;
  const preference = dims < 0 ? null : new Float32Array(buf, base + prefAt, dims);
  const stringsAt = pad8(prefAt + 4 * Math.max(0, dims));
  const [blocked, following, affinityCreators] = JSON.parse(decoder.decode(b.subarray(stringsAt, stringsAt + nStrings))) as [
    string[],
    string[],
    string[],
  ];
  return { hidden, blocked, seen, following, preference, affinityCreators, affinityScores, idHash: idHash >>> 0 };
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
