/* eslint-disable no-sparse-arrays -- arrays with holes are the input these tests refuse */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidInputError, TidalDb, type SchemaDefinition, type TidalOptions, type TidalWarning } from 'tidal-core';
import { NOW, SCHEMA, TestClock, expectInvalid, failureOf, openCorpusDb, openDb } from './helpers.js';

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
        () =>
          db.signals([
            { item: 'j1', kind: 'view' },
            { item: 'j1', kind: 'View' },
          ]),
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
      await expectUpsertRefused(
        { id: 'v-emb', embedding: new Float32Array(5).fill(1) },
        'items[0].embedding',
        'a Float32Array of length 5',
      );
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
      await expectUpsertRefused(
        { id: 'v-meta', metadata: { duration: 'long' } },
        'items[0].metadata.duration',
        '"long" (string of length 4)',
      );
      await expectUpsertRefused({ id: 'v-meta', metadata: { category: 7 } }, 'items[0].metadata.category', '7 (number)');
      await expectUpsertRefused({ id: 'v-meta', metadata: { duration: Number.NaN } }, 'items[0].metadata.duration', 'NaN (number)');
      // Undeclared fields are stored as given.
      await db.upsert({ id: 'v-meta-ok', metadata: { mood: 3, duration: 10 } });
      expect((await db.get('v-meta-ok'))!.metadata).toEqual({ mood: 3, duration: 10 });
    });

    it('names the bad entry of a batch and writes none of it', async () => {
      await expectInvalid(
        () =>
          db.upsertItems([
            { id: 'v-b1', text: 'fine' },
            { id: 'v-b2', metadata: { duration: 'x' } },
          ]),
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
      await expectInvalid(
        () => db.retrieve({ profile: 'new', filter: { duration: { gte: Number.NaN } } }),
        'filter.duration.gte',
        'NaN (number)',
      );
      await expectInvalid(
        () => db.retrieve({ profile: 'new', filter: { createdAt: { since: 5 } as never } }),
        'filter.createdAt.since',
        '"since"',
      );
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
      await expectInvalid(() => db.retrieve({ profile: 'warm' as never }), 'profile', '"warm"');
      await expectInvalid(() => db.retrieve({ profile: 'trending', window: '2h' as never }), 'window', '"2h"');
    });

    it('refuses a negative boost, and one past 1000 (its scores would overflow)', async () => {
      await expectInvalid(() => db.search({ text: 'jazz', boost: -1 }), 'boost', '-1 (number)');
      await expectInvalid(() => db.search({ text: 'jazz', boost: Number.NaN }), 'boost', 'NaN (number)');
      await expectInvalid(() => db.search({ text: 'jazz', boost: 1e308 }), 'boost', '1e+308 (number)');
      expect((await db.search({ text: 'jazz', boost: 1000 })).hits.every((h) => Number.isFinite(h.score))).toBe(true);
    });

    it('refuses a key a retrieve or search request does not take, naming it', async () => {
      await expectInvalid(() => db.retrieve({ profile: 'trending', limt: 50 } as never), 'limt', '50 (number)');
      await expectInvalid(() => db.search({ text: 'jazz', profile: 'trending' } as never), 'profile', '"trending"');
      await expectInvalid(() => db.search({ text: 'jazz', lmit: undefined } as never), 'lmit', 'undefined');
      // Every documented key is taken.
      await db.retrieve({
        profile: 'trending',
        window: '1h',
        limit: 2,
        criticality: 'default',
        level: 'Full',
        timeoutMs: 10_000,
        asJson: false,
        filter: {},
      });
      await db.search({ text: 'jazz', boost: 0, limit: 2, criticality: 'sheddable', level: 'Full', timeoutMs: 10_000, asJson: false });
    });
  });

  describe('holes in batch arrays', () => {
    const sig = { item: 'j1', kind: 'view', at: NOW };

    it('refuses a signals array with a hole, naming the entry', async () => {
      await expectSignalsRefused(() => db.signals([, sig] as never), 'signals[0]', 'undefined');
      await expectSignalsRefused(() => db.signals(new Array(3)), 'signals[0]', 'undefined');
      const sparse = [sig, { ...sig }, { item: 'hole-late', kind: 'view', at: NOW }];
      // eslint-disable-next-line @typescript-eslint/no-array-delete -- a hole on purpose: the sparse entry under test
      delete (sparse as unknown[])[1];
      await expectSignalsRefused(() => db.signals(sparse), 'signals[1]', 'undefined', ['j1', 'hole-late']);
      expect(db.itemSignals('hole-late')).toEqual({});
    });

    it('refuses an upsertItems array with a hole, naming the entry', async () => {
      await expectInvalid(() => db.upsertItems([, { id: 'hole-item' }] as never), 'items[0]', 'undefined');
      await expectInvalid(() => db.upsertItems(new Array(2)), 'items[0]', 'undefined');
      expect(await db.get('hole-item')).toBeUndefined();
    });

    it('refuses a hole in a filter in-list', async () => {
      await expectInvalid(
        () => db.retrieve({ profile: 'new', filter: { category: { in: [, 'jazz'] as never } } }),
        'filter.category.in[0]',
        'undefined',
      );
    });
  });

  describe('strings that are not well-formed UTF-16', () => {
    const lone = ['x\uD800', '\uDC00x', 'a\uDBFFb'];

    it('refuses a lone surrogate in a signal item id (fast and slow path) and in read ids', async () => {
      for (const id of lone) {
        await expectSignalsRefused(() => db.signal({ item: id, kind: 'view', at: NOW }), 'signal.item', 'string of length');
        await expectSignalsRefused(
          () =>
            db.signals([
              { item: 'j1', kind: 'view', at: NOW },
              { item: id, kind: 'like' },
            ]),
          'signals[1].item',
          'string of length',
        );
        await expectInvalid(() => db.get(id), 'id', 'string of length');
        await expectInvalid(() => db.delete(id), 'id', 'string of length');
        await expectInvalid(() => db.itemSignals(id), 'id', 'string of length');
      }
      // A well-formed pair is fine, and stays distinct from its neighbours.
      await db.signal({ item: 'x\uD83D\uDE00', kind: 'view', at: NOW });
      expect(db.itemSignals('x\uD83D\uDE00').view!.count).toBe(1);
      expect(db.itemSignals('x\uD83D\uDE01')).toEqual({});
    });

    it('refuses a lone surrogate in an item id, text and metadata string (declared or not, at any depth)', async () => {
      await expectInvalid(() => db.upsert({ id: 'y\uD800' }), 'items[0].id', 'string of length 2');
      await expectUpsertRefused({ id: 'v-lone-text', text: 'ok \uDFFF' }, 'items[0].text', 'string of length 4');
      await expectUpsertRefused(
        { id: 'v-lone-meta', metadata: { category: 'ja\uD800zz' } },
        'items[0].metadata.category',
        'string of length 5',
      );
      await expectUpsertRefused(
        { id: 'v-lone-meta', metadata: { tags: ['ok', { deep: '\uDC01' }] } },
        'items[0].metadata.tags[1].deep',
        'string of length 1',
      );
      await expectUpsertRefused({ id: 'v-lone-meta', metadata: { ['k\uD800']: 1 } }, 'items[0].metadata', '"k\\ud800"');
    });

    it('refuses a lone surrogate in search text, a filter value and a session agent', async () => {
      await expectInvalid(() => db.search({ text: 'jazz \uD800' }), 'text', 'string of length 6');
      await expectInvalid(() => db.retrieve({ profile: 'new', filter: { category: 'ja\uDC00' } }), 'filter.category', 'string of length 3');
      await expectInvalid(
        () => db.search({ text: 'jazz', filter: { category: { in: ['rock', '\uD800'] } } }),
        'filter.category.in[1]',
        'string of length 1',
      );
      await expectInvalid(() => db.openSession({ agent: 'agent-\uD800' }), 'agent', 'string of length 7');
      expect(db.openSessions().map((s) => s.agentId)).not.toContain('agent-\uD800');
    });
  });

  describe('numbers the stored type cannot hold', () => {
    it('refuses embedding components that overflow Float32 or underflow it (to 0 or a subnormal)', async () => {
      await expectUpsertRefused({ id: 'v-f32', embedding: [3.5e38, 0, 0, 1] }, 'items[0].embedding[0]', '3.5e+38 (number)');
      await expectUpsertRefused({ id: 'v-f32', embedding: [1, -1e39, 0, 0] }, 'items[0].embedding[1]', '-1e+39 (number)');
      await expectUpsertRefused({ id: 'v-f32', embedding: [1, 0, 1e-46, 0] }, 'items[0].embedding[2]', '1e-46 (number)');
      await expectUpsertRefused({ id: 'v-f32', embedding: [1, 0, 0, 1e-40] }, 'items[0].embedding[3]', '1e-40 (number)');
      // The extremes Float32 holds are fine, and so is an exact 0.
      await db.upsert({ id: 'v-f32-max', embedding: [3.4028234663852886e38, 0, 2 ** -126, -1] });
      expect(Array.from((await db.get('v-f32-max'))!.embedding!)).toEqual([3.4028234663852886e38, 0, 2 ** -126, -1]);
    });

    it('refuses query and context vectors the same way', async () => {
      await expectInvalid(() => db.search({ vector: [1, 1e300, 0, 0] }), 'vector[1]', '1e+300 (number)');
      await expectInvalid(() => db.retrieve({ profile: 'popular', context: [1e-300, 1, 0, 0] }), 'context[0]', '1e-300 (number)');
    });

    it('refuses a weight beyond ±1e12, whose sums could overflow the decayed score', async () => {
      await expectSignalsRefused(() => db.signal({ item: 'j1', kind: 'like', weight: 1e308 }), 'signal.weight', '1e+308 (number)');
      await expectSignalsRefused(
        () => db.signal({ item: 'j1', kind: 'like', weight: -1.000001e12 }),
        'signal.weight',
        '-1000001000000 (number)',
      );
      await expectSignalsRefused(
        () =>
          db.signals([
            { item: 'j1', kind: 'view', at: NOW },
            { item: 'j1', kind: 'view', at: NOW, weight: 1e13 },
          ]),
        'signals[1].weight',
        '10000000000000 (number)',
      );
      await db.signal({ item: 'w-max', kind: 'like', at: NOW, weight: 1e12 });
      await db.signal({ item: 'w-max', kind: 'like', at: NOW, weight: 1e12 });
      expect(db.itemSignals('w-max').like!.score).toBe(2e12);
    });
  });

  describe('field names that are Object.prototype members', () => {
    const names = ['constructor', 'toString', 'hasOwnProperty', 'valueOf', '__proto__'];

    it('refuses them as filter fields, with the unknown-field message', async () => {
      for (const name of names) {
        // JSON.parse makes an own property even of __proto__, as a request decoded from JSON would.
        const filter = JSON.parse(`{${JSON.stringify(name)}: "x"}`) as Record<string, string>;
        const e = await expectInvalid(() => db.retrieve({ profile: 'new', filter }), `filter.${name}`, JSON.stringify(name));
        expect(e.message).toContain('a field declared in schema.metadata (createdAt, category, creator, duration)');
        await expectInvalid(() => db.search({ text: 'jazz', filter }), `filter.${name}`, JSON.stringify(name));
      }
    });

    it('refuses them as diversity.maxPer fields', async () => {
      for (const name of names) {
        const maxPer = JSON.parse(`{${JSON.stringify(name)}: 1}`) as Record<string, number>;
        const e = await expectInvalid(
          () => db.retrieve({ profile: 'new', diversity: { maxPer } }),
          `diversity.maxPer.${name}`,
          JSON.stringify(name),
        );
        expect(e.message).toContain('a field declared in schema.metadata (category, creator, duration)');
      }
    });

    it('refuses an object whose prototype carries the fields (a literal __proto__, a class instance)', async () => {
      const viaProto = { __proto__: { category: 'jazz' } } as unknown as Record<string, string>;
      await expectInvalid(() => db.retrieve({ profile: 'new', filter: viaProto }), 'filter', 'a value of type object');
      await expectInvalid(
        () => db.retrieve({ profile: 'new', diversity: { maxPer: viaProto as never } }),
        'diversity',
        'a value of type object',
      );
      await expectUpsertRefused(
        { id: 'v-proto-meta', metadata: Object.create({ category: 7 }) },
        'items[0].metadata',
        'a value of type object',
      );
      await expectUpsertRefused(
        { id: 'v-class-meta', metadata: new Map([['category', 'x']]) },
        'items[0].metadata',
        'a value of type object',
      );
    });

    it('reads metadata fields as own properties: {} has no `constructor` or `toString` field', async () => {
      const schema: SchemaDefinition = {
        signals: [{ name: 'view', halfLifeMs: 1000 }],
        metadata: { constructor: 'string', toString: 'number' } as Record<string, 'string' | 'number'>,
      };
      const { db: odd } = await openDb({ workers: 1, schema });
      try {
        await odd.upsertItems([
          { id: 'a', metadata: {} },
          { id: 'b', metadata: { constructor: 'c', toString: 3 } },
        ]);
        expect((await odd.retrieve({ profile: 'new', filter: { constructor: 'c' } })).items.map((i) => i.id)).toEqual(['b']);
        expect((await odd.retrieve({ profile: 'new', filter: { toString: { gte: 0 } } })).items.map((i) => i.id)).toEqual(['b']);
        await expectInvalid(() => odd.upsert({ id: 'c', metadata: { toString: 'three' } }), 'items[0].metadata.toString', '"three"');
      } finally {
        await odd.close();
      }
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
      () =>
        TidalDb.builder()
          .ephemeral()
          .workers(1)
          .schema(schema as SchemaDefinition)
          .open(),
      field,
      shown,
    );
  }

  it('refuses a duplicate signal kind name', async () => {
    await expectOpenRefused(
      {
        signals: [
          { name: 'view', halfLifeMs: 1000 },
          { name: 'view', halfLifeMs: 2000 },
        ],
      },
      'schema.signals[1].name',
      '"view"',
    );
  });

  it('refuses a zero or negative halfLifeMs', async () => {
    await expectOpenRefused(
      {
        signals: [
          { name: 'view', halfLifeMs: 1000 },
          { name: 'like', halfLifeMs: 0 },
        ],
      },
      'schema.signals[1].halfLifeMs',
      '0 (number)',
    );
    await expectOpenRefused({ signals: [{ name: 'view', halfLifeMs: -5 }] }, 'schema.signals[0].halfLifeMs', '-5 (number)');
    await expectOpenRefused({ signals: [{ name: 'view', halfLifeMs: Number.NaN }] }, 'schema.signals[0].halfLifeMs', 'NaN (number)');
  });

  it('refuses an unknown window', async () => {
    await expectOpenRefused({ signals: [{ name: 'view', halfLifeMs: 1000, windows: ['1h', '2h'] }] }, 'schema.signals[0].windows', '"2h"');
  });

  it('refuses embeddingDims 0', async () => {
    await expectOpenRefused({ ...SCHEMA, embeddingDims: 0 }, 'schema.embeddingDims', '0 (number)');
    await expectOpenRefused({ ...SCHEMA, embeddingDims: 2.5 }, 'schema.embeddingDims', '2.5 (number)');
  });

  it('refuses null where a kind takes an array or a boolean (only an absent key means the default)', async () => {
    await expectOpenRefused({ signals: [{ name: 'view', halfLifeMs: 1000, windows: null }] }, 'schema.signals[0].windows', 'null');
    await expectOpenRefused({ signals: [{ name: 'view', halfLifeMs: 1000, velocity: null }] }, 'schema.signals[0].velocity', 'null');
  });

  it('refuses a window that is not one of 1h, 24h, 7d, all, and a window given twice', async () => {
    await expectOpenRefused({ signals: [{ name: 'view', halfLifeMs: 1000, windows: ['1h', '1d'] }] }, 'schema.signals[0].windows', '"1d"');
    await expectOpenRefused(
      { signals: [{ name: 'view', halfLifeMs: 1000, windows: ['7d', 7] }] },
      'schema.signals[0].windows',
      '7 (number)',
    );
    await expectOpenRefused({ signals: [{ name: 'view', halfLifeMs: 1000, windows: ['7d', '7d'] }] }, 'schema.signals[0].windows', 'array');
  });

  it('refuses a bad kind name and an empty signal list', async () => {
    await expectOpenRefused({ signals: [{ name: '1st', halfLifeMs: 1000 }] }, 'schema.signals[0].name', '"1st"');
    const err = await failureOf(() => TidalDb.builder().ephemeral().workers(1).schema({ signals: [] }).open());
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as InvalidInputError).field).toBe('schema.signals');
  });
});

describe('validation: a refused call in a batch of good writes', () => {
  it('leaves no false TIDAL_WAL_TAIL_LOST on the next open', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tidal-hole-'));
    const warnings: TidalWarning[] = [];
    const open = (): Promise<TidalDb> =>
      TidalDb.builder()
        .path(dir)
        .workers(1)
        .clock(new TestClock().read)
        .schema(SCHEMA)
        .onWarning((w) => warnings.push(w))
        .open();
    try {
      const db = await open();
      // One tick: the good writes and the bad calls would share one group-commit batch.
      const good = [
        db.signals([
          { item: 'g1', kind: 'view', at: NOW },
          { item: 'g2', kind: 'like', at: NOW },
        ]),
        db.upsertItems([{ id: 'g1', text: 'good one' }]),
        db.signal({ item: 'g3', kind: 'view', at: NOW }),
      ];
      const bad = [
        db.upsertItems([{ id: 'b1' }, , { id: 'b2' }] as never),
        db.signals([{ item: 'b3', kind: 'view' }, ,] as never),
        db.upsertItems(new Array(4)),
      ];
      const settled = await Promise.allSettled([...good, ...bad]);
      expect(settled.slice(0, good.length).map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
      for (const r of settled.slice(good.length)) {
        expect(r.status).toBe('rejected');
        expect((r as PromiseRejectedResult).reason).toBeInstanceOf(InvalidInputError);
      }
      const committed = db.stats().writes.committedEvents;
      expect(committed).toBe(4);
      await db.close();

      const again = await open();
      try {
        expect(warnings).toEqual([]);
        expect(await again.get('g1')).toBeDefined();
        expect(await again.get('b1')).toBeUndefined();
        expect(again.itemSignals('g3').view!.count).toBe(1);
        expect(again.itemSignals('b3')).toEqual({});
        // Numbering continues right after the last committed event.
        expect(await again.signal({ item: 'g4', kind: 'view', at: NOW })).toBe(committed + 1);
      } finally {
        await again.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('validation: options of the wrong type refuse to open', () => {
  const base = (): TidalOptions => ({ ephemeral: true, workers: 1, schema: SCHEMA });

  async function expectOpenRefused(options: unknown, field: string, shown: string): Promise<void> {
    await expectInvalid(() => TidalDb.open(options as TidalOptions), field, shown);
  }

  it('refuses options that are not an object, and unknown keys', async () => {
    await expectOpenRefused(null, 'options', 'null');
    await expectOpenRefused(5, 'options', '5 (number)');
    await expectOpenRefused('x', 'options', '"x"');
    await expectOpenRefused([base()], 'options', 'an array of length 1');
    await expectOpenRefused({ ...base(), maxBatch: 5 }, 'maxBatch', '5 (number)');
    await expectOpenRefused({ ...base(), toString: 5 }, 'toString', '5 (number)');
  });

  // Every option, each with a value of a type it never takes.
  const wrong: [keyof TidalOptions, unknown, string][] = [
    ['schema', null, 'null'],
    ['schema', 5, '5 (number)'],
    ['schema', [], 'an array of length 0'],
    ['groupCommit', null, 'null'],
    ['groupCommit', 5, '5 (number)'],
    ['groupCommit', 'fast', '"fast"'],
    ['groupCommit', [], 'an array'],
    ['capacity', null, 'null'],
    ['capacity', 7, '7 (number)'],
    ['capacity', 'big', '"big"'],
    ['capacity', [1], 'an array of length 1'],
    ['memoryGuard', null, 'null'],
    ['memoryGuard', 1, '1 (number)'],
    ['memoryGuard', [], 'an array'],
    ['sessions', null, 'null'],
    ['sessions', 1, '1 (number)'],
    ['sessions', 'x', '"x"'],
    ['sessions', [], 'an array'],
    ['loadThresholds', null, 'null'],
    ['loadThresholds', 32, '32 (number)'],
    ['loadThresholds', [32, 64, 128], 'an array of length 3'],
    ['rateLimiter', null, 'null'],
    ['rateLimiter', 5, '5 (number)'],
    ['rateLimiter', [], 'an array'],
    ['clock', null, 'null'],
    ['clock', 5, '5 (number)'],
    ['clock', 'now', '"now"'],
    ['workers', null, 'null'],
    ['workers', '2', '"2"'],
    ['workers', [2], 'an array'],
    ['durability', null, 'null'],
    ['durability', 1, '1 (number)'],
    ['durability', ['power'], 'an array'],
    ['onWarning', null, 'null'],
    ['onWarning', 'log', '"log"'],
    ['onWarning', {}, 'a value of type object'],
    ['checkpointEveryEvents', null, 'null'],
    ['checkpointEveryEvents', '10', '"10"'],
    ['admissionLimit', null, 'null'],
    ['admissionLimit', 'off', '"off"'],
    ['loadManagement', null, 'null'],
    ['loadManagement', 'no', '"no"'],
    ['metricsRegistry', null, 'null'],
    ['metricsRegistry', 5, '5 (number)'],
    ['ephemeral', 'yes', '"yes"'],
    ['path', 5, '5 (number)'],
  ];
  it.each(wrong)('refuses %s: %j', async (key, value, shown) => {
    const options: Partial<TidalOptions> = { ...base(), [key]: value };
    if (key === 'path') delete options.ephemeral;
    await expectOpenRefused(options, key, shown);
  });

  it('names the builder path of a nested option', async () => {
    const b = () => TidalDb.builder().ephemeral().workers(1).schema(SCHEMA);
    await expectInvalid(
      () =>
        b()
          .groupCommit({ maxBatch: 'x' as never })
          .open(),
      'groupCommit.maxBatch',
      '"x"',
    );
    await expectInvalid(
      () =>
        b()
          .groupCommit({ maxbatch: 5 } as never)
          .open(),
      'groupCommit.maxbatch',
      '5 (number)',
    );
    await expectInvalid(
      () =>
        b()
          .capacity({ items: null } as never)
          .open(),
      'capacity.items',
      'null',
    );
    await expectInvalid(
      () =>
        b()
          .capacity({ slots: 5 } as never)
          .open(),
      'capacity.slots',
      '5 (number)',
    );
    await expectInvalid(
      () =>
        b()
          .memoryGuard({ floorBytes: [] as never })
          .open(),
      'memoryGuard.floorBytes',
      'an array',
    );
    await expectInvalid(
      () =>
        b()
          .loadThresholds({ noDiversity: '9' as never })
          .open(),
      'loadThresholds.noDiversity',
      '"9"',
    );
    await expectInvalid(
      () =>
        b()
          .sessions({ maxOpen: {} as never })
          .open(),
      'sessions.maxOpen',
      'a value of type object',
    );
    await expectInvalid(
      () =>
        b()
          .sessions({ onExpired: null } as never)
          .open(),
      'sessions.onExpired',
      'null',
    );
    await expectInvalid(
      () =>
        b()
          .sessions(null as never)
          .open(),
      'sessions',
      'null',
    );
    await expectInvalid(
      () =>
        b()
          .sessions(5 as never)
          .sweepIntervalMs(10)
          .open(),
      'sessions',
      '5 (number)',
    );
    await expectInvalid(
      () =>
        b()
          .schema({ ...SCHEMA, signal: [] } as never)
          .open(),
      'schema.signal',
      'an array',
    );
    await expectInvalid(
      () =>
        b()
          .schema({ signals: [{ name: 'v', halfLife: 5 }] } as never)
          .open(),
      'schema.signals[0].halfLife',
      '5 (number)',
    );
    await expectInvalid(
      () =>
        b()
          .schema({ signals: [, { name: 'v', halfLifeMs: 5 }] } as never)
          .open(),
      'schema.signals[0]',
      'undefined',
    );
  });

  it('refuses a clock that returns anything but a timestamp, or throws, calling it at open', async () => {
    const b = (clock: () => unknown) =>
      TidalDb.builder()
        .ephemeral()
        .workers(1)
        .schema(SCHEMA)
        .clock(clock as () => number);
    for (const [value, shown] of [
      [Number.NaN, 'NaN (number)'],
      [Infinity, 'Infinity (number)'],
      [-1, '-1 (number)'],
      [1e20, '100000000000000000000 (number)'],
      ['1735689600000', '"1735689600000"'],
      [undefined, 'undefined'],
    ] as const) {
      await expectInvalid(() => b(() => value).open(), 'clock', shown);
    }
    const e = await expectInvalid(
      () =>
        b(() => {
          throw new Error('no time');
        }).open(),
      'clock',
      'a value of type function',
    );
    expect(e.message).toContain('no time');
  });
});

describe('validation: unusable paths', () => {
  const root = mkdtempSync(join(tmpdir(), 'tidal-paths-'));
  const file = join(root, 'a-file');
  writeFileSync(file, 'not a directory');
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  const openAt = (path: string) => TidalDb.builder().path(path).workers(1).schema(SCHEMA).open();

  it('refuses a path that is a file, or under a file, naming the path and the reason', async () => {
    const a = await expectInvalid(() => openAt(file), 'path', JSON.stringify(file));
    expect(a.message).toMatch(/EEXIST|ENOTDIR/);
    expect(a.message).toContain(file);
    const under = join(file, 'db');
    const b = await expectInvalid(() => openAt(under), 'path', JSON.stringify(under));
    expect(b.message).toContain('ENOTDIR');
  });

  it('refuses a directory no file can be created in (even as root: /proc)', async () => {
    // chmod does not stop root, which the test suite may run as; /proc refuses new files to root too.
    const e = await expectInvalid(() => openAt('/proc'), 'path', '"/proc"');
    expect(e.message).toMatch(/\/proc\/tidal\.db/);
    const f = await expectInvalid(() => openAt('/proc/tidal-no-such-dir'), 'path', '"/proc/tidal-no-such-dir"');
    expect(f.message).toMatch(/ENOENT|EACCES|EPERM/);
  });

  it.skipIf(process.getuid?.() === 0)('refuses a read-only directory (not run as root: chmod does not stop root)', async () => {
    const ro = join(root, 'read-only');
    mkdirSync(ro);
    chmodSync(ro, 0o500);
    try {
      const e = await expectInvalid(() => openAt(ro), 'path', JSON.stringify(ro));
      expect(e.message).toContain('EACCES');
    } finally {
      chmodSync(ro, 0o700);
    }
  });

  it('refuses an empty path, a NUL and a lone surrogate', async () => {
    await expectInvalid(() => openAt(''), 'path', '""');
    await expectInvalid(() => openAt(join(root, 'a\u0000b')), 'path', 'a\\u0000b');
    await expectInvalid(() => openAt(join(root, 'a\uD800')), 'path', 'a\\ud800');
  });
});
