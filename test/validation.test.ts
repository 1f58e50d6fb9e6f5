import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidInputError, TidalDb, type SchemaDefinition } from 'tidal-core';
import { NOW, SCHEMA, expectInvalid, failureOf, openCorpusDb, openDb } from './helpers.js';

const GOOD_VECTOR = [0.5, 0.5, 0.5, 0.5];

describe('validation', () => {
  let db: TidalDb;

  beforeAll(async () => {
    ({ db } = await openCorpusDb({ workers: 1 }));
    await db.signals([
      { item: 'j1', kind: 'view', at: NOW - 1_000 },
      { item: 'j1', kind: 'like', at: NOW - 2_000, weight: 2 },
    ]);
  });
  afterAll(async () => {
    await db?.close();
  });

  /** Asserts a refused signal write left the item's signal state and the log untouched. */
  async function expectSignalsRefused(
    write: () => Promise<unknown>,
    field: string,
    shown: string,
    watched: readonly string[] = ['j1'],
  ): Promise<void> {
    const before = watched.map((id) => db.itemSignals(id));
    const seqBefore = await db.signal({ item: 'seq-probe', kind: 'view', at: NOW });
    await expectInvalid(write, field, shown);
    expect(watched.map((id) => db.itemSignals(id))).toEqual(before);
    // Nothing was logged: the next write gets the very next sequence number.
    expect(await db.signal({ item: 'seq-probe', kind: 'view', at: NOW })).toBe(seqBefore + 1);
  }

  /** Asserts a refused item write stored nothing under `id`. */
  async function expectUpsertRefused(item: Record<string, unknown>, field: string, shown: string): Promise<InvalidInputError> {
    const err = await expectInvalid(() => db.upsert(item as never), field, shown);
    const id = item.id as string;
    if (id.length >= 1 && id.length <= 512) expect(await db.get(id)).toBeUndefined();
    return err;
  }

  describe('signals', () => {
    it('refuses an unknown signal kind', async () => {
      await expectSignalsRefused(() => db.signal({ item: 'j1', kind: 'share' }), 'signal.kind', '"share"');
      await expectSignalsRefused(
        () => db.signals([{ item: 'j1', kind: 'view' }, { item: 'j1', kind: 'View' }]),
        'signals[1].kind',
        '"View"',
      );
    });

    it('refuses NaN and Infinity weights', async () => {
      await expectSignalsRefused(() => db.signal({ item: 'j1', kind: 'view', weight: Number.NaN }), 'signal.weight', 'NaN (number)');
      await expectSignalsRefused(() => db.signal({ item: 'j1', kind: 'like', weight: Infinity }), 'signal.weight', 'Infinity (number)');
      await expectSignalsRefused(() => db.signal({ item: 'j1', kind: 'like', weight: -Infinity }), 'signal.weight', '-Infinity (number)');
    });

    it('refuses an `at` that is NaN, infinite or negative', async () => {
      await expectSignalsRefused(() => db.signal({ item: 'j1', kind: 'view', at: Number.NaN }), 'signal.at', 'NaN (number)');
      await expectSignalsRefused(() => db.signal({ item: 'j1', kind: 'view', at: Infinity }), 'signal.at', 'Infinity (number)');
      await expectSignalsRefused(() => db.signal({ item: 'j1', kind: 'view', at: -1 }), 'signal.at', '-1 (number)');
    });

    it('refuses an empty or over-long item id', async () => {
      await expectSignalsRefused(() => db.signal({ item: '', kind: 'view' }), 'signal.item', '"" (string of length 0)');
      await expectSignalsRefused(() => db.signal({ item: 'x'.repeat(513), kind: 'view' }), 'signal.item', '(string of length 513)');
    });

    it('refuses the whole batch when one entry is bad: signals([good, bad]) writes nothing', async () => {
      await expectSignalsRefused(
        () =>
          db.signals([
            { item: 'j1', kind: 'view', at: NOW },
            { item: 'j1', kind: 'like', at: NOW },
            { item: 'brand-new', kind: 'view', at: NOW },
            { item: 'j1', kind: 'view', weight: Number.NaN },
          ]),
        'signals[3].weight',
        'NaN (number)',
        ['j1', 'brand-new'],
      );
      expect(db.itemSignals('brand-new')).toEqual({});
      // The accepted state is the one written before.
      expect(db.itemSignals('j1').view!.count).toBe(1);
      expect(db.itemSignals('j1').like!.count).toBe(1);
    });
  });

  describe('items', () => {
    it('refuses an empty id and an id longer than 512 characters', async () => {
      await expectUpsertRefused({ id: '', text: 'x' }, 'items[0].id', '"" (string of length 0)');
      const long = 'i'.repeat(513);
      await expectUpsertRefused({ id: long, text: 'x' }, 'items[0].id', '(string of length 513)');
      // 512 is fine.
      await db.upsert({ id: 'i'.repeat(512) });
      expect(await db.get('i'.repeat(512))).toBeDefined();
    });

    it('refuses an empty text and a text longer than 100 000 characters', async () => {
      await expectUpsertRefused({ id: 'v-text-empty', text: '' }, 'items[0].text', '"" (string of length 0)');
      const long = 'zq '.repeat(33_334).slice(0, 100_001);
      await expectUpsertRefused({ id: 'v-text-long', text: long }, 'items[0].text', '(string of length 100001)');
      expect((await db.search({ text: 'zq' })).hits).toEqual([]);
      // 100 000 is fine.
      await db.upsert({ id: 'v-text-max', text: long.slice(0, 100_000) });
      expect((await db.search({ text: 'zq' })).hits.map((h) => h.id)).toEqual(['v-text-max']);
    });

    it('refuses an embedding of the wrong length', async () => {
      const err = await expectUpsertRefused({ id: 'v-emb', embedding: [1, 2, 3] }, 'items[0].embedding', 'an array of length 3');
      expect(err.value).toEqual([1, 2, 3]);
      await expectUpsertRefused({ id: 'v-emb', embedding: new Float32Array(5).fill(1) }, 'items[0].embedding', 'a Float32Array of length 5');
    });

    it('refuses an all-zero embedding', async () => {
      await expectUpsertRefused({ id: 'v-zero', embedding: [0, 0, 0, 0] }, 'items[0].embedding', 'an array of length 4');
    });

    it('refuses a non-finite embedding component', async () => {
      await expectUpsertRefused({ id: 'v-nan', embedding: [1, Number.NaN, 0, 0] }, 'items[0].embedding[1]', 'NaN (number)');
    });

    it('refuses a createdAt that is not finite', async () => {
      await expectUpsertRefused({ id: 'v-created', createdAt: Number.NaN }, 'items[0].createdAt', 'NaN (number)');
      await expectUpsertRefused({ id: 'v-created', createdAt: Infinity }, 'items[0].createdAt', 'Infinity (number)');
      await expectUpsertRefused({ id: 'v-created', createdAt: -5 }, 'items[0].createdAt', '-5 (number)');
    });

    it('refuses a metadata field of the wrong declared type', async () => {
      await expectUpsertRefused({ id: 'v-meta', metadata: { duration: 'long' } }, 'items[0].metadata.duration', '"long" (string of length 4)');
      await expectUpsertRefused({ id: 'v-meta', metadata: { category: 7 } }, 'items[0].metadata.category', '7 (number)');
      await expectUpsertRefused({ id: 'v-meta', metadata: { duration: Number.NaN } }, 'items[0].metadata.duration', 'NaN (number)');
      // Undeclared fields are stored as given.
      await db.upsert({ id: 'v-meta-ok', metadata: { mood: 3, duration: 10 } });
      expect((await db.get('v-meta-ok'))!.metadata).toEqual({ mood: 3, duration: 10 });
    });

    it('names the bad entry of a batch and writes none of it', async () => {
      await expectInvalid(
        () => db.upsertItems([{ id: 'v-b1', text: 'fine' }, { id: 'v-b2', metadata: { duration: 'x' } }]),
        'items[1].metadata.duration',
        '"x"',
      );
      expect(await db.get('v-b1')).toBeUndefined();
      expect(await db.get('v-b2')).toBeUndefined();
      expect((await db.search({ text: 'fine' })).hits).toEqual([]);
    });
  });

  describe('queries', () => {
    it('refuses a filter on an unknown field', async () => {
      await expectInvalid(() => db.retrieve({ profile: 'new', filter: { genre: 'jazz' } }), 'filter.genre', '"genre"');
      await expectInvalid(() => db.search({ text: 'jazz', filter: { genre: 'jazz' } }), 'filter.genre', '"genre"');
      await expectInvalid(() => db.search({ vector: GOOD_VECTOR, filter: { id: 'j1' } }), 'filter.id', '"id"');
    });

    it('refuses a filter value of the wrong type', async () => {
      await expectInvalid(() => db.retrieve({ profile: 'new', filter: { duration: 'long' } }), 'filter.duration', '"long"');
      await expectInvalid(() => db.retrieve({ profile: 'new', filter: { duration: { gte: Number.NaN } } }), 'filter.duration.gte', 'NaN (number)');
      await expectInvalid(() => db.retrieve({ profile: 'new', filter: { createdAt: { since: 5 } as never } }), 'filter.createdAt.since', '"since"');
    });

    it('refuses limit 0, 1001 and 1.5', async () => {
      for (const [limit, shown] of [
        [0, '0 (number)'],
        [1001, '1001 (number)'],
        [1.5, '1.5 (number)'],
        [-1, '-1 (number)'],
      ] as const) {
        await expectInvalid(() => db.retrieve({ profile: 'popular', limit }), 'limit', shown);
        await expectInvalid(() => db.search({ text: 'jazz', limit }), 'limit', shown);
      }
      // The bounds themselves are fine.
      expect((await db.retrieve({ profile: 'new', limit: 1 })).items).toHaveLength(1);
      expect((await db.retrieve({ profile: 'new', limit: 1000 })).items.length).toBeGreaterThan(1);
    });

    it('refuses an all-zero vector', async () => {
      const a = await expectInvalid(() => db.search({ vector: [0, 0, 0, 0] }), 'vector', 'an array of length 4');
      expect(a.value).toEqual([0, 0, 0, 0]);
      await expectInvalid(() => db.search({ text: 'jazz', vector: new Float32Array(4) }), 'vector', 'a Float32Array of length 4');
      await expectInvalid(() => db.retrieve({ profile: 'popular', context: [0, 0, 0, 0] }), 'context', 'an array of length 4');
    });

    it('refuses a vector of the wrong length', async () => {
      await expectInvalid(() => db.search({ vector: [1, 2] }), 'vector', 'an array of length 2');
      await expectInvalid(() => db.retrieve({ profile: 'new', context: [1, 2, 3, 4, 5] }), 'context', 'an array of length 5');
    });

    it('refuses empty and over-long search text', async () => {
      await expectInvalid(() => db.search({ text: '' }), 'text', '"" (string of length 0)');
      await expectInvalid(() => db.search({ text: 'b'.repeat(100_001) }), 'text', '(string of length 100001)');
    });

    it('refuses an unknown profile and window', async () => {
      await expectInvalid(() => db.retrieve({ profile: 'hot' as never }), 'profile', '"hot"');
      await expectInvalid(() => db.retrieve({ profile: 'trending', window: '2h' as never }), 'window', '"2h"');
    });

    it('refuses a negative boost', async () => {
      await expectInvalid(() => db.search({ text: 'jazz', boost: -1 }), 'boost', '-1 (number)');
      await expectInvalid(() => db.search({ text: 'jazz', boost: Number.NaN }), 'boost', 'NaN (number)');
    });
  });

  it('refuses trending on a schema without a velocity kind', async () => {
    const { db: plain } = await openDb({
      workers: 1,
      schema: { signals: [{ name: 'like', halfLifeMs: 1000 }], metadata: { category: 'string' } },
    });
    try {
      await expectInvalid(() => plain.retrieve({ profile: 'trending' }), 'profile', '"trending"');
      // The other profiles work.
      expect((await plain.retrieve({ profile: 'popular' })).items).toEqual([]);
    } finally {
      await plain.close();
    }
  });
});

describe('validation: signal times', () => {
  // A database of its own: the event must not reach (or damage) the state other tests read.
  it('refuses an `at` beyond the range signal state can hold (2^31 minutes, about the year 6053)', async () => {
    const { db } = await openDb({ workers: 1 });
    try {
      await db.signal({ item: 'far-future', kind: 'view', at: NOW });
      const before = db.itemSignals('far-future');
      await expectInvalid(() => db.signal({ item: 'far-future', kind: 'view', at: 1e15 }), 'signal.at', '1000000000000000 (number)');
      expect(db.itemSignals('far-future')).toEqual(before);
    } finally {
      await db.close();
    }
  });
});

describe('validation: schema at open', () => {
  async function expectOpenRefused(schema: unknown, field: string, shown: string): Promise<void> {
    await expectInvalid(
      () => TidalDb.builder().ephemeral().workers(1).schema(schema as SchemaDefinition).open(),
      field,
      shown,
    );
  }

  it('refuses a duplicate signal kind name', async () => {
    await expectOpenRefused(
      { signals: [{ name: 'view', halfLifeMs: 1000 }, { name: 'view', halfLifeMs: 2000 }] },
      'schema.signals[1].name',
      '"view"',
    );
  });

  it('refuses a zero or negative halfLifeMs', async () => {
    await expectOpenRefused(
      { signals: [{ name: 'view', halfLifeMs: 1000 }, { name: 'like', halfLifeMs: 0 }] },
      'schema.signals[1].halfLifeMs',
      '0 (number)',
    );
    await expectOpenRefused({ signals: [{ name: 'view', halfLifeMs: -5 }] }, 'schema.signals[0].halfLifeMs', '-5 (number)');
    await expectOpenRefused({ signals: [{ name: 'view', halfLifeMs: Number.NaN }] }, 'schema.signals[0].halfLifeMs', 'NaN (number)');
  });

  it('refuses an unknown window', async () => {
    await expectOpenRefused(
      { signals: [{ name: 'view', halfLifeMs: 1000, windows: ['1h', '2h'] }] },
      'schema.signals[0].windows',
      '"2h"',
    );
  });

  it('refuses embeddingDims 0', async () => {
    await expectOpenRefused({ ...SCHEMA, embeddingDims: 0 }, 'schema.embeddingDims', '0 (number)');
    await expectOpenRefused({ ...SCHEMA, embeddingDims: 2.5 }, 'schema.embeddingDims', '2.5 (number)');
  });

  it('refuses a bad kind name and an empty signal list', async () => {
    await expectOpenRefused({ signals: [{ name: '1st', halfLifeMs: 1000 }] }, 'schema.signals[0].name', '"1st"');
    const err = await failureOf(() => TidalDb.builder().ephemeral().workers(1).schema({ signals: [] }).open());
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as InvalidInputError).field).toBe('schema.signals');
  });
});
