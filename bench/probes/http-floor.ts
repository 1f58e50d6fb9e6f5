/**
 * What an HTTP request costs the server before tidal's own work: the same closed loop (the serve
 * bench's generator, `--closed` requests in flight over keep-alive connections) against
 *   - a bare `node:http` server and a bare fastify server (http-floor-server.ts), each reading and
 *     parsing the JSON body and answering a fixed answer of a 20-item query's size;
 *   - `tidal serve --demo` with one acceptor thread: `GET /healthz`, a POST to a path it does not
 *     have (the body read, a 404 written), and a trending retrieve at NoDiversity, which the work
 *     sharing answers from its kept result, so no executor runs (what is left is the fixed part of
 *     a query: the admission chain, validation, the plan, the answer's assembly and its write),
 *     with 20 items and with 1 (what the answer's size costs).
 * Reports the server process's CPU time per response (every thread, /proc schedstat), each case in
 * every one of `--rounds` rounds, the cases taking turns. Run it with the Node that serves
 * (acceptor threads need Node ≥ 22.12): `node scripts/node24.mjs run -- node
 * bench/probes/dist/probes/http-floor.js`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Report, fmtInt, loadAverage, parseOptions } from '../src/harness/index.js';
import { closedLoop, measuredLoop } from '../src/serve/spawn-loadgen.js';

const opts = parseOptions('http-floor', {
  items: { type: 'int', default: 20_000, description: "tidal serve's demo corpus" },
  closed: { type: 'int', default: 16, description: 'requests in flight' },
  seconds: { type: 'int', default: 5, description: 'seconds per case and round' },
  rounds: { type: 'int', default: 3, description: 'rounds over every case' },
  bytes: { type: 'int', default: 7700, description: "the bare servers' answer size (a 20-item trending answer of the demo)" },
});

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..', '..', '..');

interface Running {
  child: ChildProcess;
  url: string;
}

function start(args: string[], ready: RegExp): Promise<Running> {
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (err = (err + c).slice(-2000)));
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      const m = ready.exec(out);
      if (m !== null) resolve({ child, url: m[1]! });
    });
    child.once('exit', (code) =>
      reject(new Error(`${args.join(' ')} exited with ${code}: ${err.trim().split('\n').slice(-3).join(' / ')}`)),
    );
  });
}

async function readyz(url: string): Promise<void> {
  for (;;) {
    const r = await fetch(`${url}/readyz`).catch(() => null);
    if (r?.status === 200) return;
    await new Promise((res) => setTimeout(res, 250));
  }
}

const dir = mkdtempSync(join(tmpdir(), 'tidal-http-floor-'));
const list = (name: string, specs: unknown[]): string => {
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(specs));
  return file;
};
const trending = { profile: 'trending', diversity: { maxPer: { creator: 2 } }, limit: 20, level: 'NoDiversity' };
const post = list('post', [{ method: 'POST', path: '/retrieve', body: trending }]);
const cases: { name: string; server: 'http' | 'fastify' | 'tidal'; file: string }[] = [
  { name: 'node:http, POST, fixed answer', server: 'http', file: post },
  { name: 'fastify, POST, fixed answer', server: 'fastify', file: post },
  { name: 'tidal serve, GET /healthz', server: 'tidal', file: list('healthz', [{ path: '/healthz' }]) },
  { name: 'tidal serve, POST to no route (404)', server: 'tidal', file: list('404', [{ method: 'POST', path: '/none', body: trending }]) },
  { name: 'tidal serve, trending at NoDiversity (shared)', server: 'tidal', file: post },
  {
    name: 'the same, limit 1',
    server: 'tidal',
    file: list('one', [{ method: 'POST', path: '/retrieve', body: { ...trending, limit: 1 } }]),
  },
];

const report = new Report('http-floor', opts);
const servers = new Map<string, Running>();
try {
  const server = join(HERE, 'http-floor-server.js');
  servers.set('http', await start([server, 'http', String(opts.bytes)], /listening on (http:\/\/\S+)/));
  servers.set('fastify', await start([server, 'fastify', String(opts.bytes)], /listening on (http:\/\/\S+)/));
  const cli = join(ROOT, 'packages', 'tidal-serve', 'dist', 'cli.js');
  const tidalArgs = [cli, 'serve', '--demo', '--demo-items', String(opts.items), '--port', '0', '--acceptors', '1', '--wait-for-ann'];
  process.stderr.write(`tidal serve --demo --demo-items ${opts.items}: loading\n`);
  const tidal = await start(tidalArgs, /tidal serve listening on (http:\/\/\S+)/);
  servers.set('tidal', tidal);
  await readyz(tidal.url);
  // Each case once before anything is measured: the servers' code compiled, tidal's result kept.
  for (const c of cases) await closedLoop(servers.get(c.server)!.url, c.file, opts.closed, 2000, 1);
  const results = new Map<string, { us: number; rate: number }[]>();
  for (let round = 0; round < opts.rounds; round++) {
    process.stderr.write(`round ${round + 1} (load average ${loadAverage()})\n`);
    for (let i = 0; i < cases.length; i++) {
      const c = cases[(i + round) % cases.length]!;
      const s = servers.get(c.server)!;
      const m = await measuredLoop(s.child.pid!, s.url, c.file, opts.closed, opts.seconds * 1000, 100 + round);
      const r = { us: m.us, rate: m.completed / opts.seconds };
      results.set(c.name, [...(results.get(c.name) ?? []), r]);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  report.table(
    '',
    ['server and request', 'server CPU µs / response, median (each round)', 'responses / s, median'],
    cases.map((c) => {
      const rs = results.get(c.name)!;
      return [
        c.name,
        `${median(rs.map((r) => r.us)).toFixed(0)} (${rs.map((r) => r.us.toFixed(0)).join(', ')})`,
        fmtInt(median(rs.map((r) => r.rate))),
      ];
    }),
  );
  report.line(
    `A closed loop of ${opts.closed}, ${opts.seconds} s per case and round, ${opts.rounds} rounds, the cases taking turns; Node ${process.version}; load average ${loadAverage()}.`,
  );
  report.set('results', Object.fromEntries(results));
  report.finish();
} finally {
  for (const s of servers.values()) s.child.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}
