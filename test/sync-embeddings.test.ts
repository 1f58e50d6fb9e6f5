/**
 * What a worker's catalog sync reads of the embeddings: a row's embedding BLOB only where the sync
 * needs it, to write the row's shared int8 vector (the first thread to sync it) or to feed its own
 * ANN index. A worker that finds the vectors written and whose index is built on a thread of its
 * own reads the rows without them (100 000 embeddings are 51 MB of native allocations a thread
 * would otherwise make on its first sync), counted by each `WarmResult.refreshedEmbeddings`.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { TidalDb, type ItemInput, type SchemaDefinition } from 'tidal-core';
import { HOUR, NOW, mulberry32 } from './helpers.js';

const DIMS = 8;
const SCHEMA: SchemaDefinition = { signals: [{ name: 'view', halfLifeMs: HOUR }], embeddingDims: DIMS, metadata: {} };

const open: TidalDb[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((db) => db.close()));
});

function items(from: number, n: number): ItemInput[] {
  const rand = mulberry32(11 + from);
  return Array.from({ length: n }, (_, k) => ({
    id: `e${from + k}`,
    text: `item ${from + k}`,
    embedding: Array.from({ length: DIMS }, () => rand() * 2 - 1),
    createdAt: NOW - (from + k) * 1000,
  }));
}

async function openDb(backgroundRows: number): Promise<TidalDb> {
  const db = await TidalDb.builder()
    .ephemeral()
    .schema(SCHEMA)
    .workers(2)
    .clock(() => NOW)
    .ann({ backgroundRows })
    .onWarning(() => {})
    .open();
  open.push(db);
  return db;
}

describe('embeddings a catalog sync reads', () => {
  it('one worker reads them, to write the shared vectors; the other reads the rows without them', async () => {
    const db = await openDb(0);
    await db.upsertItems(items(0, 300));
    const warm = await db.warm();
    expect(warm.map((r) => r.annSource)).toEqual(['building', 'building']);
    expect(warm.map((r) => r.refreshedRows)).toEqual([300, 300]);
    expect(warm.map((r) => r.refreshedEmbeddings).sort((a, b) => a - b)).toEqual([0, 300]);
    expect(warm.map((r) => r.threadItems)).toEqual([300, 300]);

    // Rows written after: again one worker writes their vectors, and every thread's exact search
    // ranks by them (an item moved onto the query is first wherever the search runs).
    const moved = { ...items(0, 1)[0]!, embedding: Array.from({ length: DIMS }, (_, k) => (k === 0 ? 1 : 0)) };
    await db.upsertItems([...items(300, 20), moved]);
    const again = await db.warm();
    expect(again.map((r) => r.refreshedRows)).toEqual([21, 21]);
    expect(again.map((r) => r.refreshedEmbeddings).sort((a, b) => a - b)).toEqual([0, 21]);
    const found = await Promise.all([0, 1, 2, 3].map(() => db.search({ vector: moved.embedding, limit: 1 })));
    for (const r of found) expect(r.hits.map((h) => h.id)).toEqual(['e0']);
  });

  it('with the index built in the warm and mapped by both, only the writer of the vectors reads them', async () => {
    const db = await openDb(Number.POSITIVE_INFINITY);
    await db.upsertItems(items(0, 300));
    const warm = await db.warm();
    expect(warm.map((r) => r.annSource)).toEqual(['built', 'built']);
    expect(warm.map((r) => r.annSize)).toEqual([300, 300]);
    expect(warm.map((r) => r.refreshedRows)).toEqual([300, 300]);
    // The elected worker built the index from the rows on its own; its catalog sync needs no
    // embedding unless it is also the one to write the vectors.
    expect(warm.map((r) => r.refreshedEmbeddings).sort((a, b) => a - b)).toEqual([0, 300]);
  });

  it('a sync that feeds its own index (a query before any warm) finds every item by its embedding', async () => {
    const db = await openDb(Number.POSITIVE_INFINITY);
    const all = items(0, 300);
    await db.upsertItems(all);
    const q = all[7]!.embedding!;
    const hits = await Promise.all([0, 1, 2, 3].map(() => db.search({ vector: q, limit: 1 })));
    for (const r of hits) expect(r.hits.map((h) => h.id)).toEqual(['e7']);
    expect(db.stats().memory.vectors).toMatchObject({ rows: 300 });
  });
});
