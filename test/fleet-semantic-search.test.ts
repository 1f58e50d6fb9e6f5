/**
 * `search({ text, semantic: true })` through tidal-fleet's EmbedderClient against the test embedding
 * server: hybrid when the embedder answers, text alone with the reason when it is down, slow, shed or
 * answers a vector of the wrong length. Slowness is a held request, never a race with the clock.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidInputError, TidalDb, type SearchRequest, type TextEmbedder } from 'tidal-core';
import { EmbedderClient } from 'tidal-fleet';
import { embeddingOf, startEmbeddingServer, type EmbeddingServer } from '../packages/tidal-fleet/test/helpers/embedding-server.js';

const DIMS = 8;
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000 }], embeddingDims: DIMS };
const WORDS = ['river', 'stone', 'harbour', 'lantern', 'meadow', 'copper'];

async function openDb(embedder?: TextEmbedder): Promise<TidalDb> {
  let b = TidalDb.builder().schema(SCHEMA).ephemeral().workers(1);
  if (embedder !== undefined) b = b.embedder(embedder);
  const db = await b.open();
  await db.upsertItems(
    WORDS.map((w, i) => ({ id: `i${i}`, text: `${w} ${WORDS[(i + 1) % WORDS.length]}`, embedding: embeddingOf(w, DIMS) })),
  );
  return db;
}

describe('semantic search', () => {
  let server: EmbeddingServer;
  let short: EmbeddingServer;
  let db: TidalDb;
  let client: EmbedderClient;

  beforeAll(async () => {
    server = await startEmbeddingServer({ dims: DIMS });
    short = await startEmbeddingServer({ dims: DIMS / 2 });
    // A default deadline far past the test's: only the query's own deadline can end a held call.
    client = new EmbedderClient({ url: server.url, maxInFlight: 1, maxAttempts: 1, timeoutMs: 60_000 });
    db = await openDb(client);
  });
  afterAll(async () => {
    await db?.close();
    await Promise.all([server?.close(), short?.close()]);
  });

  it('embeds the text and runs hybrid', async () => {
    server.resetCounts();
    const r = await db.search({ text: 'lantern', semantic: true });
    expect(r.mode).toBe('hybrid');
    expect(r.semanticFallback).toBeNull();
    expect(server.requests).toBe(1);
    expect(r.hits.map((h) => h.id)).toContain('i3');
    // Without semantic the result has no such field and the embedder is not called.
    const plain = await db.search({ text: 'lantern' });
    expect(plain.mode).toBe('text');
    expect('semanticFallback' in plain).toBe(false);
    expect(server.requests).toBe(1);
  });

  it('runs on the text alone and says why when the embedder fails', async () => {
    server.failNext(1, 500);
    const r = await db.search({ text: 'lantern', semantic: true });
    expect(r.mode).toBe('text');
    expect(r.semanticFallback).toBe('embedder_failed');
    expect(r.warnings.join(' ')).toMatch(/embedder_failed/);
    expect(r.hits.map((h) => h.id)).toContain('i3');
  });

  it('is shed by the bulkhead, and times out within its share of the deadline, without failing', async () => {
    server.hold();
    try {
      // The first call holds the one place in the bulkhead, and is cut at half its 400 ms deadline...
      const slow = db.search({ text: 'meadow', semantic: true, timeoutMs: 400 });
      // ...the second is refused at once.
      const shed = await db.search({ text: 'meadow', semantic: true });
      expect(shed.semanticFallback).toBe('embedder_shed');
      expect(shed.mode).toBe('text');
      const timedOut = await slow;
      expect(timedOut.semanticFallback).toBe('embedder_timeout');
      expect(timedOut.mode).toBe('text');
      expect(timedOut.hits.map((h) => h.id)).toContain('i4');
    } finally {
      server.release();
    }
  });

  it('pays a slow embedder one deadline, then answers from the text at once while its breaker is open', async () => {
    const slowServer = await startEmbeddingServer({ dims: DIMS });
    // The client's clock is the real one moved on by the test: the breaker's cool-down passes when
    // the test says, and the search's deadlines (on Date.now) still read right until then.
    let skipMs = 0;
    const breaking = new EmbedderClient({
      url: slowServer.url,
      maxAttempts: 1,
      now: () => Date.now() + skipMs,
      breaker: { failureThreshold: 1, openMs: 5_000 },
    });
    const other = await openDb(breaking);
    try {
      slowServer.hold();
      const first = await other.search({ text: 'meadow', semantic: true, timeoutMs: 1_000 });
      expect(first.semanticFallback).toBe('embedder_timeout');
      expect(breaking.stats().breaker).toBe('open');
      // Every search after it, while the breaker is open, runs on the text without calling the embedder.
      for (let i = 0; i < 5; i++) {
        const r = await other.search({ text: 'meadow', semantic: true, timeoutMs: 1_000 });
        expect([r.mode, r.semanticFallback]).toEqual(['text', 'embedder_open']);
        expect(r.hits.map((h) => h.id)).toContain('i4');
      }
      expect(slowServer.requests, 'one call reached the slow embedder').toBe(1);
      slowServer.release();
      // The embedder is well again; after the cool-down one search probes it and closes the breaker.
      skipMs = 5_000;
      // Its deadline is read 5 s short on the moved clock: 30 s leaves the probe 10 s.
      const probe = await other.search({ text: 'meadow', semantic: true, timeoutMs: 30_000 });
      expect([probe.mode, probe.semanticFallback]).toEqual(['hybrid', null]);
      expect(breaking.stats()).toMatchObject({ breaker: 'closed', breakerOpened: 1, breakerRefused: 5 });
      expect(slowServer.requests).toBe(2);
    } finally {
      slowServer.release();
      await other.close();
      await slowServer.close();
    }
  });

  it('treats a vector of the wrong length as an embedder failure', async () => {
    const other = await openDb(new EmbedderClient({ url: short.url }));
    try {
      const r = await other.search({ text: 'copper', semantic: true });
      expect(r.semanticFallback).toBe('embedder_bad_vector');
      expect(r.mode).toBe('text');
      // Any object with tryEmbed is an embedder; one that throws degrades too.
    } finally {
      await other.close();
    }
    const throwing = await openDb({ tryEmbed: () => Promise.reject(new Error('boom')) });
    try {
      expect((await throwing.search({ text: 'copper', semantic: true })).semanticFallback).toBe('embedder_error');
    } finally {
      await throwing.close();
    }
  });

  it('refuses semantic without an embedder, without text, with a vector, or not a boolean', async () => {
    const bare = await openDb();
    try {
      const err = await bare.search({ text: 'river', semantic: true }).catch((e: unknown) => e);
      expect(InvalidInputError.is(err)).toBe(true);
      expect((err as InvalidInputError).field).toBe('semantic');
      expect((await bare.search({ text: 'river', semantic: false })).mode).toBe('text');
    } finally {
      await bare.close();
    }
    for (const req of [
      { semantic: true },
      { text: 'river', semantic: true, vector: embeddingOf('river', DIMS) },
      { text: 'river', semantic: 'yes' as unknown as boolean },
    ]) {
      // { semantic: true } alone does not compile (a search needs text or vector); an untyped caller gets the error.
      const err = await db.search(req as SearchRequest).catch((e: unknown) => e);
      expect(InvalidInputError.is(err), JSON.stringify(req)).toBe(true);
      expect((err as InvalidInputError).field).toBe('semantic');
    }
    await expect(
      TidalDb.builder()
        .schema(SCHEMA)
        .ephemeral()
        .embedder({} as TextEmbedder)
        .open(),
    ).rejects.toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'embedder' });
  });
});
