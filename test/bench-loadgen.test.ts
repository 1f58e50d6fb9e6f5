/**
 * The load generator against a tiny node:http server in this process, on an ephemeral loopback
 * port. Assertions are about counts and the order of events (what the server saw, when requests
 * were scheduled and sent), never about how fast this machine is.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import type { AddressInfo, Server as NetServer, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { checkRequests, parseLoadgenArgs, runLoad } from '../bench/src/serve/loadgen.js';
import type { LoadgenConfig, RequestSpec } from '../bench/src/serve/loadgen.js';
import { IDLE_MS, RawClient, serializeRequest } from '../bench/src/serve/raw-client.js';
import { judgePhase } from '../bench/src/serve/validity.js';
import { summarize } from '../bench/src/harness/index.js';
import { parseObject } from './helpers.js';

const servers: Server[] = [];
const netServers: { server: NetServer; sockets: Set<Socket> }[] = [];
afterEach(async () => {
  await Promise.all(
    servers.splice(0).map(
      (s) =>
        new Promise<void>((resolve) => {
          s.closeAllConnections();
          s.close(() => resolve());
        }),
    ),
  );
  await Promise.all(
    netServers.splice(0).map(
      ({ server, sockets }) =>
        new Promise<void>((resolve) => {
          for (const socket of sockets) socket.destroy();
          server.close(() => resolve());
        }),
    ),
  );
});

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** With `Content-Length`, as tidal-serve answers (the raw client refuses a body without one). */
function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

const baseConfig = (url: string, patch: Partial<LoadgenConfig>): LoadgenConfig => ({
  url,
  client: 'raw',
  mode: { kind: 'open', ratePerSecond: 200 },
  durationMs: 300,
  connections: 16,
  timeoutMs: 5_000,
  graceMs: 5_000,
  seed: 7,
  maxOutstanding: 100_000,
  countHeader: null,
  ...patch,
});

/**
 * A server that writes raw bytes: `answer` gets each request's head (GET requests, no body) and
 * the socket, in order; `connections()` counts the TCP connections it accepted.
 */
async function serveRaw(answer: (socket: Socket, head: string) => void): Promise<{ url: string; connections: () => number }> {
  let accepted = 0;
  const sockets = new Set<Socket>();
  const server = createNetServer((socket) => {
    accepted++;
    sockets.add(socket);
    socket.setNoDelay(true);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    let buffered = '';
    socket.setEncoding('latin1').on('data', (chunk: string) => {
      buffered += chunk;
      let end: number;
      while ((end = buffered.indexOf('\r\n\r\n')) >= 0) {
        const head = buffered.slice(0, end);
        buffered = buffered.slice(end + 4);
        answer(socket, head);
      }
    });
  });
  netServers.push({ server, sockets });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, connections: () => accepted };
}

const MIX: RequestSpec[] = [
  { path: '/ok' },
  { method: 'POST', path: '/busy', body: { q: 1 } },
  { path: '/quota', headers: { authorization: 'Bearer k' } },
  { path: '/missing' },
];

/** Answers by path and counts what it answered. */
function mixServer(seen: Record<string, number>) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const key = `${req.method} ${req.url}`;
      seen[key] = (seen[key] ?? 0) + 1;
      if (req.url === '/ok') json(res, 200, { ok: true }, { 'x-level': 'Full' });
      else if (req.url === '/busy')
        json(res, 503, { code: parseObject(body).q === 1 ? 'TIDAL_SERVE_INFLIGHT' : 'WRONG_BODY', message: 'busy' });
      else if (req.url === '/quota')
        json(res, 429, { code: req.headers.authorization === 'Bearer k' ? 'TIDAL_SERVE_PERIOD_QUOTA' : 'NO_HEADER', message: 'quota' });
      else {
        res.writeHead(404, { 'content-length': '8' });
        res.end('not here');
      }
    });
  };
}

describe.each(['raw', 'undici'] as const)('load generator (%s client)', (client) => {
  const config = (url: string, patch: Partial<LoadgenConfig>): LoadgenConfig => baseConfig(url, { client, ...patch });

  it('counts responses by status, refusals by body code, and agrees with what the server answered', async () => {
    const seen: Record<string, number> = {};
    const url = await serve(mixServer(seen));
    const r = await runLoad(config(url, { durationMs: 400, countHeader: 'x-level' }), MIX);
    const n = (k: string) => seen[k] ?? 0;
    expect(r.offered).toBeGreaterThan(20);
    expect(r.errors).toEqual({});
    expect(r.abandoned + r.generatorDropped).toBe(0);
    expect(r.completed).toBe(r.offered);
    expect(r.statuses).toEqual({
      ...(n('GET /ok') ? { 200: n('GET /ok') } : {}),
      ...(n('POST /busy') ? { 503: n('POST /busy') } : {}),
      ...(n('GET /quota') ? { 429: n('GET /quota') } : {}),
      ...(n('GET /missing') ? { 404: n('GET /missing') } : {}),
    });
    // Bodies and headers went as the mix said (the server's codes would say WRONG_BODY / NO_HEADER).
    expect(r.refusalsByCode).toEqual({
      ...(n('POST /busy') ? { TIDAL_SERVE_INFLIGHT: n('POST /busy') } : {}),
      ...(n('GET /quota') ? { TIDAL_SERVE_PERIOD_QUOTA: n('GET /quota') } : {}),
    });
    expect(r.failuresByCode).toEqual(n('GET /missing') ? { '(none)': n('GET /missing') } : {});
    expect(r.latency.ok.n).toBe(n('GET /ok'));
    expect(r.latency.refused.n).toBe(n('POST /busy') + n('GET /quota'));
    expect(r.headerCounts).toEqual({ Full: n('GET /ok') });
    // Uniform pick over four: every kind showed up.
    expect(Object.keys(seen)).toHaveLength(4);
    expect(JSON.parse(JSON.stringify(r))).toMatchObject({ mode: 'open', targetRatePerSec: 200 });
  });

  it('keeps an open-loop schedule the server cannot move: the same seed offers the same arrivals to a slow and a fast server', async () => {
    const fast = await serve((_req, res) => json(res, 200, {}));
    const slow = await serve((_req, res) => setTimeout(() => json(res, 200, {}), 50));
    const a = await runLoad(config(fast, {}), [{ path: '/' }], { trace: true });
    const b = await runLoad(config(slow, {}), [{ path: '/' }], { trace: true });
    expect(a.offered).toBe(b.offered);
    expect(a.trace!.map((t) => t.scheduledMs)).toEqual(b.trace!.map((t) => t.scheduledMs));
    // Scheduled times are increasing and inside the duration; another seed gives another schedule.
    const times = a.trace!.map((t) => t.scheduledMs);
    expect([...times].sort((x, y) => x - y)).toEqual(times);
    expect(times[times.length - 1]!).toBeLessThan(300);
    const c = await runLoad(config(fast, { seed: 8 }), [{ path: '/' }], { trace: true });
    expect(c.trace!.map((t) => t.scheduledMs)).not.toEqual(times);
  });

  it('measures latency from the scheduled time: requests due while the process was stalled carry the stall', async () => {
    let stall: { start: number; end: number } | null = null;
    let count = 0;
    const url = await serve((_req, res) => {
      if (++count === 5) {
        // Blocks this whole process, the generator's timers included, for 200 ms.
        const start = performance.now();
        while (performance.now() - start < 200) {
          // spin
        }
        stall = { start, end: performance.now() };
      }
      json(res, 200, {});
    });
    const r = await runLoad(config(url, { mode: { kind: 'open', ratePerSecond: 400 }, durationMs: 1_000 }), [{ path: '/' }], {
      trace: true,
    });
    expect(stall).not.toBeNull();
    const { start, end } = stall!;
    const origin = r.originMs!;
    // Requests whose scheduled time fell inside the stall could only be sent after it.
    const dueDuringStall = r.trace!.filter((t) => origin + t.scheduledMs > start && origin + t.scheduledMs < end);
    expect(dueDuringStall.length).toBeGreaterThan(0);
    for (const t of dueDuringStall) {
      expect(origin + t.sentMs).toBeGreaterThanOrEqual(end);
      // Their latency includes the wait for the stall to end: more than the time on the wire.
      expect(t.latencyMs).toBeGreaterThanOrEqual(end - (origin + t.scheduledMs));
      expect(t.latencyMs).toBeGreaterThan(t.endMs - t.sentMs);
    }
    // The generator knows it fell behind: every send more than lateMs after its schedule is
    // counted late (those due early in the stall at least), and the lateness p99 is a lateness a
    // send had.
    const lateMs = r.sendLateness!.lateMs;
    const behind = r.trace!.map((t) => t.sentMs - t.scheduledMs);
    expect(r.sendLateness!.sends).toBe(r.offered);
    expect(r.sendLateness!.late).toBe(behind.filter((b) => b > lateMs).length);
    expect(r.sendLateness!.late).toBeGreaterThanOrEqual(dueDuringStall.filter((t) => end - (origin + t.scheduledMs) > lateMs).length);
    expect(r.sendLateness!.late).toBeGreaterThan(0);
    expect(behind).toContain(r.sendLateness!.p99);
    expect(r.sendLateness!.max).toBe(Math.max(...behind));
    // Requests are counted, not lost, across the stall.
    expect(r.completed).toBe(r.offered);
    expect(r.latency.ok.max).toBeGreaterThanOrEqual(Math.max(...dueDuringStall.map((t) => end - (origin + t.scheduledMs))));
  });

  it('runs a closed loop of N: never more than N in flight at the server', async () => {
    let inFlight = 0;
    let peak = 0;
    let served = 0;
    const url = await serve((_req, res) => {
      inFlight++;
      peak = Math.max(peak, inFlight);
      setTimeout(() => {
        inFlight--;
        served++;
        json(res, 200, {});
      }, 5);
    });
    const r = await runLoad(config(url, { mode: { kind: 'closed', concurrency: 4, requests: 40 }, connections: 4, durationMs: 60_000 }), [
      { path: '/' },
    ]);
    expect(peak).toBeLessThanOrEqual(4);
    expect(peak).toBeGreaterThan(1);
    expect(r.completed).toBe(served);
    expect(r.offered).toBe(served);
    expect(served, 'the callers stop after `requests` sends').toBe(40);
    expect(r).toMatchObject({ mode: 'closed', concurrency: 4, errors: {}, abandoned: 0 });
    // A closed loop schedules each request when it sends it: no lateness to speak of.
    expect(r.sendLateness).toBeNull();
  });

  it('is bounded in time: a server that never answers is abandoned after the grace period', async () => {
    let arrived = 0;
    const url = await serve(() => {
      arrived++; // never answers
    });
    const r = await runLoad(config(url, { mode: { kind: 'open', ratePerSecond: 100 }, durationMs: 100, graceMs: 100 }), [{ path: '/' }]);
    expect(r.completed).toBe(0);
    expect(r.abandoned).toBe(r.offered);
    expect(arrived).toBeLessThanOrEqual(r.offered);
  });

  it('counts connection errors by code', async () => {
    const url = await serve(() => undefined);
    servers.pop()!.close(); // nothing listens on that port any more
    const r = await runLoad(config(url, { durationMs: 100 }), [{ path: '/' }]);
    expect(r.completed).toBe(0);
    expect(r.errors).toEqual({ ECONNREFUSED: r.offered });
  });

  it('validates its flags and refuses non-loopback URLs', () => {
    const ok = ['--url', 'http://127.0.0.1:7070', '--requests', 'mix.json', '--duration-ms', '1000'];
    expect(parseLoadgenArgs([...ok, '--rate', '250.5'])!.config).toMatchObject({
      mode: { kind: 'open', ratePerSecond: 250.5 },
      connections: 512,
      durationMs: 1000,
    });
    expect(parseLoadgenArgs([...ok, '--closed=8'])!.config).toMatchObject({ mode: { kind: 'closed', concurrency: 8 }, connections: 8 });
    expect(parseLoadgenArgs(['--help'])).toBeNull();
    expect(parseLoadgenArgs([...ok, '--rate', '1'])!.config.lateMs).toBe(5);
    expect(parseLoadgenArgs([...ok, '--rate', '1', '--late-ms', '2.5'])!.config.lateMs).toBe(2.5);
    const bad: Array<[string[], RegExp]> = [
      [[...ok], /--rate\/--closed must be exactly one/],
      [[...ok, '--rate', '10', '--closed', '2'], /exactly one/],
      [[...ok, '--rate', '0'], /--rate must be a number > 0/],
      [[...ok, '--rate', 'fast'], /--rate/],
      [[...ok, '--closed', '1.5'], /--closed must be a whole number/],
      [[...ok, '--rate', '10', '--connections', '0'], /--connections/],
      [[...ok, '--rate', '10', '--duration-ms', '5'], /--duration-ms must be given once/],
      [[...ok, '--rate', '10', '--verbose', 'x'], /argument must be one of/],
      [[...ok, '--rate'], /--rate must be followed by a value/],
      [[...ok, '--rate', '10', '--late-ms', '0'], /--late-ms must be a number > 0/],
      [
        ['--url', 'http://10.1.2.3:7070', '--requests', 'm', '--duration-ms', '1', '--rate', '1'],
        /--url must be an http URL on a loopback address/,
      ],
      [['--url', 'http://example.com', '--requests', 'm', '--duration-ms', '1', '--rate', '1'], /loopback/],
      [['--url', 'https://127.0.0.1:1', '--requests', 'm', '--duration-ms', '1', '--rate', '1'], /loopback/],
      [['--url', 'not a url', '--requests', 'm', '--duration-ms', '1', '--rate', '1'], /--url must be an http URL/],
      [['--url', 'http://127.0.0.1:1', '--requests', 'm', '--duration-ms', '9999999', '--rate', '1'], /--duration-ms/],
    ];
    for (const [argv, message] of bad) {
      expect(() => parseLoadgenArgs(argv)).toThrow(InvalidInputError);
      expect(() => parseLoadgenArgs(argv)).toThrow(message);
    }
    expect(parseLoadgenArgs(['--url', 'http://[::1]:7070', '--requests', 'm', '--duration-ms', '1', '--rate', '1'])!.config.url).toBe(
      'http://[::1]:7070/',
    );
    expect(() => checkRequests([])).toThrow(/--requests must be a non-empty JSON array/);
    expect(() => checkRequests([{ path: 'x' }])).toThrow(/--requests\[0\]\.path must be a path starting with \//);
    expect(() => checkRequests([{ path: '/', method: 'get' }])).toThrow(/method/);
    expect(() => checkRequests([{ path: '/', headers: { a: 1 } }])).toThrow(/--requests\[0\]\.headers\.a must be a string/);
  });
});

describe('load generator, raw client', () => {
  const config = (url: string, patch: Partial<LoadgenConfig>): LoadgenConfig => baseConfig(url, { client: 'raw', ...patch });
  const head = (status: number, length: number | null, extra = ''): string =>
    `HTTP/1.1 ${status} X\r\n${length === null ? '' : `Content-Length: ${length}\r\n`}${extra}\r\n`;

  it('serializes each request once: request line, Host, the mix headers, Content-Type and Content-Length, body', () => {
    const bytes = serializeRequest(
      { method: 'POST', path: '/retrieve', body: '{"q":"é"}', headers: { 'content-type': 'application/json', authorization: 'Bearer k' } },
      '127.0.0.1:7070',
    );
    expect(bytes.toString('utf8')).toBe(
      'POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:7070\r\ncontent-type: application/json\r\nauthorization: Bearer k\r\nContent-Length: 10\r\n\r\n{"q":"é"}',
    );
    expect(serializeRequest({ method: 'GET', path: '/x', body: undefined, headers: {} }, 'h').toString()).toBe(
      'GET /x HTTP/1.1\r\nHost: h\r\n\r\n',
    );
    expect(() => serializeRequest({ method: 'GET', path: '/', body: undefined, headers: { 'Content-Length': '3' } }, 'h')).toThrow(
      InvalidInputError,
    );
    expect(() => serializeRequest({ method: 'GET', path: '/', body: undefined, headers: { a: 'x\r\nInjected: 1' } }, 'h')).toThrow(
      /requests\.headers\.a must be a value without CR, LF or NUL/,
    );
    const ok = ['--url', 'http://127.0.0.1:7070', '--requests', 'm', '--duration-ms', '1', '--rate', '1'];
    expect(parseLoadgenArgs([...ok, '--client', 'undici'])!.config.client).toBe('undici');
    expect(parseLoadgenArgs(ok)!.config.client).toBe('raw');
    expect(() => parseLoadgenArgs([...ok, '--client', 'curl'])).toThrow(/--client must be raw or undici/);
  });

  it('opens connections lazily up to --connections and reuses them (keep-alive)', async () => {
    let accepted = 0;
    const url = await serve((_req, res) => setTimeout(() => json(res, 200, {}), 2));
    servers[servers.length - 1]!.on('connection', () => accepted++);
    const r = await runLoad(config(url, { mode: { kind: 'closed', concurrency: 3, requests: 30 }, connections: 8, durationMs: 60_000 }), [
      { path: '/' },
    ]);
    expect(r.errors).toEqual({});
    // Three loops never need more than three connections, however many are allowed, and more
    // requests than connections means they were reused (a count, however fast the machine is).
    expect(accepted).toBe(3);
    expect(r.completed).toBeGreaterThan(accepted);
  });

  it('with preconnect, opens that many connections before the first request, and uses them', async () => {
    let accepted = 0;
    const url = await serve((_req, res) => setTimeout(() => json(res, 200, {}), 2));
    servers[servers.length - 1]!.on('connection', () => accepted++);
    const r = await runLoad(config(url, { mode: { kind: 'closed', concurrency: 3 }, connections: 300, preconnect: 300, durationMs: 100 }), [
      { path: '/' },
    ]);
    expect(r.errors).toEqual({});
    expect(r.preconnected).toBe(300);
    // Two waves of connects (256, then 44), where three loops alone open three connections.
    expect(accepted).toBe(300);
    const ok = ['--url', 'http://127.0.0.1:7070', '--requests', 'm', '--duration-ms', '1', '--rate', '1', '--connections', '8'];
    expect(parseLoadgenArgs([...ok, '--preconnect', '8'])!.config.preconnect).toBe(8);
    expect(() => parseLoadgenArgs([...ok, '--preconnect', '9'])).toThrow(/--preconnect must be a whole number from 0 to 8/);
    expect(() => parseLoadgenArgs([...ok, '--preconnect', '2', '--client', 'undici'])).toThrow(
      /--preconnect must be given with --client raw/,
    );
  });

  it('reads a response that arrives in pieces (head split inside its blank line, body in several chunks), then the next on the same connection', async () => {
    const body = JSON.stringify({ code: 'TIDAL_SERVE_ADAPTIVE', message: 'x'.repeat(200) });
    const whole = head(503, Buffer.byteLength(body), 'Content-Type: application/json\r\n') + body;
    const cut = whole.indexOf('\r\n\r\n') + 3;
    const pieces = [
      whole.slice(0, 10),
      whole.slice(10, cut),
      whole.slice(cut, cut + 20),
      whole.slice(cut + 20, cut + 120),
      whole.slice(cut + 120),
    ];
    let lastPieceAt = 0;
    const { url, connections } = await serveRaw((socket) => {
      let i = 0;
      const next = (): void => {
        socket.write(pieces[i++]!);
        if (i < pieces.length) setTimeout(next, 5);
        else lastPieceAt = performance.now();
      };
      next();
    });
    const r = await runLoad(
      config(url, { mode: { kind: 'closed', concurrency: 1, requests: 3 }, connections: 1, durationMs: 60_000 }),
      [{ path: '/' }],
      {
        trace: true,
      },
    );
    expect(r.errors).toEqual({});
    expect(r.completed).toBeGreaterThan(1);
    expect(r.refusalsByCode).toEqual({ TIDAL_SERVE_ADAPTIVE: r.completed });
    expect(connections()).toBe(1);
    // A response ends with its last byte, not with its head.
    const last = r.trace![r.trace!.length - 1]!;
    expect(r.originMs! + last.endMs).toBeGreaterThanOrEqual(lastPieceAt);
  });

  it('counts the count header on 2xx only, case-insensitively', async () => {
    let n = 0;
    const { url } = await serveRaw((socket) => {
      n++;
      if (n % 3 === 0) socket.write(head(200, 2) + '{}');
      else if (n % 3 === 1) socket.write(head(200, 2, 'X-Tidal-Degradation-Level: NoDiversity\r\n') + '{}');
      else socket.write(head(503, 2, 'X-Tidal-Degradation-Level: Full\r\n') + '{}');
    });
    const r = await runLoad(
      config(url, {
        mode: { kind: 'closed', concurrency: 1, requests: 9 },
        connections: 1,
        durationMs: 60_000,
        countHeader: 'x-tidal-degradation-level',
      }),
      [{ path: '/' }],
    );
    expect(r.completed).toBe(n);
    expect(r.headerCounts).toEqual({ NoDiversity: Math.ceil(n / 3), ...(Math.floor(n / 3) > 0 ? { '(none)': Math.floor(n / 3) } : {}) });
    expect(r.refusalsByCode).toEqual({ '(none)': Math.floor((n + 1) / 3) });
  });

  it('closes a free connection idle for IDLE_MS or longer instead of reusing it, and reuses one idle less', async () => {
    // A server closes an idle keep-alive connection after its timeout (node:http: 5 s): a client
    // that reuses it as the FIN arrives gets ECONNRESET, so it retires it first, as undici does.
    let accepted = 0;
    const url = await serve((_req, res) => json(res, 200, {}));
    servers[servers.length - 1]!.on('connection', () => accepted++);
    let clock = 0;
    const origin = new URL(url);
    const client = new RawClient({ origin, connections: 4, timeoutMs: 10_000, countHeader: null, now: () => clock });
    const bytes = serializeRequest({ method: 'GET', path: '/', body: undefined, headers: {} }, origin.host);
    try {
      expect((await client.send(bytes, 'GET')).status).toBe(200);
      clock += IDLE_MS - 1;
      expect((await client.send(bytes, 'GET')).status).toBe(200);
      expect([accepted, client.retired]).toEqual([1, 0]);
      clock += IDLE_MS;
      expect((await client.send(bytes, 'GET')).status).toBe(200);
      expect([accepted, client.retired, client.open]).toEqual([2, 1, 1]);
    } finally {
      client.destroy();
    }
  });

  it('closes a connection the server answers with Connection: close, and opens a new one for the next request', async () => {
    let accepted = 0;
    let served = 0;
    const url = await serve((_req, res) => {
      served++;
      json(res, 200, {}, { connection: 'close' });
    });
    servers[servers.length - 1]!.on('connection', () => accepted++);
    const r = await runLoad(config(url, { mode: { kind: 'closed', concurrency: 2 }, connections: 2, durationMs: 150 }), [{ path: '/' }]);
    expect(r.errors).toEqual({});
    expect(r.completed).toBe(served);
    expect(r.statuses).toEqual({ 200: served });
    expect(accepted).toBe(served);
  });

  it('counts a connection the server destroys mid-response as an error of that request, and the run still ends', async () => {
    let n = 0;
    const { url } = await serveRaw((socket) => {
      if (++n % 2 === 0) {
        socket.write(head(200, 100) + '{"partial":');
        setTimeout(() => socket.destroy(), 2);
      } else {
        socket.write(head(200, 2) + '{}');
      }
    });
    const r = await runLoad(config(url, { mode: { kind: 'closed', concurrency: 2 }, connections: 2, durationMs: 150 }), [{ path: '/' }]);
    expect(r.abandoned).toBe(0);
    expect(r.offered).toBe(n);
    expect(r.statuses).toEqual({ 200: Math.ceil(n / 2) });
    expect(r.errors).toEqual({ ECONNRESET: Math.floor(n / 2) });
  });

  it('times a request out (LOADGEN_TIMEOUT) when nothing moves on its connection for --timeout-ms, and drops that connection', async () => {
    let n = 0;
    const { url, connections } = await serveRaw((socket) => {
      // The second request on each connection gets a head promising a body that never comes.
      if (++n % 2 === 0) socket.write(head(200, 10) + '{');
      else socket.write(head(200, 2) + '{}');
    });
    const r = await runLoad(config(url, { mode: { kind: 'closed', concurrency: 1 }, connections: 1, timeoutMs: 200, durationMs: 400 }), [
      { path: '/' },
    ]);
    expect(r.abandoned).toBe(0);
    expect(r.offered).toBe(n);
    expect(r.errors).toEqual({ LOADGEN_TIMEOUT: Math.floor(n / 2) });
    expect(r.statuses).toEqual({ 200: Math.ceil(n / 2) });
    // Every timed-out connection was replaced by a new one.
    expect(connections()).toBe(Math.ceil(n / 2));
  });

  it('refuses a chunked response, or one without Content-Length, with LOADGEN_NO_LENGTH', async () => {
    let n = 0;
    const { url } = await serveRaw((socket) => {
      const k = ++n % 3;
      if (k === 1) socket.write(head(200, null, 'Transfer-Encoding: chunked\r\n') + '2\r\n{}\r\n0\r\n\r\n');
      else if (k === 2) socket.write(head(200, null) + '{}');
      else socket.write(head(200, 2) + '{}');
    });
    const r = await runLoad(config(url, { mode: { kind: 'closed', concurrency: 1 }, connections: 1, durationMs: 150 }), [{ path: '/' }]);
    expect(r.abandoned).toBe(0);
    expect(r.errors).toEqual({ LOADGEN_NO_LENGTH: n - Math.floor(n / 3) });
    expect(r.statuses).toEqual(Math.floor(n / 3) > 0 ? { 200: Math.floor(n / 3) } : {});
  });
});

describe('load generator, a bounded pool (raw client)', () => {
  const config = (url: string, patch: Partial<LoadgenConfig>): LoadgenConfig => baseConfig(url, { client: 'raw', ...patch });

  it('never holds more than N connections open at once, and arrivals that find them all busy wait for one', async () => {
    const pool = 4;
    let open = 0;
    let peak = 0;
    let held: ServerResponse[] = [];
    let fallback: NodeJS.Timeout | undefined;
    const release = (): void => {
      clearTimeout(fallback);
      for (const res of held.splice(0)) json(res, 200, {});
    };
    // Each request is held until the pool's every connection carries one (or, for the last few of
    // the schedule, until a fallback timer): from then on every new arrival finds them all busy.
    const url = await serve((_req, res) => {
      held.push(res);
      if (held.length >= pool) release();
      else {
        clearTimeout(fallback);
        fallback = setTimeout(release, 20);
      }
    });
    servers[servers.length - 1]!.on('connection', (socket: Socket) => {
      open++;
      peak = Math.max(peak, open);
      socket.on('close', () => open--);
    });
    const r = await runLoad(
      config(url, { mode: { kind: 'open', ratePerSecond: 1_000 }, durationMs: 200, connections: pool }),
      [{ path: '/' }],
      {
        trace: true,
      },
    );
    held = [];
    expect(r.offered).toBeGreaterThan(2 * pool);
    expect(peak).toBe(pool);
    // Open loop still: every arrival sent, none lost to the pool.
    expect(r.errors).toEqual({});
    expect(r.completed).toBe(r.offered);
    expect(r.connections).toBe(pool);
    // Requests beyond the first N waited: each went out only after an earlier one was answered.
    const trace = r.trace!;
    expect(trace.every((t) => t.wroteMs !== null && t.wroteMs >= t.sentMs)).toBe(true);
    const waited = trace.filter((t) => t.wroteMs! > t.sentMs);
    expect(waited.length).toBeGreaterThan(0);
    expect(r.poolWait!.sends).toBe(r.offered);
    expect(r.poolWait!.max).toBe(Math.max(...trace.map((t) => t.wroteMs! - t.sentMs)));
  });

  it('times a refusal from the schedule and from the send; the pool wait is reported apart from the generator lateness', async () => {
    const holdMs = 30;
    const url = await serve((_req, res) => setTimeout(() => json(res, 503, { code: 'TIDAL_SERVE_INFLIGHT' }), holdMs));
    // One connection, arrivals every 5 ms on average, 30 ms per answer: a queue builds in the pool.
    const lateMs = 25;
    const r = await runLoad(
      config(url, { mode: { kind: 'open', ratePerSecond: 200 }, durationMs: 200, connections: 1, lateMs }),
      [{ path: '/' }],
      { trace: true },
    );
    const trace = r.trace!;
    expect(r.completed).toBe(r.offered);
    expect(r.refusalsByCode).toEqual({ TIDAL_SERVE_INFLIGHT: r.offered });
    const fromSchedule = trace.map((t) => t.endMs - t.scheduledMs);
    const fromSend = trace.map((t) => t.endMs - t.wroteMs!);
    expect(r.latency.refused).toEqual(summarize(fromSchedule));
    expect(r.latencyFromSend!.refused).toEqual(summarize(fromSend));
    expect(r.latencyFromSend!.ok.n).toBe(0);
    // From the send, each refusal took the server's hold (less a timer's rounding), no more than
    // that plus the wait in the pool: on one connection each request goes out only after the one
    // before it was answered.
    for (const t of fromSend) expect(t).toBeGreaterThanOrEqual(holdMs - 1);
    const byWrite = [...trace].sort((a, b) => a.wroteMs! - b.wroteMs!);
    for (let i = 1; i < byWrite.length; i++) expect(byWrite[i]!.wroteMs! - byWrite[i - 1]!.wroteMs!).toBeGreaterThanOrEqual(holdMs - 1);
    // From the schedule, the queue's wait is in it: the later arrivals waited far longer than the hold.
    expect(r.latency.refused.max).toBeGreaterThan(r.latencyFromSend!.refused.max + holdMs);
    // Lateness counts the generator's own delay (schedule to hand-over), the pool wait the rest.
    const lateness = trace.map((t) => t.sentMs - t.scheduledMs);
    const waits = trace.map((t) => t.wroteMs! - t.sentMs);
    expect(r.sendLateness!.late).toBe(lateness.filter((x) => x > lateMs).length);
    expect(r.poolWait!.over).toBe(waits.filter((x) => x > lateMs).length);
    expect(r.poolWait!.over).toBeGreaterThan(r.offered / 2);
    expect(judgePhase(r).poolWaitP99Ms).toBe(r.poolWait!.p99);
  });

  it('cuts the results into windows of the schedule (--window-ms)', async () => {
    let n = 0;
    const url = await serve((_req, res) =>
      ++n % 2 === 0 ? json(res, 429, { code: 'Q' }) : json(res, 200, {}, { 'x-level': n % 3 === 0 ? 'NoDiversity' : 'Full' }),
    );
    const r = await runLoad(config(url, { durationMs: 300, windowMs: 100, countHeader: 'x-level' }), [{ path: '/', type: 'read' }], {
      trace: true,
    });
    const windows = r.windows!;
    expect(windows.length).toBeGreaterThanOrEqual(2);
    expect(windows.length).toBeLessThanOrEqual(3);
    for (const [i, w] of windows.entries()) {
      const inWindow = r.trace!.filter((t) => Math.floor(t.scheduledMs / 100) === i);
      expect(w.startMs).toBe(i * 100);
      expect(w.sent).toBe(inWindow.length);
      expect(w.ok).toBe(inWindow.filter((t) => t.status === 200).length);
      expect(w.refused).toBe(inWindow.filter((t) => t.status === 429).length);
      expect(w.okByType).toEqual(w.ok > 0 ? { read: w.ok } : {});
    }
    expect(windows.reduce((a, w) => a + w.ok, 0)).toBe(r.statuses['200']);
    expect(windows.reduce((a, w) => a + (w.counted.NoDiversity ?? 0), 0)).toBe(r.headerCounts!.NoDiversity ?? 0);
    const ok = ['--url', 'http://127.0.0.1:7070', '--requests', 'm', '--duration-ms', '1000', '--rate', '1'];
    expect(parseLoadgenArgs([...ok, '--window-ms', '60000'])!.config.windowMs).toBe(60_000);
    expect(parseLoadgenArgs(ok)!.config.windowMs).toBeUndefined();
    expect(() => parseLoadgenArgs([...ok, '--window-ms', '0'])).toThrow(/--window-ms must be a whole number from 1/);
  });
});
