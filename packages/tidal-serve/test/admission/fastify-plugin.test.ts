/**
 * The chain as a fastify plugin, on a real fastify listening on 127.0.0.1: admitted requests get
 * the ticket's headers and give it back once; refusals are written at onRequest, before the body,
 * byte for byte as tidal serve writes them; a client that goes away still releases its ticket.
 */
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { createAdmissionChain } from '../../src/admission/chain.js';
import { tidalAdmission } from '../../src/admission/fastify-plugin.js';
import { refusalBody } from '../../src/admission/refusal.js';
import type { AdmissionChain, AdmissionOptions, Outcome, Refusal, RequestInfo, Ticket } from '../../src/admission/types.js';

const CAP_ONE: AdmissionOptions = { inFlightCap: 1, adaptive: false, tenants: false, permits: {}, period: false };

function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** A chain that records what it was asked and every release, around a real one. */
function recording(inner: AdmissionChain) {
  const asked: RequestInfo[] = [];
  const released: Outcome[] = [];
  let onRelease: (() => void) | undefined;
  const chain: AdmissionChain = {
    admit(request, nowMs) {
      asked.push(request);
      const r = inner.admit(request, nowMs);
      if (!r.admitted) return r;
      const ticket: Ticket = {
        admitted: true,
        headers: r.headers,
        release(outcome) {
          released.push(outcome);
          r.release(outcome);
          onRelease?.();
        },
      };
      return ticket;
    },
    stats: () => inner.stats(),
  };
  return { chain, asked, released, nextRelease: () => new Promise<void>((resolve) => (onRelease = resolve)) };
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

function send(url: string, path: string, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${url}${path}`,
      {
        method: body === undefined ? 'GET' : 'POST',
        agent: false,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

let app: FastifyInstance | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

async function start(build: (app: FastifyInstance) => void): Promise<string> {
  app = Fastify({ logger: false });
  build(app);
  await app.listen({ port: 0, host: '127.0.0.1' });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

describe('tidalAdmission (fastify plugin)', () => {
  it('admits, adds the ticket headers, and releases each ticket once when its response closes', async () => {
    const rec = recording(
      createAdmissionChain({ ...CAP_ONE, inFlightCap: 4, period: { quota: 10, periodMs: 60_000, align: true, key: 'tenant' } }, () => 0),
    );
    const url = await start((a) => {
      void a.register(tidalAdmission, {
        admission: rec.chain,
        tenant: (req) => ({ tenant: String(req.headers['x-tenant'] ?? 'anonymous'), tier: 'pro' }),
      });
      a.post('/retrieve', async (req) => ({ got: req.body }));
    });
    const released = rec.nextRelease();
    const r = await send(url, '/retrieve', '{"a":1}');
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body)).toEqual({ got: { a: 1 } });
    expect(r.headers['x-quota-remaining']).toBe('9');
    await released;
    expect(rec.asked).toEqual([{ route: 'retrieve', tenant: 'anonymous', tier: 'pro' }]);
    expect(rec.released).toHaveLength(1);
    expect(rec.released[0]!.ok).toBe(true);
    expect(rec.chain.stats()[0]).toMatchObject({ name: 'inflight', inFlight: 0, admitted: 1 });
  });

  it('refuses at onRequest, before the body is read, with tidal serve’s status, headers and body', async () => {
    const refusal: Refusal = {
      admitted: false,
      status: 503,
      code: 'TIDAL_SERVE_INFLIGHT',
      reason: 'inflight',
      retryAfterMs: 1234.2,
      message: 'too many "requests" in flight',
    };
    const quota: Refusal = {
      admitted: false,
      status: 429,
      code: 'TIDAL_SERVE_PERIOD_QUOTA',
      reason: 'period',
      retryAfterMs: 10,
      message: 'quota',
      headers: { 'x-quota-state': 'over-quota' },
    };
    let next: Refusal = refusal;
    let parsed = 0;
    let handled = 0;
    const url = await start((a) => {
      void a.register(tidalAdmission, { admission: { admit: () => next, stats: () => [] } });
      a.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
        parsed++;
        done(null, JSON.parse(body as string));
      });
      a.post('/signals', async () => {
        handled++;
        return { ok: true };
      });
    });
    const r = await send(url, '/signals', '{"big":"' + 'x'.repeat(100_000) + '"}');
    expect(r.status).toBe(503);
    expect(r.body).toBe(refusalBody(refusal));
    expect(JSON.parse(r.body)).toEqual({
      code: 'TIDAL_SERVE_INFLIGHT',
      message: 'too many "requests" in flight',
      reason: 'inflight',
      retryAfterMs: 1235,
    });
    expect([r.headers['retry-after'], r.headers['x-retry-after-ms'], r.headers['content-type']]).toEqual([
      '2',
      '1235',
      'application/json; charset=utf-8',
    ]);
    expect(r.headers.date).toBeUndefined();
    expect([parsed, handled]).toEqual([0, 0]);

    next = quota;
    const q = await send(url, '/signals', '{}');
    expect(q.status).toBe(429);
    expect(q.body).toBe(refusalBody(quota));
    expect([q.headers['retry-after'], q.headers['x-retry-after-ms'], q.headers['x-quota-state']]).toEqual(['1', '10', 'over-quota']);
    expect(q.headers.date).toBeDefined();
    expect([parsed, handled]).toEqual([0, 0]);
  });

  it('refuses over the cap while a request holds it, and admits again once it is answered', async () => {
    const gate = deferred();
    const entered = deferred();
    const rec = recording(createAdmissionChain(CAP_ONE, () => 0));
    const url = await start((a) => {
      void a.register(tidalAdmission, { admission: rec.chain });
      a.get('/items/slow', async () => {
        entered.resolve();
        await gate.promise;
        return { slow: true };
      });
      a.get('/items/fast', async () => ({ fast: true }));
    });
    const slow = send(url, '/items/slow');
    await entered.promise;
    const refused = await send(url, '/items/fast');
    expect(refused.status).toBe(503);
    expect(JSON.parse(refused.body)).toMatchObject({ code: 'TIDAL_SERVE_INFLIGHT', reason: 'inflight' });
    const released = rec.nextRelease();
    gate.resolve();
    expect((await slow).status).toBe(200);
    await released;
    expect((await send(url, '/items/fast')).status).toBe(200);
  });

  it('holds the queries to the rate bound in an application’s own service, writes past it', async () => {
    const gate = deferred();
    const entered = deferred();
    // No rate measured yet: the bound is its floor, one query.
    const options: AdmissionOptions = { ...CAP_ONE, inFlightCap: 4, rateBound: { targetWaitMs: 100, floor: 1 } };
    const url = await start((a) => {
      void a.register(tidalAdmission, { admission: options });
      a.post('/retrieve', async () => {
        entered.resolve();
        await gate.promise;
        return { slow: true };
      });
      a.post('/signals', async () => ({ seq: 1 }));
    });
    const slow = send(url, '/retrieve', '{}');
    await entered.promise;
    const refused = await send(url, '/retrieve', '{}');
    expect(refused.status).toBe(503);
    expect(Number(refused.headers['x-retry-after-ms'])).toBeGreaterThanOrEqual(1);
    expect(refused.headers['retry-after']).toBeDefined();
    expect(JSON.parse(refused.body)).toMatchObject({ code: 'TIDAL_SERVE_INFLIGHT', reason: 'inflight' });
    expect((await send(url, '/signals', '{}')).status).toBe(200);
    gate.resolve();
    expect((await slow).status).toBe(200);
  });

  it('releases the ticket exactly once when the client goes away before its answer', async () => {
    const gate = deferred();
    const entered = deferred();
    const rec = recording(createAdmissionChain(CAP_ONE, () => 0));
    const url = await start((a) => {
      void a.register(tidalAdmission, { admission: rec.chain });
      a.post('/search', async () => {
        entered.resolve();
        await gate.promise;
        return { late: true };
      });
    });
    const released = rec.nextRelease();
    const req = httpRequest(`${url}/search`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } });
    req.on('error', () => {});
    req.end('{}');
    await entered.promise;
    req.destroy();
    await released;
    expect(rec.released).toHaveLength(1);
    // A client that went away says nothing about capacity.
    expect(rec.released[0]!.ok).toBe(true);
    expect(rec.chain.stats()[0]).toMatchObject({ inFlight: 0 });
    // The slot is free again, and the handler finishing late releases nothing more.
    gate.resolve();
    const second = rec.nextRelease();
    expect((await send(url, '/search', '{}')).status).toBe(200);
    await second;
    expect(rec.released).toHaveLength(2);
  });

  it('refuses bad options through register', async () => {
    app = Fastify({ logger: false });
    void app.register(tidalAdmission, { admission: { ...CAP_ONE, inFlightCap: -1 } });
    await expect(app.ready()).rejects.toThrow(/options\.inFlightCap/);
  });
});
