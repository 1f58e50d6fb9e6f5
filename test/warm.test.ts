/**
 * What warm() builds in every query worker: after it, no query builds a worker structure on first
 * use (the created order, the creator lists, the int8 item vectors, the popular subset, a text
 * term's block summaries), counted by each query's `explain.lazyBuilds` and each worker's
 * `WarmResult`; a query after a bulk write with no warm between does build, and a small write is
 * patched in, not built again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TidalDb, type RetrieveRequest, type SearchRequest } from 'tidal-core';
import { HOUR, NOW, TestClock, mulberry32 } from './helpers.js';
import { USER_SCHEMA } from './user-helpers.js';

const rand = mulberry32(0x3a3a);
const WORDS = ['river', 'stone', 'piano', 'jazz', 'garden', 'night', 'train', 'window'];
const CREATORS = ['c0', 'c1', 'c2', 'c3', 'c4', 'c5'];
const N = 300;
const vector = (): number[] => [rand() - 0.5, rand() - 0.5, rand() - 0.5];
const items = (from: number, count: number) =>
  Array.from({ length: count }, (_, k) => {
    const i = from + k;
    return {
      id: `w${i}`,
      text: `${WORDS[i % WORDS.length]} ${WORDS[(i * 3 + 1) % WORDS.length]} ${WORDS[(i * 5 + 2) % WORDS.length]}`,
      metadata: { category: i % 2 === 0 ? 'a' : 'b', creator: CREATORS[i % CREATORS.length]! },
      createdAt: NOW - i * 60_000,
      embedding: vector(),
    };
  });
const USERS = ['u0', 'u1', 'u2', 'u3'];

const QUERIES: (RetrieveRequest | SearchRequest)[] = [
  { profile: 'trending', limit: 5 },
  { profile: 'popular', limit: 5 },
  { profile: 'popular', context: [1, 0, 0], limit: 5 },
  { profile: 'new', limit: 5 },
  { profile: 'for_you', user: 'u0', limit: 5 },
  { profile: 'following', user: 'u1', limit: 5 },
  { profile: 'hot', limit: 5 },
  { profile: 'rising', limit: 5 },
  { profile: 'top', limit: 5 },
  { profile: 'related', item: 'w0', limit: 5 },
  { text: 'piano jazz', limit: 5 },
  { vector: [0, 1, 0], limit: 5 },
  { text: 'garden night', vector: [0, 0, 1], limit: 5 },
];

/** `explain.lazyBuilds` of four of `q` at once, so each of the two workers runs some. */
async function lazyBuilds(db: TidalDb, q: RetrieveRequest | SearchRequest): Promise<number[]> {
  const run = () => ('profile' in q ? db.retrieve(q) : db.search(q));
  const rs = await Promise.all([run(), run(), run(), run()]);
  return rs.map((r) => r.explain.lazyBuilds ?? -1);
}

const clock = new TestClock(NOW);
let db: TidalDb;

beforeAll(async () => {
  db = await TidalDb.builder()
    .ephemeral()
    .workers(2)
    .clock(clock.read)
    .schema(USER_SCHEMA)
    .capacity({ items: 4096, signalSlots: 8192 })
    .open();
  await db.upsertItems(items(0, N));
  await db.upsertUsers(USERS.map((id) => ({ id, embedding: vector() })));
  const signals = [];
  for (let n = 0; n < 1500; n++) {
    const i = Math.floor(rand() ** 2 * N);
    signals.push({ item: `w${i}`, kind: rand() < 0.7 ? 'view' : 'like', at: NOW - Math.floor(rand() * 20 * HOUR) });
  }
  // Users who engaged w0 with a few others: w0's co-engagement list, for `related`.
  for (const user of USERS) for (const i of [0, 1, 2, 3]) signals.push({ item: `w${i}`, kind: 'like', user, at: NOW - HOUR });
  await db.signals(signals);
  for (const user of USERS) await db.follow({ user, creator: 'c1' });
});
afterAll(async () => {
  await db?.close();
});

describe('warm()', () => {
  it('builds each worker structure in every worker, and no query after it builds one', async () => {
    const warmed = await db.warm();
    expect(warmed).toHaveLength(2);
    for (const w of warmed) {
      // The created order, the creator lists, the popular subset (the int8 item vectors are kept
      // by the catalog sync as it reads the rows, so no pass of their own builds them).
      expect(w.structuresBuilt).toBe(3);
      expect(w.termsSummarized).toBe(WORDS.length);
      expect(w.pathsRun).toBeGreaterThan(QUERIES.length);
    }
    for (const q of QUERIES) expect({ q, builds: await lazyBuilds(db, q) }).toEqual({ q, builds: [0, 0, 0, 0] });
  });

  it('a warm with nothing new to build builds nothing', async () => {
    const warmed = await db.warm();
    for (const w of warmed) expect([w.structuresBuilt, w.termsSummarized]).toEqual([0, 0]);
  });

  it('a small write after warm is patched in: the next queries build nothing', async () => {
    await db.upsertItems(items(N, 2));
    for (const q of QUERIES) expect({ q, builds: await lazyBuilds(db, q) }).toEqual({ q, builds: [0, 0, 0, 0] });
  });

  it('after a bulk write with no warm, a first query builds; a warm builds instead', async () => {
    await db.upsertItems(items(N + 2, N));
    // More than an eighth of the items changed: the created order is sorted again, on first use.
    const builds = await lazyBuilds(db, { profile: 'new', limit: 5 });
    expect(builds.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect(builds.every((b) => b >= 0)).toBe(true);
    // warm() builds them instead.
    await db.upsertItems(items(2 * N + 2, N));
    const warmed = await db.warm();
    for (const w of warmed) expect(w.structuresBuilt).toBeGreaterThan(0);
    for (const q of QUERIES) expect({ q, builds: await lazyBuilds(db, q) }).toEqual({ q, builds: [0, 0, 0, 0] });
  });
});
