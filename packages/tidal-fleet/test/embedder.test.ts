import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { InvalidInputError, LocalSlotSource } from 'tidal-load';
import { DependencyUnavailableError, EmbedderClient, type EmbedderOptions } from '../src/index.js';
import { embeddingOf, startEmbeddingServer, type EmbeddingServer } from './helpers/embedding-server.js';

describe('EmbedderClient', () => {
  let server: EmbeddingServer;
  beforeAll(async () => {
    server = await startEmbeddingServer({ dims: 4 });
  });
  afterAll(() => server.close());
  beforeEach(async () => {
    server.latencyMs = 0;
    server.failNext(0, 503);
    server.release();
    for (let i = 0; i < 500 && server.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 5));
    server.resetCounts();
  });

  const client = (options: Partial<EmbedderOptions> = {}) => new EmbedderClient({ url: server.url, random: () => 0, ...options });
  const failure = async (p: Promise<unknown>): Promise<DependencyUnavailableError> => {
    const err = await p.then(
      () => null,
      (e: unknown) => e,
    );
    if (!DependencyUnavailableError.is(err)) throw new Error(`expected a DependencyUnavailableError, got ${String(err)}`);
    return err;
  };

  it("embeds texts in order, with the server's deterministic vectors", async () => {
    const vectors = await client().embed(['b', 'a']);
    expect(vectors.map((v) => Array.from(v))).toEqual(
      [embeddingOf('b', 4), embeddingOf('a', 4)].map((v) => Array.from(Float32Array.from(v))),
    );
  });

  it('sheds at once when its bulkhead is full: nothing is sent, nothing waits', async () => {
    const embedder = client({ maxInFlight: 2 });
    server.hold();
    const inFlight = [embedder.embed('x'), embedder.embed('y')];
    const shed = await failure(embedder.embed('z'));
    expect([shed.reason, shed.attempts]).toEqual(['shed', 0]);
    expect(embedder.stats()).toMatchObject({ shed: 1, inFlight: 2 });
    for (let i = 0; i < 500 && server.inFlight < 2; i++) await new Promise((r) => setTimeout(r, 5));
    server.release();
    await Promise.all(inFlight);
    expect(server.requests, 'the shed call never reached the server').toBe(2);
    expect(server.maxInFlight).toBe(2);
  });

  it('retries transient errors (502, 503, 504, a refused connection), up to 3 attempts', async () => {
    server.failNext(2, 503);
    await client().embed('x');
    expect(server.requests).toBe(3);
    server.resetCounts();
    server.failNext(5, 502);
    const err = await failure(client().embed('x'));
    expect([err.reason, err.attempts, server.requests]).toEqual(['failed', 3, 3]);
    const refused = await failure(new EmbedderClient({ url: 'http://127.0.0.1:1', random: () => 0 }).embed('x'));
    expect([refused.reason, refused.attempts]).toEqual(['failed', 3]);
  });

  it('does not retry what is not transient (400, 429)', async () => {
    for (const status of [400, 429]) {
      server.resetCounts();
      server.failNext(1, status);
      const err = await failure(client().embed('x'));
      expect([err.reason, err.attempts, server.requests], `HTTP ${status}`).toEqual(['failed', 1, 1]);
    }
  });

  it('does not retry when the backoff would end past the deadline', async () => {
    server.failNext(1, 503);
    const err = await failure(client({ random: () => 0.99, baseDelayMs: 10_000, maxDelayMs: 10_000, timeoutMs: 1_000 }).embed('x'));
    expect([err.reason, err.attempts, server.requests]).toEqual(['deadline', 1, 1]);
    expect(err.message).toMatch(/no time left for a retry/);
  });

  it('fails a call whose deadline passes in flight', async () => {
    server.hold();
    const err = await failure(client({ timeoutMs: 50 }).embed('x'));
    expect([err.reason, err.attempts]).toEqual(['deadline', 1]);
    server.release();
  });

  it('keeps retries to its budget, about a tenth of the calls, when everything fails', async () => {
    const embedder = client({ retryBudgetRatio: 0.1, retryBudgetMax: 1 });
    server.failNext(1_000, 503);
    for (let i = 0; i < 40; i++) await failure(embedder.embed('x'));
    const { retries, retriesDenied } = embedder.stats();
    // One saved up at start, then a tenth of a retry earned per call: 1 + 40 × 0.1 = 5 at most.
    expect(retries).toBeLessThanOrEqual(5);
    expect(retries).toBeGreaterThanOrEqual(4);
    expect(retriesDenied, 'almost every call wanted a retry it did not get').toBeGreaterThanOrEqual(35);
    expect(server.requests).toBe(40 + retries);
  });

  it('takes a slot per attempt when given slots, so the upstream sees at most max_concurrent_calls', async () => {
    const embedder = client({ slots: { source: new LocalSlotSource(), maxConcurrentCalls: 2 } });
    server.latencyMs = 20;
    await Promise.all(Array.from({ length: 10 }, (_, i) => embedder.embed(`t${i}`)));
    expect(server.maxInFlight).toBe(2);
  });

  it('tryEmbed answers a degradation reason instead of throwing: shed, timeout, failed', async () => {
    const embedder = client({ maxInFlight: 1, timeoutMs: 50 });
    expect((await embedder.tryEmbed('x')).degradation).toBeNull();
    server.hold();
    const slow = embedder.tryEmbed('slow');
    expect((await embedder.tryEmbed('y')).degradation).toBe('embedder_shed');
    expect((await slow).degradation).toBe('embedder_timeout');
    server.release();
    server.failNext(1, 400);
    const failed = await embedder.tryEmbed('z');
    expect([failed.degradation, failed.vector]).toEqual(['embedder_failed', null]);
  });

  it('refuses bad options, a non-integer max_concurrent_calls included', () => {
    expect(() => new EmbedderClient({ url: 'ftp://x' })).toThrow(InvalidInputError);
    expect(() => client({ maxAttempts: 4 })).toThrow(/options.maxAttempts must be a whole number from 1 to 3, got 4/);
    expect(() => client({ slots: { source: new LocalSlotSource(), maxConcurrentCalls: 1.5 } })).toThrow(
      /options.slots.maxConcurrentCalls must be a whole number from 1 to 32/,
    );
  });
});
