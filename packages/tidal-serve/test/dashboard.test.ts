import { readFileSync } from 'node:fs';
import { Agent, IncomingMessage, ServerResponse, createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { Socket } from 'node:net';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import type { ServeSample } from '../src/admission/types.js';
import { createDashboard, type Dashboard } from '../src/dashboard/dashboard.js';
import type { DashboardOptions } from '../src/dashboard/options.js';

// The sampler and the heartbeat are setInterval timers: faking only those lets a test step the
// dashboard's time while the sockets stay real.
const INTERVAL = 1000;
const T0 = Date.UTC(2025, 0, 1);

let now = T0;
let ticks = 0;
const clock = () => now;
function sampleAt(): ServeSample {
  ticks++;
  return {
    t: now,
    inFlight: ticks,
    level: ticks % 2 === 0 ? 'Full' : 'ReducedCandidates',
    offeredPerSec: 10 * ticks,
    goodputPerSec: 9 * ticks,
    refusedPerSec: { inflight: ticks },
    levelsPerSec: { Full: 5 * ticks, ReducedCandidates: 2 * ticks, CoarseAggregates: ticks, NoDiversity: ticks },
    p50Ms: 1.5,
    p99Ms: 12.25,
    windowSeconds: 10,
  };
}

/** Moves the clock and the interval timers together, one interval at a time. */
function advance(intervals: number): void {
  for (let i = 0; i < intervals; i++) {
    now += INTERVAL;
    vi.advanceTimersByTime(INTERVAL);
  }
}

const open: { dashboard: Dashboard; server: Server }[] = [];

async function serve(options: Partial<DashboardOptions> = {}): Promise<{ dashboard: Dashboard; port: number; server: Server }> {
  const dashboard = createDashboard({ sample: sampleAt, clock, intervalMs: INTERVAL, ...options });
  const server = createServer((req, res) => {
    if (!dashboard.handle(req, res)) {
      res.writeHead(404, { 'x-not-dashboard': '1' });
      res.end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  open.push({ dashboard, server });
  return { dashboard, server, port: (server.address() as AddressInfo).port };
}

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

function get(port: number, path: string, init: { method?: string; headers?: Record<string, string>; agent?: Agent } = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path, method: init.method ?? 'GET', headers: init.headers, agent: init.agent },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** An event-stream reader: raw text in, frames out. */
class Stream {
  text = '';
  ended = false;
  status = 0;
  headers: IncomingHttpHeaders = {};
  readonly #waiters = new Set<() => void>();
  readonly req;

  constructor(port: number, headers: Record<string, string> = {}) {
    this.req = request(
      { host: '127.0.0.1', port, path: '/dashboard/events', headers: { accept: 'text/event-stream', ...headers } },
      (res) => {
        this.status = res.statusCode!;
        this.headers = res.headers;
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          this.text += c;
          this.#wake();
        });
        res.on('end', () => {
          this.ended = true;
          this.#wake();
        });
        res.on('error', () => {});
        this.#wake();
      },
    );
    this.req.on('error', () => {});
    this.req.end();
  }

  #wake(): void {
    for (const w of this.#waiters) w();
  }

  /** Complete frames so far (the text between blank lines). */
  frames(): string[] {
    const parts = this.text.split('\n\n');
    parts.pop();
    return parts;
  }

  samples(): ServeSample[] {
    return this.frames()
      .filter((f) => f.startsWith('id: '))
      .map((f) => JSON.parse(f.slice(f.indexOf('data: ') + 6)) as ServeSample);
  }

  async until(check: () => boolean, what: string): Promise<void> {
    const deadline = Date.now() + 5000;
    while (!check()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(this.text)}`);
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.#waiters.delete(wake);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(wake, 100);
        this.#waiters.add(wake);
      });
    }
  }

  close(): void {
    this.req.destroy();
  }
}

async function eventually(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

beforeEach(() => {
  now = T0;
  ticks = 0;
  vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
});

afterEach(async () => {
  for (const { dashboard, server } of open.splice(0)) {
    dashboard.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
  vi.useRealTimers();
});

describe('dashboard routes', () => {
  it('serves the page with a self-only CSP, and every asset the page names', async () => {
    const { port } = await serve();
    const page = await get(port, '/dashboard');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    const csp = String(page.headers['content-security-policy']);
    expect(csp).toContain("default-src 'self'");
    expect(csp).not.toMatch(/unsafe|\*|https?:/);
    const html = page.body.toString('utf8');
    // No inline script or style: everything the page runs comes from the asset routes.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/<style|\sstyle=/);
    const refs = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(refs.sort()).toEqual(
      [
        '/dashboard/assets/dashboard.css',
        '/dashboard/assets/dashboard.js',
        '/dashboard/assets/favicon.svg',
        '/dashboard/assets/uPlot.iife.min.js',
        '/dashboard/assets/uPlot.min.css',
      ].sort(),
    );
    for (const ref of refs) {
      const r = await get(port, ref);
      expect(r.status, ref).toBe(200);
      expect(r.headers['content-security-policy'], ref).toBe(csp);
      expect(r.headers['x-content-type-options'], ref).toBe('nosniff');
      expect(r.body.length, ref).toBeGreaterThan(0);
    }
  });

  it('serves the chart library from node_modules, byte for byte', async () => {
    const { port } = await serve();
    const require = createRequire(import.meta.url);
    const js = await get(port, '/dashboard/assets/uPlot.iife.min.js');
    expect(js.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(js.body.equals(readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js')))).toBe(true);
    const css = await get(port, '/dashboard/assets/uPlot.min.css');
    expect(css.headers['content-type']).toBe('text/css; charset=utf-8');
    expect(css.body.equals(readFileSync(require.resolve('uplot/dist/uPlot.min.css')))).toBe(true);
  });

  it('leaves every other path to the server, and answers a bad method on its own paths with 405', async () => {
    const { port } = await serve();
    for (const path of [
      '/',
      '/dashboards',
      '/dashboard/x',
      '/dashboard/assets/',
      '/dashboard/assets/nope.js',
      '/dashboard/assets/../package.json',
      '/healthz',
    ]) {
      const r = await get(port, path);
      expect(r.status, path).toBe(404);
      expect(r.headers['x-not-dashboard'], path).toBe('1');
    }
    for (const path of ['/dashboard/', '/dashboard?refresh=1']) expect((await get(port, path)).status, path).toBe(200);
    const post = await get(port, '/dashboard', { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD');
    expect(JSON.parse(post.body.toString())).toEqual({
      code: 'TIDAL_INVALID_INPUT',
      message: 'method must be GET or HEAD for /dashboard, got "POST" (string of length 4)',
      field: 'method',
      value: 'POST',
    });
    const headEvents = await get(port, '/dashboard/events', { method: 'HEAD' });
    expect(headEvents.status).toBe(405);
    expect(headEvents.headers.allow).toBe('GET');
    const head = await get(port, '/dashboard/assets/dashboard.js', { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(Number(head.headers['content-length'])).toBeGreaterThan(0);
    expect(head.body.length).toBe(0);
  });

  it('answers a revalidation with 304', async () => {
    const { port } = await serve();
    const first = await get(port, '/dashboard/assets/uPlot.iife.min.js');
    const etag = String(first.headers.etag);
    expect(etag).toMatch(/^"[\w-]+"$/);
    const again = await get(port, '/dashboard/assets/uPlot.iife.min.js', { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
  });

  it('adds no listener to a kept-alive socket, however many requests it carries', async () => {
    const { server, port } = await serve();
    const counts: number[] = [];
    server.on('request', (req: IncomingMessage) => {
      const s = req.socket;
      counts.push(s.eventNames().reduce((n, e) => n + s.listenerCount(e), 0));
    });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const sockets = new Set<unknown>();
    server.on('connection', (s) => sockets.add(s));
    for (let i = 0; i < 30; i++) await get(port, i % 2 ? '/dashboard' : '/dashboard/assets/dashboard.css', { agent });
    agent.destroy();
    expect(sockets.size).toBe(1);
    expect(new Set(counts).size).toBe(1);
  });

  it('refuses bad options with the field and the value', () => {
    expect(() => createDashboard({ sample: sampleAt, intervalMs: 0 })).toThrow(InvalidInputError);
    expect(() => createDashboard({ sample: sampleAt, intervalMs: 1.5 })).toThrow(
      'options.intervalMs must be an integer from 1 to 3600000, got 1.5',
    );
    expect(() => createDashboard({ sample: sampleAt, historySeconds: -1 })).toThrow('options.historySeconds');
    expect(() => createDashboard({ sample: sampleAt, maxClients: 0 })).toThrow('options.maxClients');
    expect(() => createDashboard({ sample: 'x' as unknown as () => ServeSample })).toThrow('options.sample');
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('dashboard events', () => {
  it('opens with the config, then sends one data frame per interval with the sample as JSON', async () => {
    const { port } = await serve({ historySeconds: 120 });
    const s = new Stream(port);
    await s.until(() => s.frames().length >= 1, 'the config frame');
    expect(s.status).toBe(200);
    expect(s.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(s.headers['cache-control']).toBe('no-store');
    expect(s.frames()[0]).toBe('retry: 2000\nevent: config\ndata: {"intervalMs":1000,"historySeconds":120}');
    advance(1);
    await s.until(() => s.frames().length >= 2, 'one sample');
    advance(1);
    await s.until(() => s.frames().length >= 3, 'two samples');
    const [, f1, f2] = s.frames();
    const first = {
      t: T0 + 1000,
      inFlight: 1,
      level: 'ReducedCandidates',
      offeredPerSec: 10,
      goodputPerSec: 9,
      refusedPerSec: { inflight: 1 },
      levelsPerSec: { Full: 5, ReducedCandidates: 2, CoarseAggregates: 1, NoDiversity: 1 },
      p50Ms: 1.5,
      p99Ms: 12.25,
      windowSeconds: 10,
    };
    expect(f1).toBe(`id: ${T0 + 1000}\ndata: ${JSON.stringify(first)}`);
    expect(f2).toMatch(new RegExp(`^id: ${T0 + 2000}\ndata: \\{[^\n]*\\}$`));
    expect(s.samples().map((x) => [x.t, x.inFlight, x.goodputPerSec, x.refusedPerSec])).toEqual([
      [T0 + 1000, 1, 9, { inflight: 1 }],
      [T0 + 2000, 2, 18, { inflight: 2 }],
    ]);
    s.close();
  });

  it('gives a new page the backlog of the last historySeconds, oldest first', async () => {
    const { port, dashboard } = await serve({ historySeconds: 3 });
    advance(6); // samples at +1s … +6s; the window at +6s keeps +3s … +6s
    expect(dashboard.stats().samples).toBe(4);
    const s = new Stream(port);
    await s.until(() => s.samples().length >= 4, 'the backlog');
    expect(s.samples().map((x) => x.t - T0)).toEqual([3000, 4000, 5000, 6000]);
    advance(1);
    await s.until(() => s.samples().length >= 5, 'the next sample');
    expect(s.samples().map((x) => x.t - T0)).toEqual([3000, 4000, 5000, 6000, 7000]);
    s.close();
  });

  it('sends no stale backlog after sampling stopped for longer than historySeconds', async () => {
    const { port } = await serve({ historySeconds: 3 });
    advance(3);
    now += 10_000; // time passes, no sample is taken
    const s = new Stream(port);
    await s.until(() => s.frames().length >= 1, 'the config frame');
    advance(1);
    await s.until(() => s.samples().length >= 1, 'the next sample');
    expect(s.samples().map((x) => x.t - T0)).toEqual([14_000]);
    s.close();
  });

  it('bounds the backlog by count when the clock stands still', async () => {
    const { dashboard } = await serve({ historySeconds: 3 });
    for (let i = 0; i < 10; i++) vi.advanceTimersByTime(INTERVAL); // `now` never moves
    expect(dashboard.stats().samples).toBe(4);
  });

  it('resumes a reconnecting page after the Last-Event-ID it saw', async () => {
    const { port } = await serve();
    advance(5);
    const s = new Stream(port, { 'last-event-id': String(T0 + 3000) });
    await s.until(() => s.samples().length >= 2, 'the rest of the backlog');
    expect(s.samples().map((x) => x.t - T0)).toEqual([4000, 5000]);
    s.close();
  });

  it('writes a heartbeat comment while a page is open', async () => {
    const { port } = await serve({ heartbeatMs: 5000, intervalMs: 60_000 });
    const s = new Stream(port);
    await s.until(() => s.frames().length >= 1, 'the config frame');
    vi.advanceTimersByTime(5000);
    await s.until(() => s.frames().includes(': heartbeat'), 'a heartbeat');
    s.close();
  });

  it('a sample that throws skips its interval and the stream goes on', async () => {
    let fail = true;
    const { port, dashboard } = await serve({
      sample: () => {
        if (fail) throw new Error('recorder broke');
        return sampleAt();
      },
    });
    const s = new Stream(port);
    await s.until(() => s.frames().length >= 1, 'the config frame');
    advance(1);
    fail = false;
    advance(1);
    await s.until(() => s.samples().length >= 1, 'a sample');
    expect(s.samples().map((x) => x.t - T0)).toEqual([2000]);
    expect(dashboard.stats().sampleErrors).toBe(1);
    s.close();
  });
});

describe('dashboard clients', () => {
  it('forgets a page that goes away: no client, no heartbeat timer left', async () => {
    const { port, dashboard } = await serve();
    expect(vi.getTimerCount()).toBe(1); // the sampler
    const streams = [new Stream(port), new Stream(port), new Stream(port)];
    for (const s of streams) await s.until(() => s.frames().length >= 1, 'the config frame');
    expect(dashboard.stats().clients).toBe(3);
    expect(vi.getTimerCount()).toBe(2); // + one heartbeat for all pages
    streams[0]!.close();
    await eventually(() => dashboard.stats().clients === 2, 'one client gone');
    expect(vi.getTimerCount()).toBe(2);
    streams[1]!.close();
    streams[2]!.close();
    await eventually(() => dashboard.stats().clients === 0, 'every client gone');
    expect(vi.getTimerCount()).toBe(1);
    // The sampler keeps the history for the next page; nothing is written to the gone ones.
    advance(3);
    expect(dashboard.stats().samples).toBe(3);
    // Many short visits leave nothing behind either.
    for (let i = 0; i < 20; i++) {
      const s = new Stream(port);
      await s.until(() => s.samples().length >= 3, 'the backlog');
      s.close();
    }
    await eventually(() => dashboard.stats().clients === 0, 'every client gone');
    expect(vi.getTimerCount()).toBe(1);
  });

  it('refuses a stream past maxClients with a 503 and a { code, message } body, and takes one again when a page leaves', async () => {
    const { port, dashboard } = await serve({ maxClients: 2 });
    const a = new Stream(port);
    const b = new Stream(port);
    for (const s of [a, b]) await s.until(() => s.frames().length >= 1, 'the config frame');
    const refused = await get(port, '/dashboard/events');
    expect(refused.status).toBe(503);
    expect(refused.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(JSON.parse(refused.body.toString())).toEqual({
      code: 'TIDAL_CAPACITY',
      message: 'dashboard event streams is full (capacity 2); close a dashboard page and reload, or raise maxClients',
      resource: 'dashboard event streams',
      capacity: 2,
    });
    expect(dashboard.stats()).toMatchObject({ clients: 2, refused: 1 });
    a.close();
    await eventually(() => dashboard.stats().clients === 1, 'a page gone');
    const c = new Stream(port);
    await c.until(() => c.frames().length >= 1, 'the config frame');
    expect(c.status).toBe(200);
    b.close();
    c.close();
  });

  it('close() ends every open stream, stops every timer, and refuses new streams', async () => {
    const { port, dashboard } = await serve();
    const streams = [new Stream(port), new Stream(port)];
    for (const s of streams) await s.until(() => s.frames().length >= 1, 'the config frame');
    dashboard.close();
    dashboard.close();
    expect(dashboard.stats().clients).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
    for (const s of streams) await s.until(() => s.ended, 'the end of the stream');
    const after = await get(port, '/dashboard/events');
    expect(after.status).toBe(503);
    expect(JSON.parse(after.body.toString())).toMatchObject({ code: 'TIDAL_CLOSED', operation: 'stream dashboard events' });
    expect((await get(port, '/dashboard')).status).toBe(200);
  });

  it('cuts a page that stops reading once maxBufferedBytes are waiting for it', () => {
    const dashboard = createDashboard({ sample: sampleAt, clock, intervalMs: INTERVAL, maxBufferedBytes: 1000 });
    open.push({ dashboard, server: createServer() });
    // A response with no socket buffers every write, exactly like one whose reader has stalled.
    const req = new IncomingMessage(new Socket());
    req.method = 'GET';
    req.url = '/dashboard/events';
    const res = new ServerResponse(req);
    expect(dashboard.handle(req, res)).toBe(true);
    expect(dashboard.stats().clients).toBe(1);
    let intervals = 0;
    while (dashboard.stats().clients === 1 && intervals < 100) {
      advance(1);
      intervals++;
    }
    expect(dashboard.stats()).toMatchObject({ clients: 0, dropped: 1 });
    expect(res.writableLength).toBeGreaterThan(1000);
    // ~300 bytes a sample: cut after the first write past the bound, not at the first write.
    expect(intervals).toBeGreaterThan(2);
    expect(intervals).toBeLessThan(10);
  });
});
