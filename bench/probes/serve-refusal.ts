// Probe: a refusal's and a trivial route's server CPU under fastify, node:http, a hybrid and tidal's listener (docs/serve.md).
/**
 * `node bench/probes/dist/probes/serve-refusal.js` (after `npm run probes`): what one HTTP request costs the server's process on the
 * refusal path and on a trivial admitted route, for the three ways tidal serve could be built:
 *
 * - `fastify`: fastify 5, the refusal answered from an `onRequest` hook (503, a small JSON body,
 *   `Retry-After`), the admitted request by a route returning `{ ok: true }`;
 * - `node`: plain `node:http`, both answered by hand in the `'request'` listener;
 * - `hybrid`: a `node:http` `'request'` listener that refuses before handing over to fastify
 *   (fastify's `serverFactory`), fastify routing what is admitted;
 * - `tidal`: tidal-serve's own server (`createServer` of the built package, its `'request'`
 *   listener, admission chain, recorder and metrics), refusal path only: its chain is the in-flight
 *   cap at 1 with that one slot held, so every request is refused by the cap (503
 *   `TIDAL_SERVE_INFLIGHT`), as at 10× C. No database is touched on that path; a stub stands in.
 *
 * It ends with the refusal's cost of tidal's listener against plain node:http's, `tidal − node` in
 * µs per refusal (median over rounds of the per-round difference), with the servers' Node version.
 *
 * Each server runs in its own child process; the generator (undici, closed loop over keep-alive
 * connections) in another. The figure is the server process's CPU time (user + system, from
 * `process.cpuUsage()`) over the measured window divided by the responses it sent, so a busy
 * generator on the same cores does not count. Kinds are interleaved within every round and the
 * median over rounds is reported.
 *
 * Flags: `--rounds N` (default 5, after one warm-up round), `--ms N` per measurement (default
 * 2000), `--connections N` (default 32), `--kinds LIST` (default fastify,node,hybrid,tidal; `node`
 * is always measured, it is the baseline).
 */

import { fork, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { InvalidInputError } from 'tidal-core';
import type { ServeDb } from 'tidal-serve';
import { Report, parseOptions } from '../src/harness/index.js';

type Kind = 'fastify' | 'node' | 'hybrid' | 'tidal';
type Path = '/refuse' | '/ok';
const KINDS: readonly Kind[] = ['fastify', 'node', 'hybrid', 'tidal'];
/** Kinds measured on `/ok` too: tidal's admitted path is a database query, bench:serve's subject. */
const REFUSAL_ONLY: ReadonlySet<Kind> = new Set(['tidal']);
/** The target of tidal's listener: at most this many µs per refusal above plain node:http's. */
const TARGET_US = 5;

const REFUSAL_BODY = JSON.stringify({ code: 'TIDAL_SERVE_INFLIGHT', message: 'too many requests in flight (256); retry after 40 ms', retryAfterMs: 40 });

function refuse(res: ServerResponse): void {
  res.writeHead(503, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(REFUSAL_BODY),
    'retry-after': '1',
    'x-retry-after-ms': '40',
  });
  res.end(REFUSAL_BODY);
}

async function serve(kind: Kind): Promise<number> {
  if (kind === 'tidal') {
    const { createAdmissionChain, createServer: createTidalServer } = await import('tidal-serve');
    const chain = createAdmissionChain({ inFlightCap: 1, adaptive: false, tenants: false, permits: {}, period: false }, () => performance.now());
    // Held for the server's life: the cap stays full and refuses every request.
    const held = chain.admit({ route: 'other', tenant: 'anonymous', tier: 'free' }, performance.now());
    if (!held.admitted) throw new Error('the in-flight cap refused its first request');
    const db = { load: { level: 0 }, closed: false } as unknown as ServeDb;
    const server = createTidalServer({ db, admission: chain });
    const url = await server.listen(0, '127.0.0.1');
    return Number(new URL(url).port);
  }
  const { default: Fastify } = await import('fastify');
  if (kind === 'node') {
    const ok = JSON.stringify({ ok: true });
    const server = createServer((req, res) => {
      if (req.url === '/refuse') return refuse(res);
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(ok) });
      res.end(ok);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return (server.address() as AddressInfo).port;
  }
  if (kind === 'fastify') {
    const app = Fastify({ logger: false });
    app.addHook('onRequest', (req, reply, done) => {
      if (req.url === '/refuse') {
        void reply.code(503).header('retry-after', '1').header('x-retry-after-ms', '40').type('application/json; charset=utf-8').send(REFUSAL_BODY);
        return;
      }
      done();
    });
    app.get('/ok', async () => ({ ok: true }));
    await app.listen({ port: 0, host: '127.0.0.1' });
    return (app.server.address() as AddressInfo).port;
  }
  let handler: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const app = Fastify({
    logger: false,
    serverFactory: (h) => {
      handler = h;
      return createServer((req, res) => {
        if (req.url === '/refuse') return refuse(res);
        handler!(req, res);
      });
    },
  });
  app.get('/ok', async () => ({ ok: true }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  return (app.server.address() as AddressInfo).port;
}

/** The generator: a closed loop of `connections` requests at once for `ms`, counting responses. */
async function generate(port: number, path: Path, ms: number, connections: number): Promise<{ responses: number; unexpected: number; p50: number; p99: number }> {
  const { Pool } = await import('undici');
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections, pipelining: 1 });
  const end = performance.now() + ms;
  const lat: number[] = [];
  const expected = path === '/refuse' ? 503 : 200;
  let unexpected = 0;
  const loop = async (): Promise<void> => {
    while (performance.now() < end) {
      const t = performance.now();
      const res = await pool.request({ path, method: 'GET' });
      if (res.statusCode !== expected) unexpected++;
      await res.body.text();
      lat.push(performance.now() - t);
    }
  };
  await Promise.all(Array.from({ length: connections }, loop));
  await pool.close();
  lat.sort((a, b) => a - b);
  return { responses: lat.length, unexpected, p50: lat[Math.floor(lat.length / 2)] ?? 0, p99: lat[Math.floor(lat.length * 0.99)] ?? 0 };
}

function request<T>(child: ChildProcess, message: object): Promise<T> {
  return new Promise((resolve) => {
    child.once('message', (m) => resolve(m as T));
    child.send(message);
  });
}

interface Measured {
  cpuUsPerRequest: number;
  /** The server process's `process.version`. */
  node: string;
  /** Responses that were not the expected status (503 on /refuse, 200 on /ok). */
  unexpected: number;
  requestsPerSec: number;
  p50: number;
  p99: number;
}

async function measure(kind: Kind, path: Path, ms: number, connections: number): Promise<Measured> {
  const self = fileURLToPath(import.meta.url);
  const server = fork(self, ['--server', kind]);
  const { port } = await request<{ port: number }>(server, { op: 'start' });
  const generator = fork(self, ['--generator']);
  // A short warm-up so the JIT has settled before the window opens.
  await request(generator, { op: 'run', port, path, ms: 300, connections });
  const before = await request<{ cpu: NodeJS.CpuUsage }>(server, { op: 'cpu' });
  const run = await request<{ responses: number; unexpected: number; p50: number; p99: number }>(generator, { op: 'run', port, path, ms, connections });
  const after = await request<{ cpu: NodeJS.CpuUsage; node: string }>(server, { op: 'cpu' });
  server.kill();
  generator.kill();
  const cpuUs = after.cpu.user + after.cpu.system - before.cpu.user - before.cpu.system;
  return { cpuUsPerRequest: cpuUs / run.responses, node: after.node, unexpected: run.unexpected, requestsPerSec: (run.responses * 1000) / ms, p50: run.p50, p99: run.p99 };
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] === '--server') {
    const kind = argv[1] as Kind;
    let port = 0;
    process.on('message', (m: { op: string }) => {
      if (m.op === 'start') void serve(kind).then((p) => ((port = p), process.send!({ port })));
      else if (m.op === 'cpu') process.send!({ cpu: process.cpuUsage(), port, node: process.version });
    });
    return;
  }
  if (argv[0] === '--generator') {
    process.on('message', (m: { port: number; path: Path; ms: number; connections: number }) => {
      void generate(m.port, m.path, m.ms, m.connections).then((r) => process.send!(r));
    });
    return;
  }
  const opts = parseOptions('serve-refusal', {
    rounds: { type: 'int', default: 5, description: 'timed rounds after one warm-up; the median is reported' },
    ms: { type: 'int', default: 2000, description: 'milliseconds per measurement' },
    connections: { type: 'int', default: 32, description: 'keep-alive connections of the closed loop' },
    kinds: { type: 'string', description: `servers to measure, of ${KINDS.join(', ')} (node is always measured)` },
  });
  const { rounds, ms, connections } = opts;
  const kindsArg = opts.kinds;
  const asked = kindsArg === undefined ? KINDS : kindsArg.split(',').map((k) => k.trim());
  for (const k of asked) if (!KINDS.includes(k as Kind)) throw new InvalidInputError('--kinds', `a list of ${KINDS.join(', ')}`, kindsArg);
  const kinds = KINDS.filter((k) => k === 'node' || asked.includes(k));
  const report = new Report('serve-refusal', opts);
  report.line(`${rounds} rounds of ${ms} ms, ${connections} connections, generator in another process.`);
  report.line();
  const results = new Map<string, Measured[]>();
  for (let r = 0; r <= rounds; r++) {
    // Rotate the order each round so no kind always runs first (or right after another's GC).
    const order = kinds.map((_, i) => kinds[(i + r) % kinds.length]!);
    for (const path of ['/refuse', '/ok'] as const) {
      for (const kind of order) {
        if (path === '/ok' && REFUSAL_ONLY.has(kind)) continue;
        const m = await measure(kind, path, ms, connections);
        if (r === 0) continue;
        const key = `${kind} ${path}`;
        results.set(key, [...(results.get(key) ?? []), m]);
      }
    }
  }
  const row = (kind: Kind, path: Path) => {
    const ms = results.get(`${kind} ${path}`)!;
    return {
      cpu: median(ms.map((m) => m.cpuUsPerRequest)),
      rps: median(ms.map((m) => m.requestsPerSec)),
      p50: median(ms.map((m) => m.p50)),
      p99: median(ms.map((m) => m.p99)),
    };
  };
  console.log('| server | path | server CPU µs / request | requests/s | client p50 ms | client p99 ms | CPU vs node |');
  console.log('|---|---|---:|---:|---:|---:|---:|');
  for (const path of ['/refuse', '/ok'] as const) {
    const base = row('node', path).cpu;
    for (const kind of kinds) {
      if (path === '/ok' && REFUSAL_ONLY.has(kind)) continue;
      const x = row(kind, path);
      console.log(`| ${kind} | ${path} | ${x.cpu.toFixed(1)} | ${Math.round(x.rps)} | ${x.p50.toFixed(2)} | ${x.p99.toFixed(2)} | ${(x.cpu / base).toFixed(2)}× |`);
    }
  }
  const unexpected = [...results.entries()].filter(([, ms]) => ms.some((m) => m.unexpected > 0)).map(([key, ms]) => `${key} ${ms.reduce((a, m) => a + m.unexpected, 0)}`);
  if (unexpected.length > 0) console.log(`responses with another status than expected (503 on /refuse, 200 on /ok): ${unexpected.join(', ')}`);
  if (kinds.includes('tidal')) {
    const tidal = results.get('tidal /refuse')!;
    const node = results.get('node /refuse')!;
    // Per round, so a round the machine was busier shifts both alike.
    const diffs = tidal.map((m, i) => m.cpuUsPerRequest - node[i]!.cpuUsPerRequest);
    const d = median(diffs);
    const versions = [...new Set([...tidal, ...node].map((m) => m.node))].join(', ');
    console.log(
      `refusal, tidal's listener − plain node:http: ${d >= 0 ? '+' : ''}${d.toFixed(1)} µs of server CPU per refusal (median of ${diffs.length} rounds, range ${Math.min(...diffs).toFixed(1)} to ${Math.max(...diffs).toFixed(1)}; ` +
        `tidal ${row('tidal', '/refuse').cpu.toFixed(1)}, node:http ${row('node', '/refuse').cpu.toFixed(1)}), Node ${versions}; target ≤ ${TARGET_US} µs: ${d <= TARGET_US ? 'met' : 'MISSED'}`,
    );
  }
  report.set('results', Object.fromEntries(results));
  report.finish();
}

await main();
