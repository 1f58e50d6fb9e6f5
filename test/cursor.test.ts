/**
 * Cursor pagination: pages of a retrieve or search are disjoint and, together, the unpaged ranking
 * at the clock the first page ran at (property-tested over random corpora, profiles, page sizes
 * and levels, with the clock moving between pages); signals arriving between pages never make a
 * page repeat an item; a tampered cursor, one from another query or another database is refused.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidInputError, TidalDb, type RetrieveRequest } from 'tidal-core';
import { NOW, TestClock, parseObject } from './helpers.js';
import { USER_SCHEMA } from './user-helpers.js';

const SEED = Number(process.env.TIDAL_FUZZ_SEED ?? 20250101);
const N = 60;
const clock = new TestClock(NOW);
let db: TidalDb;
let other: TidalDb;

beforeAll(async () => {
  const open = (): Promise<TidalDb> => TidalDb.builder().ephemeral().workers(1).clock(clock.read).schema(USER_SCHEMA).open();
  [db, other] = await Promise.all([open(), open()]);
  await db.upsertItems(
    Array.from({ length: N }, (_, i) => ({
      id: `i${i}`,
      text: `tune number ${i} ${i % 2 ? 'odd' : 'even'}`,
      embedding: [Math.cos(i), Math.sin(i), 0.3],
      metadata: { creator: `c${i % 5}`, category: i % 3 ? 'a' : 'b' },
      createdAt: NOW - i * 7 * 60_000,
    })),
  );
  await db.signals(
    Array.from({ length: 400 }, (_, n) => ({
      item: `i${(n * 13) % N}`,
      kind: n % 3 ? 'view' : 'like',
      at: NOW - ((n * 37) % 180) * 60_000,
    })),
  );
  await db.upsertUsers([{ id: 'u' }]);
  await db.signal({ item: 'i3', kind: 'like', user: 'u' });
  await db.hide({ user: 'u', item: 'i5' });
  await db.follow({ user: 'u', creator: 'c1' });
  await db.follow({ user: 'u', creator: 'c2' });
  // Co-engagement around i3 for profile related: u's recent items pair with each new one.
  await db.signals(Array.from({ length: 60 }, (_, n) => ({ item: n % 2 ? 'i3' : `i${(n * 11) % N}`, kind: 'view', user: 'u' })));
  await other.upsertItems([{ id: 'i0' }]);
});
afterAll(async () => {
  await Promise.all([db?.close(), other?.close()]);
});

type Req = Omit<RetrieveRequest, 'limit' | 'cursor'>;
const REQUESTS: Req[] = [
  { profile: 'popular' },
  { profile: 'trending' },
  { profile: 'new', filter: { category: 'a' } },
  { profile: 'popular', context: [1, 0, 0] },
  { profile: 'popular', user: 'u' },
  { profile: 'for_you', user: 'u', explore: 0 },
  { profile: 'following', user: 'u' },
  { profile: 'following', user: 'u', order: 'popular' },
  { profile: 'hot' },
  { profile: 'rising', window: '24h' },
  { profile: 'top', window: '7d' },
  { profile: 'related', item: 'i3' },
];

async function pages(req: Req, limit: number, between: () => Promise<void>): Promise<string[][]> {
  const out: string[][] = [];
  let cursor: string | undefined;
  for (let i = 0; i < 1000; i++) {
    const r = await db.retrieve({ ...req, limit, ...(cursor === undefined ? {} : { cursor }) });
    out.push(r.items.map((x) => x.id));
    if (r.nextCursor === null) break;
    cursor = r.nextCursor;
    await between();
  }
  return out;
}

describe('cursor pagination', () => {
  it('pages are disjoint and together equal the unpaged ranking at the first page’s clock (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.nat(REQUESTS.length - 1),
        fc.integer({ min: 1, max: 12 }),
        fc.constantFrom('Full' as const, 'NoDiversity' as const),
        async (q, limit, level) => {
          const req = { ...REQUESTS[q]!, level };
          const start = clock.now;
          const unpaged = (await db.retrieve({ ...req, limit: 1000 })).items.map((x) => x.id);
          // The clock moves between pages; the pages still rank as of the first.
          const got = await pages(req, limit, async () => clock.advance(10 * 60_000));
          clock.set(start);
          const flat = got.flat();
          expect(new Set(flat).size).toBe(flat.length);
          expect(flat).toEqual(unpaged.slice(0, flat.length));
          expect(flat.length).toBe(unpaged.length);
        },
      ),
      { seed: SEED, numRuns: 25 },
    );
  }, 120_000);

  it('search pages too', async () => {
    const unpaged = (await db.search({ text: 'tune odd', vector: [0, 1, 0], limit: 1000 })).hits.map((h) => h.id);
    const seen: string[] = [];
    let cursor: string | undefined;
    for (;;) {
      const r = await db.search({ text: 'tune odd', vector: [0, 1, 0], limit: 7, ...(cursor ? { cursor } : {}) });
      seen.push(...r.hits.map((h) => h.id));
      if (!r.nextCursor) break;
      cursor = r.nextCursor;
    }
    expect(seen).toEqual(unpaged);
  });

  it('no page repeats an item while signals keep arriving', async () => {
    const got = await pages({ profile: 'trending' }, 5, async () => {
      await db.signals(Array.from({ length: 20 }, (_, n) => ({ item: `i${(n * 7) % N}`, kind: 'view' })));
    });
    const flat = got.flat();
    expect(flat.length).toBeGreaterThan(10);
    expect(new Set(flat).size).toBe(flat.length);
  });

  it('refuses a tampered cursor, one from another query and one from another database', async () => {
    const first = await db.retrieve({ profile: 'popular', limit: 3 });
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
    const first = await db.retrieve({ profile: 'popular', limit: 3 });
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
    // The cursor is built on first read: it must pin the first page's clock and items however
    // late that read comes (here after the clock moved and signals arrived).
    const a = await db.retrieve({ profile: 'popular', limit: 3 });
    const b = await db.retrieve({ profile: 'popular', limit: 3 });
    clock.advance(60_000);
    await db.signals(Array.from({ length: 30 }, (_, n) => ({ item: `i${(n * 3) % N}`, kind: 'like' })));
    const late = a.nextCursor!;
    expect(typeof late).toBe('string');
    expect(parseObject(JSON.stringify(b)).nextCursor).toBe(late);
    expect({ ...b }.nextCursor).toBe(late);
    const fromLate = await db.retrieve({ profile: 'popular', limit: 3, cursor: late });
    expect(fromLate.items.map((i) => i.id).some((id) => a.items.some((f) => f.id === id))).toBe(false);
    // A caller may overwrite the field like any other.
    b.nextCursor = null;
    expect(b.nextCursor).toBeNull();
    const s = await db.search({ text: 'tune', limit: 2 });
    expect(parseObject(JSON.stringify(s)).nextCursor).toBe(s.nextCursor);
    expect(s.nextCursor).not.toBeNull();
  });
});

describe('asJson', () => {
  it("returns every profile's items (and search's hits) as the JSON of what it returns without it, with the same cursor", async () => {
    for (const req of REQUESTS) {
      const plain = await db.retrieve({ ...req, limit: 4 });
      const json = await db.retrieve({ ...req, limit: 4, asJson: true });
      expect(json.items, req.profile).toEqual([]);
      expect(JSON.parse(json.itemsJson!), req.profile).toEqual(JSON.parse(JSON.stringify(plain.items)));
      expect(json.nextCursor, req.profile).toBe(plain.nextCursor);
      expect(json.degradationLevel).toBe(plain.degradationLevel);
    }
    const plain = await db.search({ text: 'tune', limit: 3 });
    const json = await db.search({ text: 'tune', limit: 3, asJson: true });
    expect(json.hits).toEqual([]);
    expect(JSON.parse(json.hitsJson!)).toEqual(JSON.parse(JSON.stringify(plain.hits)));
    expect(json.nextCursor).toBe(plain.nextCursor);
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
