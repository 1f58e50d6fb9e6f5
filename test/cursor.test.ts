/**
 * Cursor chains: a query with `paginate: true` ranks `cursors.depth` items at its first page and the
 * database keeps what follows the page; every later page is cut from that ranking. So, whatever is
 * written between the pages, they are disjoint and together they are the unpaged query as it
 * answered at the first page (every profile, every level, search too; property-tested over random
 * interleavings of writes and page requests). Items deleted, hidden or of a blocked creator after
 * the first page leave the later pages. A ranking past its TTL, evicted by the count or bytes
 * bound, or made before a reopen is refused with CursorExpiredError; a tampered cursor, one from
 * another query or another database with InvalidInputError.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import {
  CURSOR_DEFAULTS,
  CursorExpiredError,
  InvalidInputError,
  TidalDb,
  type CursorOptions,
  type DegradationLevelName,
  type RetrieveRequest,
  type SearchRequest,
} from 'tidal-core';
import { NOW, TestClock, parseObject } from './helpers.js';
import { USER_SCHEMA } from './user-helpers.js';

const SEED = Number(process.env.TIDAL_FUZZ_SEED ?? 20250101);
const N = 60;
const LEVELS: DegradationLevelName[] = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'];
const clock = new TestClock(NOW);
let db: TidalDb;
let other: TidalDb;

function open(cursors?: CursorOptions, c: TestClock = clock): Promise<TidalDb> {
  const b = TidalDb.builder().ephemeral().workers(1).clock(c.read).schema(USER_SCHEMA);
  return (cursors ? b.cursors(cursors) : b).open();
}

const ITEMS = Array.from({ length: N }, (_, i) => ({
  id: `i${i}`,
  text: `tune number ${i} ${i % 2 ? 'odd' : 'even'}`,
  embedding: [Math.cos(i), Math.sin(i), 0.3],
  metadata: { creator: `c${i % 5}`, category: i % 3 ? 'a' : 'b' },
  createdAt: NOW - i * 7 * 60_000,
}));

async function fill(d: TidalDb): Promise<void> {
  await d.upsertItems(ITEMS);
  await d.signals(
    Array.from({ length: 400 }, (_, n) => ({
      item: `i${(n * 13) % N}`,
      kind: n % 3 ? 'view' : 'like',
      at: NOW - ((n * 37) % 180) * 60_000,
    })),
  );
  await d.upsertUsers([{ id: 'u' }]);
  await d.signal({ item: 'i3', kind: 'like', user: 'u' });
  await d.hide({ user: 'u', item: 'i5' });
  await d.follow({ user: 'u', creator: 'c1' });
  await d.follow({ user: 'u', creator: 'c2' });
  // Co-engagement around i3 for profile related: u's recent items pair with each new one.
  await d.signals(Array.from({ length: 60 }, (_, n) => ({ item: n % 2 ? 'i3' : `i${(n * 11) % N}`, kind: 'view', user: 'u' })));
}

beforeAll(async () => {
  [db, other] = await Promise.all([open(), open()]);
  await fill(db);
  await other.upsertItems([{ id: 'i0' }]);
});
afterAll(async () => {
  await Promise.all([db?.close(), other?.close()]);
});

// Requests without limit, cursor or paginate, which each test adds.
type Req = RetrieveRequest;
const REQUESTS: Req[] = [
  { profile: 'popular' },
  { profile: 'trending' },
  { profile: 'new', filter: { category: 'a' } },
  { profile: 'popular', context: [1, 0, 0] },
  { profile: 'popular', user: 'u' },
  { profile: 'popular', diversity: { maxPer: { creator: 3 } } },
  { profile: 'for_you', user: 'u', explore: 0 },
  { profile: 'for_you', user: 'u', userFilter: { unseen: true } },
  { profile: 'following', user: 'u' },
  { profile: 'following', user: 'u', order: 'popular' },
  { profile: 'hot' },
  { profile: 'rising', window: '24h' },
  { profile: 'top', window: '7d' },
  { profile: 'related', item: 'i3' },
];

/** Signals that reorder the rankings: a burst on items from the bottom of most of them. */
let burst = 0;
async function reorder(d: TidalDb = db): Promise<void> {
  burst++;
  await d.signals(
    Array.from({ length: 24 }, (_, n) => ({ item: `i${(burst * 17 + n * 7) % N}`, kind: n % 4 ? 'view' : 'like', at: clock.now })),
  );
}

type Page = { items?: { id: string }[]; hits?: { id: string }[]; nextCursor: string | null };
const rowsOf = (p: Page) => (p.items ?? p.hits)!;

/** Every page of one chain, `between` awaited between two pages. */
async function chain(
  query: (cursor: string | undefined, i: number) => Promise<Page>,
  between: () => Promise<void>,
): Promise<{ rows: unknown[]; pages: number }> {
  const rows: unknown[] = [];
  let cursor: string | undefined;
  let pages = 0;
  for (; pages < 1000;) {
    const r = await query(cursor, pages);
    pages++;
    rows.push(...rowsOf(r));
    if (r.nextCursor === null) break;
    cursor = r.nextCursor;
    await between();
  }
  return { rows, pages };
}

const retrievePages = (d: TidalDb, req: Req, limits: (i: number) => number) => (cursor: string | undefined, i: number) =>
  d.retrieve({ ...req, limit: limits(i), ...(cursor === undefined ? { paginate: true } : { cursor }) });

const ids = (rows: readonly unknown[]) => rows.map((r) => (r as { id: string }).id);

describe('cursor chains pin their ranking', () => {
  it('the minimal case: a, b, c ranked by views; five views of c between the pages leave page 2 [b, c]', async () => {
    const c = new TestClock(NOW);
    const d = await open(undefined, c);
    try {
      await d.upsertItems([{ id: 'a' }, { id: 'b' }, { id: 'c' }]);
      await d.signals([
        ...Array.from({ length: 3 }, () => ({ item: 'a', kind: 'view' })),
        ...Array.from({ length: 2 }, () => ({ item: 'b', kind: 'view' })),
        { item: 'c', kind: 'view' },
      ]);
      const before = await d.retrieve({ profile: 'popular', limit: 3 });
      const page1 = await d.retrieve({ profile: 'popular', limit: 1, paginate: true });
      expect(page1.items.map((i) => i.id)).toEqual(['a']);
      await d.signals(Array.from({ length: 5 }, () => ({ item: 'c', kind: 'view' })));
      expect((await d.retrieve({ profile: 'popular', limit: 3 })).items.map((i) => i.id)).toEqual(['c', 'a', 'b']);
      const page2 = await d.retrieve({ profile: 'popular', limit: 2, paginate: true, cursor: page1.nextCursor! });
      expect(page2.items.map((i) => i.id)).toEqual(['b', 'c']);
      // As page 1 ranked them: c's score and signals are those of its single view, not of its six.
      expect(page2.items).toEqual(before.items.slice(1));
      expect(page2.items.map((i) => i.rank)).toEqual([2, 3]);
      expect(page2.nextCursor).toBeNull();
    } finally {
      await d.close();
    }
  });

  it('every profile at every level: with signals between the pages, the pages are the unpaged query at the first page', async () => {
    for (const level of LEVELS) {
      for (const req of REQUESTS) {
        // Past the stalest kept result (1 s at NoDiversity): each unpaged query ranks for itself.
        clock.advance(5_000);
        const unpaged = await db.retrieve({ ...req, level, limit: CURSOR_DEFAULTS.depth });
        const got = await chain(
          retrievePages(db, { ...req, level }, (i) => [3, 5, 2][i % 3]!),
          () => reorder(),
        );
        const what = `${req.profile} ${JSON.stringify(req)} at ${level}`;
        expect(new Set(ids(got.rows)).size, what).toBe(got.rows.length);
        // Rows as the unpaged query answered them: ids, scores, ranks and signals.
        expect(got.rows, what).toEqual(unpaged.items);
        if (unpaged.items.length > 3) expect(got.pages, what).toBeGreaterThan(1);
      }
    }
  }, 120_000);

  it('search pages too (text, vector, hybrid, boosted), at every level', async () => {
    const searches: SearchRequest[] = [
      { text: 'tune odd' },
      { vector: [0, 1, 0] },
      { text: 'tune odd', vector: [0, 1, 0] },
      { text: 'tune', boost: 2 },
      { text: 'tune', user: 'u' },
    ];
    for (const level of LEVELS) {
      for (const req of searches) {
        clock.advance(5_000);
        const unpaged = await db.search({ ...req, level, limit: CURSOR_DEFAULTS.depth });
        const got = await chain(
          (cursor) => db.search({ ...req, level, limit: 7, ...(cursor === undefined ? { paginate: true } : { cursor }) }),
          () => reorder(),
        );
        expect(got.rows, `${JSON.stringify(req)} at ${level}`).toEqual(unpaged.hits);
      }
    }
  }, 180_000);

  it('random interleavings of writes and page requests over several chains (property)', async () => {
    type Op =
      | { op: 'start'; q: number; level: number; limit: number }
      | { op: 'page'; chain: number; limit: number }
      | { op: 'write'; n: number }
      | { op: 'tick'; ms: number };
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({
        op: fc.constant('start' as const),
        q: fc.nat(REQUESTS.length - 1),
        level: fc.nat(LEVELS.length - 1),
        limit: fc.integer({ min: 1, max: 9 }),
      }),
      fc.record({ op: fc.constant('page' as const), chain: fc.nat(5), limit: fc.integer({ min: 1, max: 9 }) }),
      fc.record({ op: fc.constant('write' as const), n: fc.integer({ min: 1, max: 30 }) }),
      fc.record({ op: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 120_000 }) }),
    );
    // Its own database, with bounds no run reaches (25 ticks of at most 2 minutes): what is
    // checked is the pinning, the bounds are tested below.
    const d = await open({ ttlMs: CURSOR_DEFAULTS.maxTtlMs, maxBytes: 2 ** 30 });
    onTestFinished(() => d.close());
    await fill(d);
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
        interface Open {
          req: Req;
          want: unknown[];
          got: unknown[];
          cursor: string | null;
        }
        const chains: Open[] = [];
        for (const o of ops) {
          if (o.op === 'start') {
            const req = { ...REQUESTS[o.q]!, level: LEVELS[o.level]! };
            clock.advance(2_000);
            const want = (await d.retrieve({ ...req, limit: CURSOR_DEFAULTS.depth })).items;
            const p = await d.retrieve({ ...req, limit: o.limit, paginate: true });
            chains.push({ req, want, got: [...p.items], cursor: p.nextCursor });
          } else if (o.op === 'page') {
            const c = chains[o.chain % Math.max(1, chains.length)];
            if (c === undefined || c.cursor === null) continue;
            const p = await d.retrieve({ ...c.req, limit: o.limit, cursor: c.cursor });
            c.got.push(...p.items);
            c.cursor = p.nextCursor;
          } else if (o.op === 'write') {
            await d.signals(Array.from({ length: o.n }, (_, k) => ({ item: `i${(k * 29 + o.n) % N}`, kind: k % 3 ? 'view' : 'like' })));
          } else clock.advance(o.ms);
        }
        for (const c of chains) {
          // A chain read so far is the head of its first page's ranking; one read to its end is all of it.
          expect(c.got).toEqual(c.want.slice(0, c.got.length));
          if (c.cursor === null) expect(c.got.length).toBe(c.want.length);
        }
      }),
      { seed: SEED, numRuns: 30 },
    );
    expect(d.stats().cursors.evicted + d.stats().cursors.expired).toBe(0);
  }, 120_000);

  it('the pages after the first drop what was deleted, hidden or blocked since, and keep the rest in order', async () => {
    const d = await open();
    try {
      await fill(d);
      const req = { profile: 'popular' as const, user: 'u' };
      const unpaged = ids((await d.retrieve({ ...req, limit: CURSOR_DEFAULTS.depth })).items);
      const page1 = await d.retrieve({ ...req, limit: 4, paginate: true });
      const rest = unpaged.slice(4);
      const [hidden, deleted] = [rest[0]!, rest[3]!];
      const blocked = ITEMS.find((i) => i.id === rest[1])!.metadata.creator;
      await d.hide({ user: 'u', item: hidden });
      await d.delete(deleted);
      await d.block({ user: 'u', creator: blocked });
      const creatorOf = (id: string) => ITEMS.find((i) => i.id === id)!.metadata.creator;
      const kept = rest.filter((id) => id !== hidden && id !== deleted && creatorOf(id) !== blocked);
      expect(kept.length).toBeLessThan(rest.length - 2);
      const got = await chain(
        (cursor, i) => (i === 0 ? Promise.resolve(page1) : d.retrieve({ ...req, limit: 4, cursor: cursor! })),
        async () => {},
      );
      expect(ids(got.rows)).toEqual([...unpaged.slice(0, 4), ...kept]);
      // Without a user, a deleted item leaves the chain too.
      const anon = await d.retrieve({ profile: 'popular', limit: 2, paginate: true });
      const anonAll = ids((await d.retrieve({ profile: 'popular', limit: CURSOR_DEFAULTS.depth })).items);
      await d.delete(anonAll[2]!);
      const next = await d.retrieve({ profile: 'popular', limit: 2, cursor: anon.nextCursor! });
      expect(ids(next.items)).toEqual([anonAll[3], anonAll[4]]);
    } finally {
      await d.close();
    }
  });

  it("a later page has the first page's level, reason, warnings and explain, whatever level it asks for", async () => {
    const first = await db.retrieve({ profile: 'popular', limit: 3, level: 'NoDiversity', paginate: true });
    const next = await db.retrieve({ profile: 'popular', limit: 3, level: 'Full', cursor: first.nextCursor! });
    expect(next.degradationLevel).toBe(first.degradationLevel);
    expect(next.levelReason).toBe('requested');
    expect(next.explain).toEqual(first.explain);
    expect(next.warnings).toEqual(first.warnings);
  });

  it('a search chain drops the hits the user hid after its first page', async () => {
    const d = await open();
    try {
      await fill(d);
      const req = { text: 'tune', user: 'u' };
      const all = ids((await d.search({ ...req, limit: CURSOR_DEFAULTS.depth })).hits);
      const first = await d.search({ ...req, limit: 2, paginate: true });
      await d.hide({ user: 'u', item: all[3]! });
      const next = await d.search({ ...req, limit: 3, cursor: first.nextCursor! });
      expect(ids(next.hits)).toEqual([all[2], all[4], all[5]]);
    } finally {
      await d.close();
    }
  });

  it('a chain ends at cursors.depth items; a first page as long as the depth has no cursor; no paginate, no cursor', async () => {
    const d = await open({ depth: 10 });
    try {
      await fill(d);
      const got = await chain(
        retrievePages(d, { profile: 'popular' }, () => 4),
        async () => {},
      );
      expect(got.rows).toHaveLength(10);
      expect(got.pages).toBe(3);
      expect((await d.retrieve({ profile: 'popular', limit: 10, paginate: true })).nextCursor).toBeNull();
      expect((await d.retrieve({ profile: 'popular', limit: 3 })).nextCursor).toBeNull();
      expect((await d.retrieve({ profile: 'popular', limit: 3, paginate: false })).nextCursor).toBeNull();
      expect(d.stats().cursors.pinned).toBe(1);
    } finally {
      await d.close();
    }
  });
});

describe('pinned rankings are bounded', () => {
  const expired = (reason: string) => (err: unknown) =>
    CursorExpiredError.is(err) && err.code === 'TIDAL_CURSOR_EXPIRED' && err.field === 'cursor' && err.reason === reason;

  it('a ranking lives cursors.ttlMs after its last page, on the database clock', async () => {
    const c = new TestClock(NOW);
    const d = await open({ ttlMs: 60_000 }, c);
    try {
      await fill(d);
      const page1 = await d.retrieve({ profile: 'popular', limit: 2, paginate: true });
      c.advance(59_999);
      // Each page renews the TTL.
      const page2 = await d.retrieve({ profile: 'popular', limit: 2, cursor: page1.nextCursor! });
      c.advance(59_999);
      const page3 = await d.retrieve({ profile: 'popular', limit: 2, cursor: page2.nextCursor! });
      expect(page3.items).toHaveLength(2);
      expect(page3.ageMs).toBe(2 * 59_999);
      c.advance(60_000);
      const err = await d.retrieve({ profile: 'popular', limit: 2, cursor: page3.nextCursor! }).catch((e: unknown) => e);
      expect(err).toSatisfy(expired('expired'));
      expect((err as Error).message).toMatch(/cursor.*expired.*60000 ms/);
      // An older cursor of the chain is refused the same way.
      await expect(d.retrieve({ profile: 'popular', limit: 2, cursor: page1.nextCursor! })).rejects.toSatisfy(expired('expired'));
      expect(d.stats().cursors).toMatchObject({ pinned: 0, bytes: 0, expired: 1, evicted: 0 });
    } finally {
      await d.close();
    }
  });

  it('past cursors.maxRankings the least recently paged ranking is evicted', async () => {
    const d = await open({ maxRankings: 2 });
    try {
      await fill(d);
      const a = await d.retrieve({ profile: 'popular', limit: 2, paginate: true });
      const b = await d.retrieve({ profile: 'trending', limit: 2, paginate: true });
      // Paging a makes b the least recently paged: c evicts b.
      const a2 = await d.retrieve({ profile: 'popular', limit: 2, cursor: a.nextCursor! });
      const c = await d.retrieve({ profile: 'hot', limit: 2, paginate: true });
      const err = await d.retrieve({ profile: 'trending', limit: 2, cursor: b.nextCursor! }).catch((e: unknown) => e);
      expect(err).toSatisfy(expired('evicted'));
      expect((err as Error).message).toMatch(/evicted.*cursors\.maxRankings \(2\)/);
      await d.retrieve({ profile: 'popular', limit: 2, cursor: a2.nextCursor! });
      await d.retrieve({ profile: 'hot', limit: 2, cursor: c.nextCursor! });
      expect(d.stats().cursors).toMatchObject({ pinned: 2, evicted: 1 });
    } finally {
      await d.close();
    }
  });

  it('past cursors.maxBytes rankings are evicted, and one larger than the bound keeps its head', async () => {
    const probe = await open();
    let perRow: number;
    try {
      await fill(probe);
      await probe.retrieve({ profile: 'popular', limit: 1, paginate: true });
      const s = probe.stats().cursors;
      perRow = s.bytes / 59;
      expect(s.pinned).toBe(1);
    } finally {
      await probe.close();
    }
    // Room for 30 rows: one chain of 59 after its first page keeps 30 of them.
    const d = await open({ maxBytes: Math.ceil(30 * perRow) });
    try {
      await fill(d);
      const long = await chain(
        retrievePages(d, { profile: 'popular' }, () => 1),
        async () => {},
      );
      expect(long.rows).toHaveLength(31);
      const a = await d.retrieve({ profile: 'popular', limit: 40, paginate: true });
      expect(d.stats().cursors.bytes).toBeLessThanOrEqual(Math.ceil(30 * perRow));
      const b = await d.retrieve({ profile: 'new', limit: 40, paginate: true });
      await expect(d.retrieve({ profile: 'popular', limit: 5, cursor: a.nextCursor! })).rejects.toSatisfy(expired('evicted'));
      expect((await d.retrieve({ profile: 'new', limit: 40, cursor: b.nextCursor! })).items).toHaveLength(20);
      const s = d.stats().cursors;
      expect(s.pinned).toBe(1);
      expect(s.evicted).toBe(2);
    } finally {
      await d.close();
    }
  });

  it('a cursor from before a reopen is refused: pinned rankings live in memory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tidal-cursor-'));
    try {
      const openAt = () => TidalDb.builder().path(dir).workers(1).clock(clock.read).schema(USER_SCHEMA).open();
      let d = await openAt();
      await d.upsertItems(ITEMS);
      const page1 = await d.retrieve({ profile: 'new', limit: 2, paginate: true });
      await d.close();
      d = await openAt();
      try {
        const err = await d.retrieve({ profile: 'new', limit: 2, cursor: page1.nextCursor! }).catch((e: unknown) => e);
        expect(err).toSatisfy(expired('reopened'));
        expect((err as Error).message).toMatch(/before it was last opened/);
      } finally {
        await d.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses bad cursor options at open and a paginate that is not a boolean, naming them', async () => {
    const bad: [CursorOptions, string][] = [
      [{ ttlMs: 0 }, 'cursors.ttlMs'],
      [{ depth: 1001 }, 'cursors.depth'],
      [{ maxRankings: 1.5 }, 'cursors.maxRankings'],
      [{ maxBytes: -1 }, 'cursors.maxBytes'],
      [{ depht: 10 } as CursorOptions, 'cursors.depht'],
    ];
    for (const [options, field] of bad) await expect(open(options)).rejects.toMatchObject({ code: 'TIDAL_INVALID_INPUT', field });
    await expect(db.retrieve({ profile: 'popular', paginate: 'yes' as unknown as boolean })).rejects.toMatchObject({
      code: 'TIDAL_INVALID_INPUT',
      field: 'paginate',
    });
  });
});

describe('cursor strings', () => {
  it('refuses a tampered cursor, one from another query and one from another database', async () => {
    const first = await db.retrieve({ profile: 'popular', limit: 3, paginate: true });
    const cursor = first.nextCursor!;
    const refused = (field: string) => (err: unknown) => InvalidInputError.is(err) && err.field === field;
    const [body, mac] = cursor.split('.');
    const flipped = `${body!.slice(0, -2)}${body!.at(-2) === 'A' ? 'B' : 'A'}${body!.at(-1)}.${mac}`;
    await expect(db.retrieve({ profile: 'popular', limit: 3, cursor: flipped })).rejects.toSatisfy(refused('cursor'));
    await expect(db.retrieve({ profile: 'popular', limit: 3, cursor: 'garbage' })).rejects.toSatisfy(refused('cursor'));
    await expect(db.retrieve({ profile: 'trending', limit: 3, cursor })).rejects.toSatisfy(refused('cursor'));
    await expect(db.search({ text: 'tune', cursor })).rejects.toSatisfy(refused('cursor'));
    await expect(other.retrieve({ profile: 'popular', limit: 3, cursor })).rejects.toSatisfy(refused('cursor'));
    // The same query with another page size is the same query.
    const next = await db.retrieve({ profile: 'popular', limit: 4, cursor });
    expect(next.items.map((i) => i.id).some((id) => first.items.some((f) => f.id === id))).toBe(false);
  });

  it('refuses a cursor altered in any character: appended, inserted, replaced, padded', async () => {
    const first = await db.retrieve({ profile: 'popular', limit: 3, paginate: true });
    const cursor = first.nextCursor!;
    await db.retrieve({ profile: 'popular', limit: 3, cursor });
    // Node's base64url decoder skips what is not in its alphabet and ignores padding: each of these
    // decodes to the signed bytes, and each is still another string than the one returned.
    const foreign = ['=', '==', '!', ' ', '+', '/', '\n', 'é', '\u0000'];
    const variants = new Set<string>();
    for (const c of foreign) {
      variants.add(cursor + c);
      const dot = cursor.indexOf('.');
      variants.add(cursor.slice(0, dot) + c + cursor.slice(dot));
      for (const at of [1, Math.floor(cursor.length / 3), cursor.length - 1]) variants.add(cursor.slice(0, at) + c + cursor.slice(at));
    }
    // A change of a character to another of the alphabet, at every position.
    for (let i = 0; i < cursor.length; i++) {
      const ch = cursor[i]!;
      if (ch === '.') continue;
      variants.add(cursor.slice(0, i) + (ch === 'A' ? 'B' : 'A') + cursor.slice(i + 1));
    }
    variants.delete(cursor);
    let refusedAll = 0;
    for (const v of variants) {
      const err = await db.retrieve({ profile: 'popular', limit: 3, cursor: v }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(InvalidInputError.is(err) && err.field === 'cursor', JSON.stringify(v)).toBe(true);
      refusedAll++;
    }
    expect(refusedAll).toBe(variants.size);
  });

  it('a nextCursor read late, copied or serialized is the one the page was answered with', async () => {
    const a = await db.retrieve({ profile: 'popular', limit: 3, paginate: true });
    clock.advance(60_000);
    await reorder();
    const late = a.nextCursor!;
    expect(typeof late).toBe('string');
    expect(parseObject(JSON.stringify(a)).nextCursor).toBe(late);
    expect({ ...a }.nextCursor).toBe(late);
    const fromLate = await db.retrieve({ profile: 'popular', limit: 3, cursor: late });
    expect(fromLate.items.map((i) => i.id).some((id) => a.items.some((f) => f.id === id))).toBe(false);
    // A caller may overwrite the field like any other.
    a.nextCursor = null;
    expect(a.nextCursor).toBeNull();
    const s = await db.search({ text: 'tune', limit: 2, paginate: true });
    expect(parseObject(JSON.stringify(s)).nextCursor).toBe(s.nextCursor);
    expect(s.nextCursor).not.toBeNull();
  });
});

describe('asJson', () => {
  it("returns every profile's items (and search's hits) as the JSON of what it returns without it, on every page of a chain", async () => {
    for (const req of REQUESTS) {
      const plain = await db.retrieve({ ...req, limit: 4 });
      const json = await db.retrieve({ ...req, limit: 4, asJson: true });
      expect(json.items, req.profile).toEqual([]);
      expect(JSON.parse(json.itemsJson!), req.profile).toEqual(JSON.parse(JSON.stringify(plain.items)));
      expect(json.nextCursor).toBeNull();
      expect(json.degradationLevel).toBe(plain.degradationLevel);
      const plainFirst = await db.retrieve({ ...req, limit: 2, paginate: true });
      const first = await db.retrieve({ ...req, limit: 2, asJson: true, paginate: true });
      expect(first.items).toEqual([]);
      expect(JSON.parse(first.itemsJson!), req.profile).toEqual(JSON.parse(JSON.stringify(plainFirst.items)));
      if (first.nextCursor === null) continue;
      const plainSecond = await db.retrieve({ ...req, limit: 2, cursor: plainFirst.nextCursor! });
      const second = await db.retrieve({ ...req, limit: 2, asJson: true, cursor: first.nextCursor });
      expect(second.items).toEqual([]);
      expect(JSON.parse(second.itemsJson!), req.profile).toEqual(JSON.parse(JSON.stringify(plainSecond.items)));
    }
    const plain = await db.search({ text: 'tune', limit: 3 });
    const json = await db.search({ text: 'tune', limit: 3, asJson: true });
    expect(json.hits).toEqual([]);
    expect(JSON.parse(json.hitsJson!)).toEqual(JSON.parse(JSON.stringify(plain.hits)));
  });

  it("at NoDiversity takes a row's signals from an answer a moment before, and counts a signal written since at once", async () => {
    // Work sharing off, so that each query runs: the copies are the query thread's, not a kept result.
    const d = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(clock.read)
      .schema(USER_SCHEMA)
      .workSharing({ maxStalenessMs: { coarseAggregates: 0, noDiversity: 0 } })
      .open();
    onTestFinished(() => d.close());
    await fill(d);
    const req: RetrieveRequest = { profile: 'trending', limit: 6, level: 'NoDiversity', asJson: true };
    const rows = (r: { itemsJson?: string }) => JSON.parse(r.itemsJson!) as { id: string; signals: { view?: { count: number } } }[];
    // The first answer marks its rows, the second keeps their copies, the third takes them.
    const first = await d.retrieve(req);
    expect(first.degradationLevel).toBe(3);
    expect(first.explain.signalsReused).toBe(0);
    const plain = await d.retrieve({ ...req, asJson: false });
    expect(plain.explain.signalsReused).toBeUndefined();
    expect(rows(first)).toEqual(JSON.parse(JSON.stringify(plain.items)));
    expect((await d.retrieve(req)).explain.signalsReused).toBe(0);
    const again = await d.retrieve(req);
    expect(again.explain.signalsReused).toBe(6);
    expect(again.itemsJson).toBe(first.itemsJson);
    const top = rows(first)[0]!;
    await d.signal({ item: top.id, kind: 'view', at: clock.now });
    const after = await d.retrieve(req);
    expect(after.explain.signalsReused).toBe(5);
    const row = rows(after).find((i) => i.id === top.id)!;
    expect(row.signals.view!.count).toBe(top.signals.view!.count + 1);
    expect(row.signals.view!.count).toBe(d.itemSignals(top.id).view!.count);
  });

  it('refuses an asJson that is not a boolean, naming it', async () => {
    await expect(db.retrieve({ profile: 'popular', asJson: 'yes' as unknown as boolean })).rejects.toMatchObject({
      code: 'TIDAL_INVALID_INPUT',
      field: 'asJson',
    });
    await expect(db.search({ text: 'tune', asJson: 1 as unknown as boolean })).rejects.toMatchObject({
      code: 'TIDAL_INVALID_INPUT',
      field: 'asJson',
    });
  });
});
