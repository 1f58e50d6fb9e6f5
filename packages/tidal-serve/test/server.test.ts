/**
 * The server black-box on an ephemeral port of 127.0.0.1: routes against a real database, error
 * shapes and status mapping against a fake one that throws what a test tells it to, the chain's
 * place (exempt paths, refusals written as given, tickets released once with their outcome), the
 * deadline header, abort on disconnect, keys and the body limit. Orders come from deferred
 * promises, never from sleeps.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import {
  AbortedError,
  BackpressureError,
  CursorExpiredError,
  InvalidInputError,
  MemoryPressureError,
  OverloadedError,
  RateLimitedError,
  TidalDb,
  type RetrieveRequest,
  type RetrieveResults,
} from 'tidal-core';
import { Registry } from 'prom-client';
import {
  createServer,
  startServer,
  type AdmissionChain,
  type Outcome,
  type Refusal,
  type RequestInfo,
  type ServeDb,
  type ServerOptions,
  type TidalServer,
  type Ticket,
} from 'tidal-serve';
import { KeyRing } from 'tidal-serve/internal';

const NOW = Date.UTC(2025, 0, 1);
const HOUR = 3_600_000;
const SCHEMA = {
  signals: [
    { name: 'view', halfLifeMs: HOUR, velocity: true },
    { name: 'like', halfLifeMs: 24 * HOUR, windows: ['24h', 'all'] as const },
  ],
  metadata: { category: 'string' as const },
  embeddingDims: 3,
};

interface Reply {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
  text: string;
}

async function call(base: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: Record<string, unknown> = {};
  try {
    parsed = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // /metrics is text
  }
  return { status: res.status, headers: res.headers, body: parsed, text };
}

function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

async function serve(options: ServerOptions): Promise<{ server: TidalServer; url: string }> {
  const server = await startServer({ ...options, port: 0, host: '127.0.0.1' });
  onTestFinished(() => server.close({ drainMs: 0 }));
  return { server, url: server.url! };
}

const STATS = {
  inFlight: 0,
  level: 'Full',
} as const;

/** A database double whose query and write calls do what the test gives them. */
function fakeDb(parts: Partial<Record<keyof ServeDb, unknown>>): ServeDb {
  return { stats: () => STATS, load: { level: 0, inFlight: 0 }, closed: false, close: async () => {}, ...parts } as unknown as ServeDb;
}

/** A chain that records every admission and release; `refuse` decides per request. */
function recordingChain(refuse: (info: RequestInfo) => Refusal | undefined = () => undefined) {
  const admitted: RequestInfo[] = [];
  const released: Outcome[] = [];
  const releasedOnce = deferred<Outcome>();
  const chain: AdmissionChain = {
    admit(info): Ticket | Refusal {
      const refusal = refuse(info);
      if (refusal) return refusal;
      admitted.push(info);
      let done = false;
      return {
        admitted: true,
        headers: { 'x-quota-state': 'allowed' },
        release(outcome) {
          if (done) throw new Error('released twice');
          done = true;
          released.push(outcome);
          releasedOnce.resolve(outcome);
        },
      };
    },
    stats: () => [{ name: 'inflight', limit: 7, inFlight: admitted.length - released.length, admitted: admitted.length, rejected: 0 }],
  };
  return { chain, admitted, released, releasedOnce: releasedOnce.promise };
}

const REFUSE_ALL: Refusal = {
  admitted: false,
  status: 503,
  code: 'TIDAL_SERVE_INFLIGHT',
  reason: 'inflight',
  retryAfterMs: 1234.2,
  message: 'too many requests in flight',
  headers: { 'x-stage': 'inflight' },
};

describe('routes against a real database', () => {
  let db: TidalDb;
  let server: TidalServer;
  let url: string;
  let registry: Registry;

  beforeAll(async () => {
    registry = new Registry();
    db = await TidalDb.builder()
      .ephemeral()
      .schema(SCHEMA)
      .workers(1)
      .clock(() => NOW)
      .metrics(registry)
      .open();
    server = await startServer({ db, port: 0, host: '127.0.0.1', registry });
    url = server.url!;
  });
  afterAll(async () => {
    await server.close({ drainMs: 0 });
    await db.close();
  });

  it('upserts one item, a batch and by PUT, gets it with its embedding as an array, deletes it', async () => {
    expect(
      (await call(url, 'POST', '/items', { id: 'a', text: 'jazz piano', embedding: [1, 0, 0], metadata: { category: 'jazz' } })).body,
    ).toEqual({ upserted: 1 });
    expect(
      (
        await call(url, 'POST', '/items', [
          { id: 'b', text: 'rock guitar' },
          { id: 'c', text: 'jazz guitar' },
        ])
      ).body,
    ).toEqual({ upserted: 2 });
    expect((await call(url, 'PUT', '/items/d', { text: 'pop song' })).status).toBe(200);
    const got = await call(url, 'GET', '/items/a');
    expect(got.body).toMatchObject({ id: 'a', text: 'jazz piano', embedding: [1, 0, 0], metadata: { category: 'jazz' } });
    expect((await call(url, 'DELETE', '/items/d')).body).toEqual({ deleted: 'd' });
    const gone = await call(url, 'GET', '/items/d');
    expect(gone.status).toBe(404);
    expect(gone.body).toEqual({ code: 'TIDAL_SERVE_NOT_FOUND', message: 'no item "d"', id: 'd' });
  });

  it('refuses a PUT whose body names another id', async () => {
    const r = await call(url, 'PUT', '/items/x', { id: 'y' });
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'id', value: 'y' });
  });

  it("writes one signal and a batch, and reads an item's signal values", async () => {
    const one = await call(url, 'POST', '/signals', { item: 'a', kind: 'view', at: NOW - 60_000 });
    const batch = await call(url, 'POST', '/signals', [
      { item: 'a', kind: 'view', at: NOW - 60_000 },
      { item: 'c', kind: 'like', at: NOW - 60_000 },
    ]);
    expect(batch.body).toEqual({ seq: (one.body.seq as number) + 1, count: 2 });
    const values = await call(url, 'GET', '/items/a/signals');
    expect(values.body).toMatchObject({ id: 'a', signals: { view: { count: 2 } } });
  });

  it('answers retrieve and search with the degradation level in a header and in the body', async () => {
    const r = await call(url, 'POST', '/retrieve', { profile: 'popular', limit: 5 });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-tidal-degradation-level')).toBe('Full');
    expect(r.body.degradationLevel).toBe('Full');
    expect((r.body.items as { id: string }[]).map((i) => i.id)).toEqual(['a', 'c']);
    const s = await call(url, 'POST', '/search', { text: 'jazz' });
    expect(s.headers.get('x-tidal-degradation-level')).toBe('Full');
    expect(s.body).toMatchObject({ mode: 'text', degradationLevel: 'Full' });
  });

  it('answers a query with exactly what the database returns, its items serialized by the worker, and pages through cursors', async () => {
    // The fixed clock makes the embedded calls and the HTTP ones rank alike.
    await call(url, 'POST', '/items', [
      { id: 'p1', text: 'jazz drums' },
      { id: 'p2', text: 'jazz bass' },
      { id: 'p3', text: 'jazz horns' },
    ]);
    const asJson = (v: unknown): unknown => JSON.parse(JSON.stringify(v));
    for (const [path, req, list] of [
      ['/retrieve', { profile: 'new', limit: 2, paginate: true }, 'items'],
      ['/search', { text: 'jazz', limit: 2, paginate: true }, 'hits'],
    ] as const) {
      const direct = path === '/retrieve' ? await db.retrieve({ ...req }) : await db.search({ ...req });
      const viaHttp = await call(url, 'POST', path, req);
      expect(viaHttp.status).toBe(200);
      // Each chain pins its own ranking: the cursors differ, the pages do not.
      const want = asJson({ ...direct, degradationLevel: 'Full', explain: undefined, tookMs: 0, nextCursor: 'chain' }) as Record<
        string,
        unknown
      >;
      expect(viaHttp.body.nextCursor).toEqual(expect.any(String));
      expect({ ...viaHttp.body, tookMs: 0, nextCursor: 'chain' }).toEqual(want);
      expect((viaHttp.body[list] as unknown[]).length).toBe(2);
      // The second page through the cursor the first one returned: the rest, disjoint.
      const next = await call(url, 'POST', path, { ...req, cursor: viaHttp.body.nextCursor });
      expect(next.status).toBe(200);
      const ids = (r: Reply) => (r.body[list] as { id: string }[]).map((x) => x.id);
      expect(ids(next).filter((id) => ids(viaHttp).includes(id))).toEqual([]);
      expect(ids(next).length).toBeGreaterThan(0);
    }
  });

  it("leaves explain out of a query's answer unless the body asks for it", async () => {
    const plain = await call(url, 'POST', '/retrieve', { profile: 'popular', limit: 5 });
    expect(plain.status).toBe(200);
    expect(plain.body).not.toHaveProperty('explain');
    expect(plain.body).toMatchObject({ degradationLevel: 'Full', levelReason: 'load', ageMs: 0, warnings: [], nextCursor: null });
    const asked = await call(url, 'POST', '/retrieve', { profile: 'popular', limit: 5, explain: true });
    expect(asked.body.explain).toMatchObject({ diversityApplied: false, candidates: expect.any(Number) });
    expect(asked.body.items).toEqual(plain.body.items);
    expect((await call(url, 'POST', '/search', { text: 'jazz' })).body).not.toHaveProperty('explain');
    expect((await call(url, 'POST', '/search', { text: 'jazz', explain: true })).body.explain).toMatchObject({
      bm25Limit: expect.any(Number),
    });
    expect((await call(url, 'POST', '/search', { text: 'jazz', explain: false })).body).not.toHaveProperty('explain');
    const bad = await call(url, 'POST', '/search', { text: 'jazz', explain: 'yes' });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'explain', value: 'yes' });
  });

  it("writes a query's answer, and an error, as one write to the socket with Content-Length", async () => {
    // Server-side sockets are the ones whose local port is the server's; the client's writes in
    // this process go from other ports.
    const port = Number(new URL(url).port);
    const proto = Socket.prototype as unknown as Record<'_write' | '_writev', (this: Socket, ...args: unknown[]) => unknown>;
    const original = { _write: proto._write, _writev: proto._writev };
    let writes = 0;
    for (const name of ['_write', '_writev'] as const) {
      proto[name] = function (this: Socket, ...args: unknown[]) {
        if (this.localPort === port) writes++;
        return original[name].apply(this, args);
      };
    }
    onTestFinished(() => void Object.assign(proto, original));
    // An answer with characters of two, three and four bytes: its length is counted in bytes.
    await call(url, 'POST', '/items', { id: 'naïve-☃-𝄞', text: 'café ünïcode', createdAt: NOW + 1 });
    for (const [path, body, status] of [
      ['/retrieve', { profile: 'new', limit: 1 }, 200],
      ['/retrieve', { profile: 'popular', limit: 5 }, 200],
      ['/search', { text: 'jazz', explain: true }, 200],
      ['/retrieve', { profile: 'popular', limit: 0 }, 400],
    ] as const) {
      writes = 0;
      const r = await call(url, 'POST', path, body);
      expect(r.status).toBe(status);
      expect(r.headers.get('content-length')).toBe(String(Buffer.byteLength(r.text)));
      expect(r.headers.get('transfer-encoding')).toBeNull();
      expect(writes, `${path} ${status}`).toBe(1);
      if (body.profile === 'new') expect((r.body.items as { id: string }[]).map((i) => i.id)).toEqual(['naïve-☃-𝄞']);
    }
  });

  it("answers POST /retrieve and /search on its own path exactly as fastify's route does", async () => {
    // A query string sends the same request to fastify's route; without one it takes the server's own path.
    const same = (r: Reply) => ({
      status: r.status,
      // fastify closes the connection after a body it could not parse; this path has read it whole and keeps it.
      headers: [...r.headers.entries()].filter(([k]) => !['date', 'content-length', 'connection', 'keep-alive'].includes(k)),
      length: r.headers.get('content-length') === String(Buffer.byteLength(r.text)),
      body: { ...r.body, tookMs: 0, explain: typeof r.body.explain },
    });
    await call(url, 'POST', '/items', { id: 'ü-1', text: 'smörgåsbord ☃' });
    const cases: [string, unknown, Record<string, string>?][] = [
      ['/retrieve', { profile: 'popular', limit: 5 }],
      ['/retrieve', { profile: 'related', item: 'a' }],
      ['/search', { text: 'jazz', explain: true }],
      ['/search', { text: 'smörgåsbord' }],
      ['/retrieve', '{"profile":'],
      ['/retrieve', [1]],
      ['/retrieve', { profile: 'popular', bogus: 1 }],
      ['/retrieve', { profile: 'popular', limit: 0 }],
      ['/search', {}],
      ['/retrieve', { profile: 'popular' }, { 'x-tidal-timeout-ms': 'soon' }],
    ];
    for (const [path, body, headers] of cases) {
      const own = await call(url, 'POST', path, body, headers);
      const routed = await call(url, 'POST', `${path}?via=fastify`, body, headers);
      expect(same(own), `${path} ${JSON.stringify(body)}`).toEqual(same(routed));
      expect(own.body.code === undefined ? own.status : own.body.code).not.toBe(500);
    }
    const found = await call(url, 'POST', '/search', { text: 'smörgåsbord' });
    expect((found.body.hits as { id: string }[]).map((h) => h.id)).toEqual(['ü-1']);
  });

  it('opens a session, signals through it, lists it and closes it', async () => {
    const opened = await call(url, 'POST', '/sessions', { agent: 'agent-7', ttlMs: 60_000 });
    expect(opened.status).toBe(201);
    const id = opened.body.id as string;
    expect((await call(url, 'POST', `/sessions/${id}/signals`, { agent: 'agent-7', item: 'b', kind: 'view' })).status).toBe(200);
    const listed = await call(url, 'GET', '/sessions');
    expect((listed.body.sessions as { id: string; seenItems: number }[]).find((s) => s.id === id)?.seenItems).toBe(1);
    const closed = await call(url, 'POST', `/sessions/${id}/close`, { agent: 'agent-7' });
    expect(closed.body).toMatchObject({ id, signalsWritten: 1, autoClosed: false });
    const again = await call(url, 'POST', `/sessions/${id}/close`, { agent: 'agent-7' });
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ code: 'TIDAL_SESSION_CLOSED', sessionId: id });
  });

  it('answers every error as { code, message, ...fields } without a stack', async () => {
    const bad = await call(url, 'POST', '/retrieve', { profile: 'popular', limit: 0 });
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ code: 'TIDAL_INVALID_INPUT', message: expect.stringContaining('limit'), field: 'limit', value: 0 });
    expect(bad.text).not.toMatch(/stack|at .*\.js/);
    const notJson = await call(url, 'POST', '/signals', '{oops');
    expect(notJson.status).toBe(400);
    expect(notJson.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'body' });
    const arrayBody = await call(url, 'POST', '/retrieve', [1]);
    expect(arrayBody.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'body' });
    const noRoute = await call(url, 'GET', '/nowhere');
    expect(noRoute.status).toBe(404);
    expect(noRoute.body).toEqual({ code: 'TIDAL_SERVE_NOT_FOUND', message: 'no route GET /nowhere' });
  });

  it("serves probes, /stats and /metrics with tidal-core's and the server's metrics", async () => {
    expect((await call(url, 'GET', '/healthz')).body).toEqual({ ok: true });
    expect((await call(url, 'GET', '/readyz')).body).toEqual({ ready: true, vectorSearch: 'none' });
    const stats = await call(url, 'GET', '/stats');
    expect(stats.body).toMatchObject({ db: { level: 'Full' }, chain: [], sample: { level: 'Full' } });
    const metrics = await call(url, 'GET', '/metrics');
    expect(metrics.text).toMatch(/tidal_queries_total\{level="Full",op="retrieve"\} \d/);
    expect(metrics.text).toMatch(/tidal_serve_responses_total\{route="retrieve",status="200"\} \d/);
    expect(metrics.text).toMatch(/tidal_serve_responses_total\{route="retrieve",status="400"\} \d/);
  });
});

describe('status mapping', () => {
  const cases: [string, () => Error, number, string, string | undefined][] = [
    ['OverloadedError', () => new OverloadedError(300, 256, 1500), 503, 'TIDAL_OVERLOADED', '2'],
    ['BackpressureError', () => new BackpressureError(20_000, 16_384, 12), 503, 'TIDAL_BACKPRESSURE', '1'],
    ['MemoryPressureError', () => new MemoryPressureError(10, 100), 503, 'TIDAL_MEMORY_PRESSURE', undefined],
    ['RateLimitedError', () => new RateLimitedError('agent', 'sess', 5, 200, 10), 429, 'TIDAL_RATE_LIMITED', '1'],
    ['InvalidInputError', () => new InvalidInputError('profile', 'one of the profiles', 'x'), 400, 'TIDAL_INVALID_INPUT', undefined],
    ['CursorExpiredError', () => new CursorExpiredError('evicted', 'was evicted'), 410, 'TIDAL_CURSOR_EXPIRED', undefined],
  ];
  it('CursorExpiredError → 410 naming the cursor and why its ranking is gone', async () => {
    const err = new CursorExpiredError('expired', 'expired: it is kept 600000 ms after its last page (cursors.ttlMs)');
    const { url } = await serve({ db: fakeDb({ search: async () => Promise.reject(err) }) });
    const r = await call(url, 'POST', '/search', { text: 'jazz', cursor: 'x' });
    expect(r.status).toBe(410);
    expect(r.body).toEqual({ code: 'TIDAL_CURSOR_EXPIRED', message: err.message, field: 'cursor', reason: 'expired' });
  });
  for (const [name, make, status, code, retryAfter] of cases) {
    it(`${name} → ${status} with its code, fields and retry figures`, async () => {
      const err = make();
      const { url } = await serve({ db: fakeDb({ retrieve: async () => Promise.reject(err) }) });
      const r = await call(url, 'POST', '/retrieve', { profile: 'popular' });
      expect(r.status).toBe(status);
      expect(r.body.code).toBe(code);
      expect(r.body.message).toBe(err.message);
      expect(r.body).not.toHaveProperty('stack');
      expect(r.headers.get('retry-after') ?? undefined).toBe(retryAfter);
      const ms = (err as { retryAfterMs?: number }).retryAfterMs;
      expect(r.headers.get('x-retry-after-ms') ?? undefined).toBe(ms === undefined ? undefined : String(ms));
      if (ms !== undefined) expect(r.body.retryAfterMs).toBe(ms);
    });
  }

  it('an unknown failure is a 500 that shows no message', async () => {
    const { url } = await serve({ db: fakeDb({ retrieve: async () => Promise.reject(new Error('secret path /etc/x')) }) });
    const r = await call(url, 'POST', '/retrieve', { profile: 'popular' });
    expect(r.status).toBe(500);
    expect(r.body).toEqual({ code: 'TIDAL_SERVE_INTERNAL', message: 'internal error' });
  });
});

describe('the admission chain', () => {
  it('answers the exempt paths while the chain refuses everything else, and writes refusals as given', async () => {
    let asked = 0;
    const chain: AdmissionChain = {
      admit: () => {
        asked++;
        return REFUSE_ALL;
      },
      stats: () => [],
    };
    const { url } = await serve({ db: fakeDb({}), admission: chain });
    for (const path of ['/healthz', '/readyz', '/metrics', '/stats']) expect((await call(url, 'GET', path)).status).toBe(200);
    expect((await call(url, 'GET', '/dashboard')).status).toBe(404); // exempt, no dashboard configured
    expect(asked).toBe(0);
    const r = await call(url, 'POST', '/retrieve', { profile: 'popular' });
    expect(asked).toBe(1);
    expect(r.status).toBe(503);
    expect(r.body).toEqual({
      code: 'TIDAL_SERVE_INFLIGHT',
      message: 'too many requests in flight',
      reason: 'inflight',
      retryAfterMs: 1235,
    });
    expect(r.headers.get('retry-after')).toBe('2');
    expect(r.headers.get('x-retry-after-ms')).toBe('1235');
    expect(r.headers.get('x-stage')).toBe('inflight');
  });

  it('writes a 503 refusal without Date (optional for 5xx) and a 429 with it, each with its exact headers', async () => {
    const quota: Refusal = {
      admitted: false,
      status: 429,
      code: 'TIDAL_SERVE_TENANT_RATE',
      reason: 'tenant',
      retryAfterMs: 10.2,
      message: 'tenant "a\\"b" is over its rate',
      headers: { 'x-ratelimit-state': 'over' },
    };
    const { url } = await serve({
      db: fakeDb({}),
      admission: { admit: (info) => (info.route === 'search' ? quota : REFUSE_ALL), stats: () => [] },
    });
    const capacity = await call(url, 'POST', '/retrieve', { profile: 'popular' });
    expect(capacity.status).toBe(503);
    expect(capacity.headers.get('date')).toBeNull();
    expect(capacity.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(capacity.headers.get('content-length')).toBe(String(Buffer.byteLength(JSON.stringify(capacity.body))));
    const over = await call(url, 'POST', '/search', { text: 'x' });
    expect(over.status).toBe(429);
    expect(over.headers.get('date')).not.toBeNull();
    expect(over.body).toEqual({
      code: 'TIDAL_SERVE_TENANT_RATE',
      message: 'tenant "a\\"b" is over its rate',
      reason: 'tenant',
      retryAfterMs: 11,
    });
    expect([over.headers.get('retry-after'), over.headers.get('x-retry-after-ms'), over.headers.get('x-ratelimit-state')]).toEqual([
      '1',
      '11',
      'over',
    ]);
    // Admitted answers keep their Date.
    expect((await call(url, 'GET', '/healthz')).headers.get('date')).not.toBeNull();
  });

  it('writes a refusal whose retry figure is not finite as valid JSON, the figure null', async () => {
    const never: Refusal = { ...REFUSE_ALL, retryAfterMs: Number.POSITIVE_INFINITY };
    const { url } = await serve({ db: fakeDb({}), admission: { admit: () => never, stats: () => [] } });
    const res = await fetch(`${url}/retrieve`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(JSON.parse(await res.text())).toMatchObject({ code: 'TIDAL_SERVE_INFLIGHT', retryAfterMs: null });
  });

  it('answers /stats to a tenant over its quota, and without a key', async () => {
    const keys = new KeyRing({ 'k-0123456789abcdef': { tenant: 'acme', tier: 'free' } });
    const auth = { authorization: 'Bearer k-0123456789abcdef' };
    const admission = {
      inFlightCap: 0,
      adaptive: false,
      tenants: { tiers: { free: { ratePerSecond: 1, burst: 1 } }, maxTenants: 10 },
      permits: {},
      period: false,
    } as const;
    const { url, server } = await serve({ db: fakeDb({ openSessions: () => [] }), admission, keys, clock: () => NOW });
    expect((await call(url, 'GET', '/sessions', undefined, auth)).status).toBe(200);
    const over = await call(url, 'GET', '/sessions', undefined, auth);
    expect(over.status).toBe(429);
    expect(over.body.code).toBe('TIDAL_SERVE_TENANT_RATE');
    const stats = await call(url, 'GET', '/stats', undefined, auth);
    expect(stats.status).toBe(200);
    expect(stats.body.chain).toEqual([expect.objectContaining({ name: 'tenant', admitted: 1, rejected: 1 })]);
    expect((await call(url, 'GET', '/stats')).status).toBe(200);
    // Neither /stats call reached the chain: it still counts the two /sessions requests alone.
    expect(server.chain!.stats()[0]).toMatchObject({ admitted: 1, rejected: 1 });
  });

  it('refuses before the body is read: a refused request never reaches a route', async () => {
    let reached = false;
    const chain: AdmissionChain = { admit: () => REFUSE_ALL, stats: () => [] };
    const { url } = await serve({ db: fakeDb({ upsertItems: async () => void (reached = true) }), admission: chain, bodyLimitBytes: 10 });
    // Over the body limit: had the body been looked at, this would be a 413.
    const r = await call(url, 'POST', '/items', { id: 'a'.repeat(100) });
    expect(r.status).toBe(503);
    expect(reached).toBe(false);
  });

  it('names the route and the tenant, and releases the ticket once with ok for a client error', async () => {
    const rec = recordingChain();
    const { url } = await serve({
      db: fakeDb({ retrieve: async () => Promise.reject(new InvalidInputError('limit', 'x', 0)) }),
      admission: rec.chain,
    });
    const r = await call(url, 'POST', '/retrieve', { profile: 'popular' });
    expect(r.status).toBe(400);
    expect(r.headers.get('x-quota-state')).toBe('allowed');
    expect(rec.admitted).toEqual([{ route: 'retrieve', tenant: 'anonymous', tier: 'free' }]);
    const outcome = await rec.releasedOnce;
    expect(outcome.ok).toBe(true);
    expect(rec.released).toHaveLength(1);
  });

  it("reports a capacity failure (tidal's 503) as not ok", async () => {
    const rec = recordingChain();
    const { url } = await serve({ db: fakeDb({ search: async () => Promise.reject(new OverloadedError(1, 1, 5)) }), admission: rec.chain });
    await call(url, 'POST', '/search', { text: 'x' });
    expect((await rec.releasedOnce).ok).toBe(false);
  });

  it('counts refusals by reason in /metrics and in the recorder', async () => {
    let now = 5_000;
    const chain: AdmissionChain = {
      admit: () => REFUSE_ALL,
      stats: () => [{ name: 'inflight', limit: 3, inFlight: 0, admitted: 0, rejected: 2 }],
    };
    const { url, server } = await serve({ db: fakeDb({}), admission: chain, clock: () => now });
    await call(url, 'POST', '/retrieve', {});
    await call(url, 'POST', '/retrieve', {});
    now += 1000;
    expect(server.recorder.sample().refusedPerSec).toEqual({ inflight: 2 });
    const metrics = (await call(url, 'GET', '/metrics')).text;
    expect(metrics).toMatch(/tidal_serve_refused_total\{reason="inflight"\} 2/);
    expect(metrics).toMatch(/tidal_serve_stage_limit\{stage="inflight"\} 3/);
    expect(metrics).toMatch(/tidal_serve_stage_rejected_total\{stage="inflight"\} 2/);
  });
});

describe('deadlines and disconnects', () => {
  it("passes x-tidal-timeout-ms as the query's timeoutMs, else the default, and refuses a bad header", async () => {
    const seen: (number | undefined)[] = [];
    const db = fakeDb({
      retrieve: async (req: RetrieveRequest) => {
        seen.push(req.timeoutMs);
        return { items: [], degradationLevel: 0, warnings: [] } as unknown as RetrieveResults;
      },
    });
    const { url } = await serve({ db, timeoutMs: 750 });
    await call(url, 'POST', '/retrieve', { profile: 'popular' }, { 'x-tidal-timeout-ms': '40' });
    await call(url, 'POST', '/retrieve', { profile: 'popular' });
    const bad = await call(url, 'POST', '/retrieve', { profile: 'popular' }, { 'x-tidal-timeout-ms': '1.5' });
    expect(seen).toEqual([40, 750]);
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'x-tidal-timeout-ms', value: '1.5' });
  });

  it('a client that disconnects mid-query aborts it (AbortError) and its ticket is released', async () => {
    const started = deferred();
    const ended = deferred<unknown>();
    const db = fakeDb({
      retrieve: (req: RetrieveRequest) =>
        new Promise((_resolve, reject) => {
          started.resolve();
          req.signal!.addEventListener('abort', () => {
            const err = new AbortedError('retrieve', req.signal!.reason);
            ended.resolve(err);
            reject(err);
          });
        }),
    });
    const rec = recordingChain();
    const { url, server } = await serve({ db, admission: rec.chain });
    const { port } = new URL(url);
    const body = JSON.stringify({ profile: 'popular' });
    const req = httpRequest({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path: '/retrieve',
      headers: { 'content-type': 'application/json', 'content-length': body.length },
    });
    req.on('error', () => {});
    req.end(body);
    await started.promise;
    expect(server.inFlight).toBe(1);
    req.destroy();
    const err = await ended.promise;
    expect(AbortedError.is(err) && err.name === 'AbortError').toBe(true);
    const outcome = await rec.releasedOnce;
    expect(outcome.ok).toBe(true); // a client going away says nothing about capacity
    expect(rec.released).toHaveLength(1);
    expect(server.inFlight).toBe(0);
  });

  it('hands every request of a keep-alive connection the same signal, aborted only when the connection closes', async () => {
    const signals: AbortSignal[] = [];
    const db = fakeDb({
      retrieve: async (req: RetrieveRequest) => {
        signals.push(req.signal!);
        return { items: [], degradationLevel: 0, warnings: [], explain: {} } as unknown as RetrieveResults;
      },
    });
    const { url } = await serve({ db });
    const { port } = new URL(url);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    onTestFinished(() => agent.destroy());
    const post = () =>
      new Promise<number>((resolve, reject) => {
        const body = JSON.stringify({ profile: 'popular' });
        const req = httpRequest(
          { host: '127.0.0.1', port, agent, method: 'POST', path: '/retrieve', headers: { 'content-length': body.length } },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode!));
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    for (let i = 0; i < 3; i++) expect(await post()).toBe(200);
    expect(signals).toHaveLength(3);
    expect(new Set(signals).size).toBe(1);
    expect(signals[0]!.aborted).toBe(false);
    const aborted = new Promise<void>((resolve) => signals[0]!.addEventListener('abort', () => resolve()));
    agent.destroy();
    await aborted;
    expect(await call(url, 'POST', '/retrieve', { profile: 'popular' })).toMatchObject({ status: 200 });
    expect(signals[3]).not.toBe(signals[0]);
    expect(signals[3]!.aborted).toBe(false);
  });
});

describe('keys and limits', () => {
  const KEY = 'k-0123456789abcdef';
  it('401s a missing or unknown key, admits a good one as its tenant, and lets probes through without one', async () => {
    const rec = recordingChain();
    const keys = new KeyRing({ [KEY]: { tenant: 'acme', tier: 'pro' } });
    const db = fakeDb({ openSessions: () => [] });
    const { url } = await serve({ db, admission: rec.chain, keys });
    const none = await call(url, 'GET', '/sessions');
    expect(none.status).toBe(401);
    expect(none.body.code).toBe('TIDAL_SERVE_UNAUTHORIZED');
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    expect((await call(url, 'GET', '/sessions', undefined, { authorization: 'Bearer k-not-a-real-key-000' })).status).toBe(401);
    const ok = await call(url, 'GET', '/sessions', undefined, { authorization: `Bearer ${KEY}` });
    expect(ok.status).toBe(200);
    expect(rec.admitted).toEqual([{ route: 'sessions', tenant: 'acme', tier: 'pro' }]);
    expect((await call(url, 'GET', '/healthz')).status).toBe(200);
  });

  it('refuses a short key, an unknown tier and an empty key set', () => {
    expect(() => new KeyRing({ short: { tenant: 'a', tier: 'pro' } })).toThrow(/at least 16/);
    expect(() => new KeyRing({ [KEY]: { tenant: 'a', tier: 'gold' } })).toThrow(/tier must be one of free, pro/);
    expect(() => new KeyRing({})).toThrow(/at least one key/);
  });

  it('413s a body over the limit with a code, and serves one under it', async () => {
    const db = fakeDb({ upsertItems: async () => {} });
    const { url } = await serve({ db, bodyLimitBytes: 64 });
    const big = await call(url, 'POST', '/items', { id: 'a', text: 'x'.repeat(100) });
    expect(big.status).toBe(413);
    expect(big.body).toEqual({
      code: 'TIDAL_SERVE_BODY_TOO_LARGE',
      message: 'the request body is over the limit of 64 bytes',
      limitBytes: 64,
    });
    expect((await call(url, 'POST', '/items', { id: 'a' })).status).toBe(200);
  });

  it('refuses an option out of range', () => {
    expect(() => createServer({ db: fakeDb({}), bodyLimitBytes: 0 })).toThrow(/options.bodyLimitBytes must be a whole number/);
  });

  // `ss` (iproute2) reads the listening socket's accept-queue limit; Linux only.
  const hasSs = existsSync('/usr/bin/ss') || existsSync('/bin/ss') || existsSync('/usr/sbin/ss') || existsSync('/sbin/ss');
  it.skipIf(!hasSs)(
    "listens with the backlog asked for, 4 096 by default (the kernel shows it as the listening socket's Send-Q)",
    async () => {
      // `ss -ltn` reports a listening socket's accept-queue limit in its Send-Q column.
      const sendQ = (url: string): number => {
        const port = new URL(url).port;
        const line = execFileSync('ss', ['-Hltn', `sport = :${port}`], { encoding: 'utf8' }).trim();
        return Number(line.split(/\s+/)[2]);
      };
      const somaxconn = Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));
      for (const [asked, expected] of [
        [undefined, Math.min(4096, somaxconn)],
        [64, 64],
      ] as const) {
        const server = createServer({ db: fakeDb({}) });
        onTestFinished(() => server.close({ drainMs: 0 }));
        const url = await server.listen(0, '127.0.0.1', asked);
        expect(sendQ(url), String(asked)).toBe(expected);
      }
      await expect(createServer({ db: fakeDb({}) }).listen(0, '127.0.0.1', 0)).rejects.toThrow(/options.backlog must be a whole number/);
    },
  );
});

describe('draining', () => {
  it('turns /readyz to 503 and refuses new work while an in-flight request finishes', async () => {
    const started = deferred();
    const finish = deferred<RetrieveResults>();
    const db = fakeDb({
      retrieve: () => {
        started.resolve();
        return finish.promise;
      },
    });
    const server = createServer({ db });
    const url = await server.listen(0, '127.0.0.1');
    const inFlight = call(url, 'POST', '/retrieve', { profile: 'popular' });
    await started.promise;
    expect((await call(url, 'GET', '/readyz')).status).toBe(200);
    const closing = server.close({ drainMs: 60_000 });
    expect(server.ready).toBe(false);
    finish.resolve({ items: [], degradationLevel: 0, warnings: [] } as unknown as RetrieveResults);
    const answered = await inFlight;
    expect(answered.status).toBe(200);
    await closing;
    expect(server.inFlight).toBe(0);
  });

  it('/readyz is 503 once the database is closed', async () => {
    const { url } = await serve({ db: { ...fakeDb({}), closed: true } });
    const r = await call(url, 'GET', '/readyz');
    expect(r.status).toBe(503);
    expect(r.body.code).toBe('TIDAL_SERVE_DRAINING');
    expect((await call(url, 'GET', '/healthz')).status).toBe(200);
  });
});

describe('user routes against a real database', () => {
  let db: TidalDb;
  let server: TidalServer;
  let url: string;

  beforeAll(async () => {
    db = await TidalDb.builder()
      .ephemeral()
      .schema({ ...SCHEMA, metadata: { category: 'string', creator: 'string' }, creatorField: 'creator' })
      .workers(1)
      .clock(() => NOW)
      .open();
    server = await startServer({ db, port: 0, host: '127.0.0.1', registry: new Registry() });
    url = server.url!;
    await db.upsertItems(
      ['a', 'b', 'c', 'd'].map((id, i) => ({
        id,
        text: `item ${id}`,
        metadata: { category: 'jazz', creator: `c${i % 2}` },
        createdAt: NOW - i,
      })),
    );
  });
  afterAll(async () => {
    await server.close({ drainMs: 0 });
    await db.close();
  });

  const newest = async (user: string): Promise<string[]> => {
    const r = await call(url, 'POST', '/retrieve', { profile: 'new', user, limit: 10 });
    expect(r.status).toBe(200);
    return (r.body.items as { id: string }[]).map((i) => i.id);
  };

  it('upserts, reads and deletes a user; hides, blocks and follows change what the next query returns', async () => {
    expect((await call(url, 'POST', '/users', { id: 'u1', embedding: [1, 0, 0] })).body).toEqual({ upserted: 1 });
    expect((await call(url, 'POST', '/users', [{ id: 'u2' }, { id: 'u3' }])).body).toEqual({ upserted: 2 });
    expect((await call(url, 'PUT', '/users/u4', { metadata: { plan: 'free' } })).body).toEqual({ upserted: 1 });
    const got = await call(url, 'GET', '/users/u1');
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ id: 'u1', embedding: [1, 0, 0], preference: [1, 0, 0], hidden: [], blocked: [], following: [] });
    expect(await newest('u1')).toEqual(['a', 'b', 'c', 'd']);

    expect((await call(url, 'POST', '/users/u1/hide', { item: 'a' })).body).toEqual({ user: 'u1', item: 'a', hidden: true });
    expect(await newest('u1')).toEqual(['b', 'c', 'd']);
    expect((await call(url, 'POST', '/users/u1/block', { creator: 'c1' })).body).toEqual({ user: 'u1', creator: 'c1', blocked: true });
    expect(await newest('u1')).toEqual(['c']);
    await call(url, 'POST', '/users/u1/unhide', { item: 'a' });
    await call(url, 'POST', '/users/u1/unblock', { creator: 'c1' });
    expect(await newest('u1')).toEqual(['a', 'b', 'c', 'd']);
    expect((await call(url, 'POST', '/users/u1/follow', { creator: 'c0' })).body).toEqual({ user: 'u1', creator: 'c0', followed: true });
    const following = await call(url, 'POST', '/retrieve', { profile: 'following', user: 'u1', limit: 10 });
    expect((following.body.items as { id: string }[]).map((i) => i.id).sort()).toEqual(['a', 'c']);
    expect((await call(url, 'POST', '/users/u1/unfollow', { creator: 'c0' })).body).toMatchObject({ unfollowed: true });
    expect((await call(url, 'GET', '/users/u1')).body).toMatchObject({ hidden: [], blocked: [], following: [] });

    expect((await call(url, 'DELETE', '/users/u2')).body).toEqual({ deleted: 'u2' });
    const gone = await call(url, 'GET', '/users/u2');
    expect(gone.status).toBe(404);
    expect(gone.body).toMatchObject({ code: 'TIDAL_SERVE_NOT_FOUND', id: 'u2' });
  });

  it('refuses bad user calls with the database error as JSON, naming the field', async () => {
    const unknown = await call(url, 'POST', '/users/nobody/hide', { item: 'a' });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'user' });
    const extra = await call(url, 'POST', '/users/u1/hide', { item: 'a', creator: 'c0' });
    expect(extra.status).toBe(400);
    expect(extra.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'creator' });
    const noCreator = await call(url, 'POST', '/users/u1/block', {});
    expect(noCreator.status).toBe(400);
    expect(noCreator.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'creator' });
    const mismatch = await call(url, 'PUT', '/users/u1', { id: 'u9' });
    expect(mismatch.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'id' });
    const notObject = await call(url, 'POST', '/users/u1/follow', '[1]');
    expect(notObject.body).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'body' });
  });
});
