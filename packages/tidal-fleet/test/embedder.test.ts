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
    for (const end = Date.now() + 30_000; server.inFlight > 0 && Date.now() < end;) await new Promise((r) => setTimeout(r, 5));
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
    for (const end = Date.now() + 30_000; server.inFlight < 2 && Date.now() < end;) await new Promise((r) => setTimeout(r, 5));
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
    // The breaker would stop the calls after three failures: this is about the budget alone.
    const embedder = client({ retryBudgetRatio: 0.1, retryBudgetMax: 1, breaker: { failureThreshold: 1_000 } });
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
    // A timeout the answered calls stay well within on a loaded machine; the held call meets it.
    const embedder = client({ maxInFlight: 1, timeoutMs: 2_000 });
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

  it('opens its breaker after slow or failed calls in a row, refuses at once while open, and closes on a good probe', async () => {
    let nowMs = 0;
    const embedder = client({
      now: () => nowMs,
      maxAttempts: 1,
      timeoutMs: 60_000,
      breaker: { failureThreshold: 3, openMs: 5_000, slowCallMs: 1_000 },
    });
    const untilInFlight = async (n: number) => {
      for (const end = Date.now() + 30_000; server.inFlight < n && Date.now() < end;) await new Promise((r) => setTimeout(r, 2));
    };
    /** A call the server holds while the client's clock moves `ms` on: slow by the clock, not by the machine. */
    const slowCall = async (ms: number) => {
      server.hold();
      const call = embedder.tryEmbed('slow');
      await untilInFlight(1);
      nowMs += ms;
      server.release();
      return call;
    };
    // A slow answer is still an answer: its vector is used, and it counts against the upstream.
    expect((await slowCall(1_500)).degradation).toBeNull();
    server.failNext(1, 500);
    expect((await embedder.tryEmbed('x')).degradation).toBe('embedder_failed');
    expect(embedder.stats().breaker).toBe('closed');
    // A good call in between starts the count again.
    expect((await embedder.tryEmbed('x')).degradation).toBeNull();
    for (let i = 0; i < 2; i++) await slowCall(1_500);
    expect(embedder.stats().breaker).toBe('closed');
    await slowCall(1_500);
    expect(embedder.stats()).toMatchObject({ breaker: 'open', breakerOpened: 1 });
    // Open: answered at once, nothing sent.
    const sent = server.requests;
    for (let i = 0; i < 5; i++) expect((await embedder.tryEmbed('x')).degradation).toBe('embedder_open');
    nowMs += 4_999;
    expect((await embedder.tryEmbed('x')).degradation).toBe('embedder_open');
    expect(server.requests, 'the open breaker sends nothing').toBe(sent);
    expect(embedder.stats().breakerRefused).toBe(6);
    // The cool-down is over: one call probes, the others meanwhile are still refused at once.
    nowMs += 1;
    server.hold();
    const probe = embedder.tryEmbed('probe');
    await untilInFlight(1);
    expect(embedder.stats().breaker).toBe('halfOpen');
    expect((await embedder.tryEmbed('x')).degradation).toBe('embedder_open');
    server.release();
    expect((await probe).degradation).toBeNull();
    expect(server.requests).toBe(sent + 1);
    expect(embedder.stats()).toMatchObject({ breaker: 'closed', breakerOpened: 1 });
    expect((await embedder.tryEmbed('x')).degradation).toBeNull();
    // A failed probe opens it again for another cool-down.
    for (let i = 0; i < 3; i++) await slowCall(1_500);
    nowMs += 5_000;
    server.failNext(1, 500);
    expect((await embedder.tryEmbed('probe')).degradation).toBe('embedder_failed');
    expect(embedder.stats()).toMatchObject({ breaker: 'open', breakerOpened: 3 });
    expect((await embedder.tryEmbed('x')).degradation).toBe('embedder_open');
  });

  it('counts neither a call its bulkhead shed, nor one its caller left, nor a request refused as bad against the upstream', async () => {
    let nowMs = 0;
    const embedder = client({ now: () => nowMs, maxInFlight: 1, maxAttempts: 1, breaker: { failureThreshold: 1, openMs: 1_000 } });
    // A request the upstream refused as bad says nothing of its health: the breaker stays closed.
    server.failNext(1, 400);
    expect((await embedder.tryEmbed('x')).degradation).toBe('embedder_failed');
    expect(embedder.stats().breaker).toBe('closed');
    server.failNext(1, 500);
    await embedder.tryEmbed('x');
    expect(embedder.stats().breaker).toBe('open');
    nowMs += 1_000;
    // The half-open probe is held; a call shed by the bulkhead meanwhile leaves the probe alone...
    server.hold();
    const left = new AbortController();
    const probe = embedder.embed('probe', { signal: left.signal });
    for (const end = Date.now() + 30_000; server.inFlight < 1 && Date.now() < end;) await new Promise((r) => setTimeout(r, 2));
    expect((await embedder.tryEmbed('y')).degradation).toBe('embedder_shed');
    // ...and a probe whose caller left lets the next call probe, without opening it again.
    left.abort();
    await expect(probe).rejects.toThrow(/abort/i);
    server.release();
    expect(embedder.stats()).toMatchObject({ breaker: 'halfOpen', breakerOpened: 1 });
    expect((await embedder.tryEmbed('z')).degradation).toBeNull();
    expect(embedder.stats().breaker).toBe('closed');
  });

  it('refuses bad options, a non-integer max_concurrent_calls included', () => {
    expect(() => new EmbedderClient({ url: 'ftp://x' })).toThrow(InvalidInputError);
    expect(() => client({ maxAttempts: 4 })).toThrow(/options.maxAttempts must be a whole number from 1 to 3, got 4/);
    expect(() => client({ breaker: { failureThreshold: 0 } })).toThrow(
      /options.breaker.failureThreshold must be a whole number from 1 to 1000, got 0/,
    );
    expect(() => client({ breaker: { slowCallMs: -1 } })).toThrow(/options.breaker.slowCallMs/);
    expect(() => client({ breaker: 'on' as never })).toThrow(/options.breaker must be an object/);
    expect(() => client({ slots: { source: new LocalSlotSource(), maxConcurrentCalls: 1.5 } })).toThrow(
      /options.slots.maxConcurrentCalls must be a whole number from 1 to 32/,
    );
  });
});
