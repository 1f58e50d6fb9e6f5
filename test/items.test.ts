import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClosedError, InvalidInputError, TidalDb } from 'tidal-core';
import { CORPUS, DAY, NOW, cosine, corpusItem, events, failureOf, idsOf, openCorpusDb, openDb, type TestClock } from './helpers.js';

/** Every profile, with and without a context vector. */
async function retrieveAll(db: TidalDb, context: number[]): Promise<string[][]> {
  const out: string[][] = [];
  for (const profile of ['trending', 'popular', 'new'] as const) {
    out.push(idsOf((await db.retrieve({ profile, limit: 1000 })).items));
    out.push(idsOf((await db.retrieve({ profile, context, limit: 1000 })).items));
  }
  return out;
}

/** The same query `n` times at once, so that it lands on every query worker. */
function onEveryWorker<T>(n: number, query: () => Promise<T>): Promise<T[]> {
  return Promise.all(Array.from({ length: n }, query));
}

describe('items', () => {
  let db: TidalDb;
  let clock: TestClock;

  beforeAll(async () => {
    ({ db, clock } = await openCorpusDb());
  });
  afterAll(async () => {
    await db?.close();
  });

  it('returns an upserted item from get, with createdAt defaulting to the injected clock', async () => {
    clock.set(NOW + 1_000);
    try {
      await db.upsert({
        id: 'fresh',
        text: 'wombat lullaby',
        embedding: [0.05, 0.05, 0.05, -1],
        metadata: { category: 'kids', creator: 'ivan', duration: 95, extra: { nested: [1, 2] } },
      });
      const got = await db.get('fresh');
      expect(got).toBeDefined();
      expect(got!.id).toBe('fresh');
      expect(got!.text).toBe('wombat lullaby');
      expect(got!.metadata).toEqual({ category: 'kids', creator: 'ivan', duration: 95, extra: { nested: [1, 2] } });
      expect(got!.createdAt).toBe(NOW + 1_000);
      expect(got!.embedding).toBeInstanceOf(Float32Array);
      expect([...got!.embedding!]).toEqual([...Float32Array.from([0.05, 0.05, 0.05, -1])]);

      const stored = await db.get('j2');
      expect(stored).toEqual({ ...corpusItem('j2'), embedding: Float32Array.from(corpusItem('j2').embedding) });
      expect(await db.get('never-written')).toBeUndefined();
    } finally {
      clock.set(NOW);
    }
  });

  it('makes an upserted item visible to the very next retrieve and search, on every worker', async () => {
    await db.upsert({
      id: 'instant',
      text: 'platypus serenade',
      embedding: [-1, 0.02, 0.01, 0],
      metadata: { category: 'instant-cat', creator: 'judy', duration: 42 },
      createdAt: NOW + DAY,
    });
    const newest = await onEveryWorker(4, () => db.retrieve({ profile: 'new', limit: 1 }));
    for (const r of newest) expect(idsOf(r.items)).toEqual(['instant']);

    const filtered = await onEveryWorker(4, () => db.retrieve({ profile: 'new', filter: { category: 'instant-cat' } }));
    for (const r of filtered) expect(idsOf(r.items)).toEqual(['instant']);

    const byText = await onEveryWorker(4, () => db.search({ text: 'platypus' }));
    for (const r of byText) expect(idsOf(r.hits)).toEqual(['instant']);

    const byVector = await onEveryWorker(4, () => db.search({ vector: [-1, 0, 0, 0], limit: 1 }));
    for (const r of byVector) expect(idsOf(r.hits)).toEqual(['instant']);
  });

  it('replacing an item replaces its text in the text index, its metadata and its embedding', async () => {
    const before = { e: [0, 0.2, -1, 0.1], text: 'alpha zebra crossing' };
    const after = { e: [0.1, -1, 0, 0.3], text: 'omega yak meadow' };
    await db.upsert({
      id: 'rep',
      text: before.text,
      embedding: before.e,
      metadata: { category: 'rep-old', creator: 'kim', duration: 100 },
      createdAt: NOW - DAY,
    });
    // Baseline: the first version is found every way the second must not be.
    expect(idsOf((await db.search({ text: 'zebra' })).hits)).toEqual(['rep']);
    expect(idsOf((await db.retrieve({ profile: 'new', filter: { category: 'rep-old' } })).items)).toEqual(['rep']);
    expect((await db.search({ vector: before.e, limit: 1 })).hits[0]!.id).toBe('rep');

    await db.upsert({
      id: 'rep',
      text: after.text,
      embedding: after.e,
      metadata: { category: 'rep-new', creator: 'kim', duration: 400 },
      createdAt: NOW - DAY,
    });

    const got = await db.get('rep');
    expect(got!.text).toBe(after.text);
    expect(got!.metadata).toEqual({ category: 'rep-new', creator: 'kim', duration: 400 });
    expect([...got!.embedding!]).toEqual([...Float32Array.from(after.e)]);

    const checks = await onEveryWorker(2, async () => ({
      oldWords: await db.search({ text: 'alpha zebra crossing' }),
      newWords: await db.search({ text: 'yak' }),
      oldCategory: await db.retrieve({ profile: 'new', filter: { category: 'rep-old' } }),
      newCategory: await db.retrieve({ profile: 'new', filter: { category: 'rep-new' } }),
      oldDuration: await db.retrieve({ profile: 'new', filter: { duration: { gte: 99, lte: 101 } } }),
      newDuration: await db.retrieve({ profile: 'new', filter: { duration: { in: [400] } } }),
      newVector: await db.search({ vector: after.e, limit: 1000 }),
      oldVector: await db.search({ vector: before.e, limit: 1000 }),
      all: await db.retrieve({ profile: 'new', limit: 1000 }),
    }));
    for (const c of checks) {
      expect(c.oldWords.hits).toEqual([]);
      expect(idsOf(c.newWords.hits)).toEqual(['rep']);
      expect(c.oldCategory.items).toEqual([]);
      expect(idsOf(c.newCategory.items)).toEqual(['rep']);
      expect(idsOf(c.oldDuration.items)).not.toContain('rep');
      expect(idsOf(c.newDuration.items)).toEqual(['rep']);

      expect(c.newVector.hits[0]!.id).toBe('rep');
      expect(c.newVector.hits[0]!.semantic).toBeCloseTo(1, 5);
      const repOld = c.oldVector.hits.find((h) => h.id === 'rep');
      // The index's int8 rows: within 1e-2 of the exact cosine (docs/api.md).
      expect(Math.abs(repOld!.semantic! - cosine(before.e, after.e))).toBeLessThan(1e-2);
      expect(c.oldVector.hits[0]!.id).not.toBe('rep');
      // One item, one entry: the old version left no copy behind in any index.
      expect(c.newVector.hits.filter((h) => h.id === 'rep')).toHaveLength(1);
      expect(c.oldVector.hits.filter((h) => h.id === 'rep')).toHaveLength(1);
      expect(idsOf(c.all.items).filter((id) => id === 'rep')).toHaveLength(1);
    }
  });

  it('the last of two entries for one id in a batch wins', async () => {
    await db.upsertItems([
      { id: 'twice', text: 'gecko morning', embedding: [0.7, 0.7, -0.1, -0.1], metadata: { category: 'twice-1' } },
      { id: 'twice', text: 'iguana evening', embedding: [-0.7, 0.1, 0.7, -0.1], metadata: { category: 'twice-2' } },
    ]);
    const got = await db.get('twice');
    expect(got!.text).toBe('iguana evening');
    expect(got!.metadata).toEqual({ category: 'twice-2' });
    expect((await db.search({ text: 'gecko' })).hits).toEqual([]);
    expect(idsOf((await db.search({ text: 'iguana' })).hits)).toEqual(['twice']);
    expect((await db.retrieve({ profile: 'new', filter: { category: 'twice-1' } })).items).toEqual([]);
    expect(idsOf((await db.retrieve({ profile: 'new', filter: { category: 'twice-2' } })).items)).toEqual(['twice']);
    const near = await db.search({ vector: [-0.7, 0.1, 0.7, -0.1], limit: 1000 });
    expect(near.hits[0]!.id).toBe('twice');
    expect(near.hits.filter((h) => h.id === 'twice')).toHaveLength(1);
  });

  it('replacing an item without an embedding takes it out of the vector index', async () => {
    const e = [0.3, 0.3, -1, -0.2];
    await db.upsert({ id: 'drop-vec', text: 'kiwi fruit bowl', embedding: e, metadata: { category: 'dv' } });
    expect((await db.search({ vector: e, limit: 1 })).hits[0]!.id).toBe('drop-vec');
    await db.upsert({ id: 'drop-vec', text: 'kiwi fruit bowl', metadata: { category: 'dv' } });
    const r = await onEveryWorker(2, () => db.search({ vector: e, limit: 1000 }));
    for (const x of r) expect(idsOf(x.hits)).not.toContain('drop-vec');
    expect((await db.get('drop-vec'))!.embedding).toBeUndefined();
    expect(idsOf((await db.search({ text: 'kiwi' })).hits)).toEqual(['drop-vec']);
  });

  it('a deleted item never comes back from retrieve or search, and get returns undefined', async () => {
    const e = [-0.2, -1, 0.1, 0.1];
    await db.upsert({
      id: 'gone',
      text: 'quokka sunrise',
      embedding: e,
      metadata: { category: 'gone-cat', creator: 'leo', duration: 50 },
      createdAt: NOW + 2 * DAY,
    });
    // More engagement than anything else, so it tops trending and popular while it exists.
    await db.signals([...events('gone', 'view', 40, NOW - 60_000), ...events('gone', 'like', 40, NOW - 60_000)]);

    // Baseline: present in every profile (with and without context) and every search mode.
    for (const ids of await retrieveAll(db, e)) expect(ids[0]).toBe('gone');
    expect(idsOf((await db.search({ text: 'quokka' })).hits)).toEqual(['gone']);
    expect((await db.search({ vector: e, limit: 1 })).hits[0]!.id).toBe('gone');
    expect((await db.search({ text: 'quokka', vector: e, limit: 1 })).hits[0]!.id).toBe('gone');

    await db.delete('gone');

    expect(await db.get('gone')).toBeUndefined();
    const check = async (): Promise<void> => {
      for (const ids of await retrieveAll(db, e)) expect(ids).not.toContain('gone');
      const filtered = await db.retrieve({ profile: 'new', filter: { category: 'gone-cat' } });
      expect(filtered.items).toEqual([]);
      expect((await db.search({ text: 'quokka sunrise' })).hits).toEqual([]);
      expect(idsOf((await db.search({ vector: e, limit: 1000 })).hits)).not.toContain('gone');
      expect(idsOf((await db.search({ text: 'quokka', vector: e, limit: 1000 })).hits)).not.toContain('gone');
      expect(idsOf((await db.search({ text: 'quokka', vector: e, boost: 5, limit: 1000 })).hits)).not.toContain('gone');
    };
    await Promise.all([check(), check()]);

    // Signals keep arriving for it: it still stays out.
    await db.signals(events('gone', 'view', 10, NOW));
    await Promise.all([check(), check()]);
    expect(await db.get('gone')).toBeUndefined();
  });

  it('a deleted item upserted again comes back with the signal state it had', async () => {
    await db.upsert({ id: 'phoenix', text: 'phoenix rising', metadata: { category: 'phx' } });
    await db.signals(events('phoenix', 'like', 3, NOW));
    await db.delete('phoenix');
    expect((await db.retrieve({ profile: 'popular', filter: { category: 'phx' } })).items).toEqual([]);
    await db.upsert({ id: 'phoenix', text: 'phoenix reborn', metadata: { category: 'phx' } });
    const r = await db.retrieve({ profile: 'popular', filter: { category: 'phx' } });
    expect(idsOf(r.items)).toEqual(['phoenix']);
    expect(r.items[0]!.signals.like!.count).toBe(3);
    expect(idsOf((await db.search({ text: 'reborn' })).hits)).toEqual(['phoenix']);
    expect((await db.search({ text: 'rising' })).hits).toEqual([]);
  });

  it('deleting an id that was never written is a no-op', async () => {
    await expect(db.delete('no-such-item')).resolves.toBeUndefined();
    expect(await db.get('no-such-item')).toBeUndefined();
  });

  it('accepts signals for an id that was never upserted, and they never make it appear in results', async () => {
    const first = await db.signal({ item: 'ghost', kind: 'view', at: NOW });
    expect(Number.isInteger(first)).toBe(true);
    const next = await db.signals([...events('ghost', 'view', 49, NOW - 60_000), ...events('ghost', 'like', 50, NOW)]);
    expect(next).toBe(first + 1);

    const state = db.itemSignals('ghost');
    expect(state.view!.count).toBe(50);
    expect(state.like!.count).toBe(50);
    expect(await db.get('ghost')).toBeUndefined();

    const ghostVector = [1, 1, 1, 1];
    for (const ids of await retrieveAll(db, ghostVector)) expect(ids).not.toContain('ghost');
    for (const mode of [{ text: 'ghost' }, { vector: ghostVector }, { text: 'ghost jazz', vector: ghostVector }]) {
      expect(idsOf((await db.search({ ...mode, boost: 10, limit: 1000 })).hits)).not.toContain('ghost');
    }
  });

  it('upsertItems of a batch with one bad entry writes none of them', async () => {
    const good = [
      { id: 'batch-1', text: 'narwhal chorus', embedding: [0.4, -0.4, 0.4, -0.4], metadata: { category: 'batch' } },
      { id: 'batch-2', text: 'narwhal encore', metadata: { category: 'batch' } },
    ];
    const bad = { id: 'batch-3', text: 'narwhal finale', embedding: [1, 2, 3], metadata: { category: 'batch' } };
    const err = await failureOf(() => db.upsertItems([...good, bad]));
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as InvalidInputError).field).toBe('items[2].embedding');

    for (const id of ['batch-1', 'batch-2', 'batch-3']) expect(await db.get(id)).toBeUndefined();
    expect((await db.search({ text: 'narwhal' })).hits).toEqual([]);
    expect((await db.retrieve({ profile: 'new', filter: { category: 'batch' } })).items).toEqual([]);
    expect(idsOf((await db.search({ vector: [0.4, -0.4, 0.4, -0.4], limit: 1000 })).hits)).not.toContain('batch-1');

    // The refused batch left nothing half-allocated: the good entries can be written afterwards.
    await db.upsertItems(good);
    expect(idsOf((await db.search({ text: 'narwhal' })).hits).sort()).toEqual(['batch-1', 'batch-2']);
    expect(await db.get('batch-3')).toBeUndefined();
  });

  it('keeps every corpus item retrievable while other items come and go', async () => {
    const all = idsOf((await db.retrieve({ profile: 'new', limit: 1000 })).items);
    for (const c of CORPUS) expect(all).toContain(c.id);
  });
});

describe('items: close', () => {
  it('close is idempotent and every call afterwards throws ClosedError', async () => {
    const { db } = await openDb({ workers: 1 });
    await db.upsert({ id: 'x', text: 'closing time' });
    const a = db.close();
    const b = db.close();
    expect(b).toBe(a);
    await a;
    await db.close();
    expect(db.closed).toBe(true);

    const calls: (() => unknown)[] = [
      () => db.upsert({ id: 'y' }),
      () => db.upsertItems([{ id: 'y' }]),
      () => db.get('x'),
      () => db.delete('x'),
      () => db.signal({ item: 'x', kind: 'view' }),
      () => db.signals([{ item: 'x', kind: 'view' }]),
      () => db.itemSignals('x'),
      () => db.retrieve({ profile: 'new' }),
      () => db.search({ text: 'closing' }),
    ];
    for (const call of calls) {
      const err = await failureOf(call);
      expect(err).toBeInstanceOf(ClosedError);
      expect((err as ClosedError).code).toBe('TIDAL_CLOSED');
    }
  });
});

describe('a schema without embeddings', () => {
  it('stores, finds and ranks items with no vector index at all', async () => {
    const db = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .schema({ signals: [{ name: 'view', halfLifeMs: 3_600_000 }] })
      .open();
    try {
      await db.upsertItems([
        { id: 'a', text: 'quiet piano' },
        { id: 'b', text: 'loud guitar' },
      ]);
      await db.signal({ item: 'b', kind: 'view' });
      expect((await db.search({ text: 'piano' })).hits.map((h) => h.id)).toEqual(['a']);
      expect((await db.retrieve({ profile: 'popular' })).items.map((i) => i.id)).toEqual(['b']);
      await db.delete('a');
      expect((await db.search({ text: 'piano' })).hits).toEqual([]);
      await expect(db.search({ vector: [1, 0] })).rejects.toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'vector' });
    } finally {
      await db.close();
    }
  });
});
