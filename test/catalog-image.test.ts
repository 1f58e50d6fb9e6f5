/**
 * The catalog image through the public API: after a bulk load one query thread reads the rows and
 * the others take the image it writes into shared memory; every answer is the one threads keeping
 * their own catalogue give, through writes, deletes and replaced texts; stats().memory counts the
 * image once.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInputError, TidalDb, type FieldCondition, type ItemInput, type SchemaDefinition } from 'tidal-core';
import { internalsOf } from 'tidal-core/internal';
import { HOUR, NOW, mulberry32 } from './helpers.js';

const SCHEMA: SchemaDefinition = {
  signals: [{ name: 'view', halfLifeMs: HOUR }],
  embeddingDims: 4,
  metadata: { creator: 'string', n: 'number' },
  creatorField: 'creator',
};
const WORDS = ['jazz', 'piano', 'blue', 'note', 'tokyo', 'night', 'café', 'rain', 'straße', '東京'];

const opened: TidalDb[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((db) => db.close()));
});

async function openDb(sharedCatalogMinItems: number, dir?: string, workers = 2): Promise<TidalDb> {
  const builder = TidalDb.builder();
  if (dir) builder.path(dir);
  else builder.ephemeral();
  const db = await builder
    .schema(SCHEMA)
    .workers(workers)
    .clock(() => NOW)
    .sharedCatalogMinItems(sharedCatalogMinItems)
    .open();
  opened.push(db);
  return db;
}

function makeItems(ids: readonly number[], seed: number): ItemInput[] {
  const rand = mulberry32(seed);
  return ids.map((i) => ({
    id: `c${i}`,
    text: Array.from({ length: 1 + Math.floor(rand() * 5) }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(' '),
    embedding: Array.from({ length: 4 }, () => rand() * 2 - 1),
    createdAt: NOW - Math.floor(rand() * 100) * 1000,
    metadata: { creator: `u${Math.floor(rand() * 5)}`, n: Math.floor(rand() * 10) },
  }));
}

/** What the queries that read the catalogue and the text index answer, as ids and scores. */
async function answers(db: TidalDb): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const text of ['jazz', 'blue note', 'café rain night', '東京 straße']) {
    const r = await db.search({ text, limit: 8 });
    out.push(r.hits.map((h) => [h.id, h.score]));
  }
  const filters: Record<string, FieldCondition>[] = [{ creator: 'u1' }, { n: { gte: 5 } }];
  for (const filter of filters) {
    const r = await db.retrieve({ profile: 'new', filter, limit: 8 });
    out.push(r.items.map((i) => i.id));
  }
  return out;
}

describe('the catalog image', () => {
  it('after a bulk load one query thread reads the rows and the other takes its image', async () => {
    const db = await openDb(1);
    await db.upsertItems(makeItems([...Array(300).keys()], 1));
    const warmed = await db.warm();
    // The build lock: the second thread waits for the first's image rather than read the 300 rows too.
    expect(warmed.map((w) => w.refreshedRows).sort((a, b) => a - b)).toEqual([0, 300]);
    // Each embedding read once, by one thread: the one that waited writes the int8 vectors while
    // the other reads the catalogue (or the reader wrote them, when it took their lock first).
    expect(warmed.reduce((n, w) => n + w.refreshedEmbeddings, 0)).toBe(300);
    const image = db.stats().memory.catalogImage;
    expect(image).toMatchObject({ images: 1, threads: 2 });
    expect(image.bytes).toBeGreaterThan(300 * 8);
    // What each thread keeps of its own is derived from the image (creator lists, block summaries).
    const m = db.stats().memory;
    expect(m.catalog.bytes + m.text.bytes).toBeLessThan(image.bytes);
  });

  it('answers as threads keeping their own catalogue do, through writes, deletes and replaced texts', async () => {
    const shared = await openDb(1);
    const own = await openDb(1_000_000);
    let seed = 10;
    const batch = fc.record({
      ids: fc.uniqueArray(fc.nat(199), { minLength: 1, maxLength: 60 }),
      deletes: fc.uniqueArray(fc.nat(199), { maxLength: 10 }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(batch, { minLength: 1, maxLength: 4 }), async (batches) => {
        for (const b of batches) {
          const items = makeItems(b.ids, seed++);
          for (const db of [shared, own]) {
            await db.upsertItems(items);
            for (const id of b.deletes) await db.delete(`c${id}`);
          }
          // Read-your-writes: the next query in any thread sees them.
          expect(await answers(shared)).toEqual(await answers(own));
        }
      }),
      { numRuns: 12 },
    );
    await shared.warm();
    await own.warm();
    expect(shared.stats().memory.catalogImage.threads).toBe(2);
    expect(own.stats().memory.catalogImage).toEqual({ bytes: 0, images: 0, threads: 0 });
  });

  it('a close saves the snapshot from an image; a reopen loads it once and the other thread takes the image', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tidal-image-'));
    try {
      const first = await openDb(1, dir);
      await first.upsertItems(makeItems([...Array(300).keys()], 3));
      await first.warm();
      for (const id of [5, 6, 7]) await first.delete(`c${id}`);
      await first.upsertItems(makeItems([1, 2, 400], 4));
      const expected = await answers(first);
      opened.splice(opened.indexOf(first), 1);
      await first.close();

      const again = await openDb(1, dir);
      const warmed = await again.warm();
      // Both threads stand at the snapshot's version and read no row.
      expect(warmed.map((w) => w.refreshedRows)).toEqual([0, 0]);
      expect(new Set(warmed.map((w) => w.catalogSnapshotVersion)).size).toBe(1);
      // One thread loaded the snapshot file and posted what it read; the other read that.
      expect(warmed.map((w) => w.catalogSource).sort()).toEqual(['image', 'snapshot']);
      expect(warmed[0]!.catalogSnapshotVersion).toBeGreaterThan(0);
      expect(again.stats().memory.catalogImage).toMatchObject({ images: 1, threads: 2 });
      expect(await answers(again)).toEqual(expected);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a thread that starts later takes the newest image from the database thread, reading no row', async () => {
    const db = await openDb(1, undefined, 1);
    await db.upsertItems(makeItems([...Array(300).keys()], 5));
    expect((await db.warm()).map((w) => [w.catalogSource, w.refreshedRows])).toEqual([['rows', 300]]);
    const expected = await answers(db);
    // The only worker dies; its replacement's first sync asks the channel for the image.
    await expect(internalsOf(db).pool.run({ op: 'fault', mode: 'exit' })).rejects.toThrow();
    expect((await db.warm()).map((w) => [w.catalogSource, w.refreshedRows])).toEqual([['image', 0]]);
    expect(await answers(db)).toEqual(expected);
  });

  it('refuses a minimum that is not a whole number from 1, naming it', async () => {
    for (const bad of [0, -1, 1.5, Number.NaN]) {
      const err = await TidalDb.builder()
        .ephemeral()
        .schema(SCHEMA)
        .sharedCatalogMinItems(bad)
        .open()
        .then(
          (db) => (opened.push(db), null),
          (e: unknown) => e,
        );
      expect(err).toBeInstanceOf(InvalidInputError);
      expect((err as InvalidInputError).code).toBe('TIDAL_INVALID_INPUT');
      expect((err as InvalidInputError).message).toContain('sharedCatalogMinItems');
    }
  });
});
