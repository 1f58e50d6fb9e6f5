/**
 * Items upserted without an embedding get one from the embedder (tidal-fleet's EmbedderClient
 * against the test embedding server) before they are written; when the embedder cannot answer,
 * the items are written without one and one TIDAL_EMBEDDING_SKIPPED warning names them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TidalDb, type TidalWarning } from 'tidal-core';
import { EmbedderClient } from 'tidal-fleet';
import { embeddingOf, startEmbeddingServer, type EmbeddingServer } from '../packages/tidal-fleet/test/helpers/embedding-server.js';

const DIMS = 8;
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000 }], embeddingDims: DIMS };

describe('upserting items without an embedding', () => {
  let server: EmbeddingServer;
  let short: EmbeddingServer;
  const warnings: TidalWarning[] = [];
  let db: TidalDb;
  let wrongLength: TidalDb;

  beforeAll(async () => {
    server = await startEmbeddingServer({ dims: DIMS });
    short = await startEmbeddingServer({ dims: DIMS / 2 });
    const open = (url: string) =>
      TidalDb.builder()
        .schema(SCHEMA)
        .ephemeral()
        .workers(1)
        .onWarning((w) => warnings.push(w))
        .embedder(new EmbedderClient({ url, maxInFlight: 4, maxAttempts: 1, timeoutMs: 60_000 }))
        .open();
    db = await open(server.url);
    wrongLength = await open(short.url);
  });
  afterAll(async () => {
    await Promise.all([db?.close(), wrongLength?.close()]);
    await Promise.all([server?.close(), short?.close()]);
  });

  it('embeds the text of items that have none, leaves the others alone, and the ANN finds them', async () => {
    server.resetCounts();
    const mine = [0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5];
    await db.upsertItems([
      { id: 'a', text: 'lantern harbour' },
      { id: 'b', text: 'copper meadow', embedding: mine },
      { id: 'c' },
      ...Array.from({ length: 10 }, (_, i) => ({ id: `n${i}`, text: `stone river ${i}` })),
    ]);
    // Eleven items with text and no embedding: one call each; b keeps its own, c has no text.
    expect(server.requests).toBe(11);
    const a = await db.get('a');
    const want = embeddingOf('lantern harbour', DIMS);
    const norm = Math.hypot(...want);
    const got = Array.from(a!.embedding!);
    // Stored as the server answered it (up to the store's normalisation and float32).
    const gotNorm = Math.hypot(...got);
    got.forEach((x, k) => expect(x / gotNorm).toBeCloseTo(want[k]! / norm, 5));
    const b = await db.get('b');
    expect(Array.from(b!.embedding!).map((x) => Math.sign(x))).toEqual(mine.map((x) => Math.sign(x)));
    expect((await db.get('c'))!.embedding).toBeUndefined();
    const near = await db.retrieve({ profile: 'popular', context: want, limit: 3 });
    expect(near.items.map((i) => i.id)).toContain('a');
    expect(warnings).toEqual([]);
  });

  it('writes them without one and warns once when the embedder fails or answers the wrong length', async () => {
    server.failNext(2, 500);
    await db.upsertItems([
      { id: 'f1', text: 'meadow' },
      { id: 'f2', text: 'river' },
    ]);
    expect((await db.get('f1'))!.embedding).toBeUndefined();
    expect((await db.get('f2'))!.embedding).toBeUndefined();
    expect(warnings.map((w) => w.code)).toEqual(['TIDAL_EMBEDDING_SKIPPED']);
    expect(warnings[0]!.message).toMatch(/2 of 2 items/);
    expect(warnings[0]!.message).toMatch(/f1 \(embedder_failed\)/);
    // The embedder answers again: so do upserts.
    await db.upsertItems([{ id: 'ok', text: 'stone' }]);
    expect((await db.get('ok'))!.embedding).toBeDefined();
    expect(warnings).toHaveLength(1);

    warnings.length = 0;
    await wrongLength.upsertItems([{ id: 'w', text: 'copper' }]);
    expect((await wrongLength.get('w'))!.embedding).toBeUndefined();
    expect(warnings[0]!.message).toMatch(/w \(embedder_bad_vector\)/);
  });
});
