// Probe: the server main thread's CPU per request, for one build against another (docs/serve.md).
/**
 * `node bench/probes/dist/probes/request-cost.js` (after `npm run probes`): what one query costs the server's MAIN THREAD, the
 * thread every request crosses (HTTP parsing, routing, the admission chain, the hand-off to a query
 * worker and back, serialization, the write) and the one that does not get cheaper when tidal
 * degrades. The query workers' time is reported beside it, but it is not the figure.
 *
 * Starts one `tidal serve --demo` per variant (`--variant NAME=PATH/cli.js`, default `current`, the
 * built packages/tidal-serve), all on the same corpus, and drives each in turn with a closed loop
 * of `--connections` keep-alive connections (the generator of bench:serve, in its own process) on
 * the retrieve and the search requests of the query mix (docs/overload.md). The figure is the
 * server's main thread's on-CPU time over the window (`/proc/PID/task/PID/schedstat`, in ns),
 * divided by the responses it sent. The variants and routes are interleaved in every round, in an
 * order that rotates; the median over rounds is reported, and each variant's ratio to the first
 * one's figure of the same round (median and range over rounds), so variants measured in one run
 * are comparable on a shared machine: the ratio is the result, the absolute figure moves with load.
 *
 *     node bench/probes/dist/probes/request-cost.js [--items 20000] [--rounds 5] [--ms 3000] [--connections 8]
 *       [--workers 2] [--variant NAME=CLI ...] [--profile]
 *
 * `--profile` runs the servers under `--cpu-prof` and prints each variant's main-thread self time
 * by function over its measured windows.
 *
 * `--refusals` measures the refusal path instead: the servers start with `--in-flight-cap 1
 * --no-adaptive`, so of `--connections` (default 32 here) requests at once all but about one are
 * refused by the cap (a 503 each), as at 10× C; the table's "at Full" column is then the share of
 * responses that were refusals.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Corpus } from '../src/corpus.js';
import { mixHttpRequest, prepareRequests } from '../src/query-mix.js';
import { mulberry32 } from '../src/random.js';
import { ROOT, Report, loadAverage, markdownTable, parseOptions } from '../src/harness/index.js';
import type { LoadResult, RequestSpec } from '../src/serve/loadgen.js';
import { runLoadgen } from '../src/serve/spawn-loadgen.js';
import { summarizeProfile } from '../src/serve/profile.js';

const ROUTES = ['retrieve', 'search'] as const;
type Route = (typeof ROUTES)[number];

interface Variant {
  name: string;
  cli: string;
  child: ChildProcess;
  url: string;
  pid: number;
  exited: Promise<number | null>;
  profileDir: string | null;
  windowsUs: [number, number][];
}

/** On-CPU time of the process's main thread (its tid is the pid), in ns. */
function mainThreadNs(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[0]);
}

/** On-CPU time of the whole process (every thread), in ns. */
function processNs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime and stime (fields 14 and 15) in clock ticks of 10 ms.
  return (Number(rest[11]) + Number(rest[12])) * 1e7;
}

async function start(name: string, cli: string, items: number, workers: number, profile: boolean, extra: readonly string[]): Promise<Variant> {
  const profileDir = profile ? mkdtempSync(join(tmpdir(), 'tidal-cost-prof-')) : null;
  const args = [
    ...(profileDir === null ? [] : ['--cpu-prof', '--cpu-prof-dir', profileDir]),
    cli,
    'serve',
    '--demo',
    '--demo-items',
    String(items),
    '--port',
    '0',
    '--workers',
    String(workers),
    ...extra,
  ];
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = await new Promise<string>((resolveUrl, reject) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      const m = /tidal serve listening on (http:\/\/\S+)/.exec(out);
      if (m !== null) resolveUrl(m[1]!);
    });
    void exited.then((code) => reject(new Error(`${name}: tidal serve exited with ${code} before listening`)));
  });
  return { name, cli, child, url, pid: child.pid!, exited, profileDir, windowsUs: [] };
}


interface Measured {
  mainUs: number;
  processUs: number;
  perSec: number;
  full: number;
}

async function measure(v: Variant, file: string, ms: number, connections: number, seed: number, refusals: boolean): Promise<Measured> {
  const args = ['--url', v.url, '--requests', file, '--closed', String(connections), '--duration-ms', String(ms), '--grace-ms', '3000', '--seed', String(seed), '--count-header', 'x-tidal-degradation-level'];
  const main0 = mainThreadNs(v.pid);
  const proc0 = processNs(v.pid);
  const t0 = process.hrtime.bigint() / 1000n;
  const { result: load } = await runLoadgen(args);
  const t1 = process.hrtime.bigint() / 1000n;
  const main1 = mainThreadNs(v.pid);
  const proc1 = processNs(v.pid);
  v.windowsUs.push([Number(t0), Number(t1)]);
  const ok = load.statuses['200'] ?? 0;
  const refused = load.statuses['503'] ?? 0;
  if (refusals) {
    if (ok + refused !== load.completed) process.stderr.write(`  ${v.name}: ${load.completed - ok - refused} of ${load.completed} responses were neither 200 nor 503: ${JSON.stringify(load.statuses)}\n`);
    return { mainUs: (main1 - main0) / 1000 / load.completed, processUs: (proc1 - proc0) / 1000 / load.completed, perSec: (load.completed * 1000) / load.elapsedMs, full: refused / Math.max(1, load.completed) };
  }
  if (ok !== load.completed) process.stderr.write(`  ${v.name}: ${load.completed - ok} of ${load.completed} responses were not 200: ${JSON.stringify(load.statuses)}\n`);
  const full = (load.headerCounts?.Full ?? 0) / Math.max(1, ok);
  return { mainUs: (main1 - main0) / 1000 / load.completed, processUs: (proc1 - proc0) / 1000 / load.completed, perSec: (load.completed * 1000) / load.elapsedMs, full };
}

/** Mean body size of the first `n` requests of `specs`, and the header block of the first. */
async function sizes(url: string, specs: readonly RequestSpec[], n: number): Promise<{ bodyBytes: number }> {
  let bytes = 0;
  const take = specs.slice(0, n);
  for (const s of take) {
    const r = await fetch(url + s.path, { method: 'POST', body: s.body as string, headers: { 'content-type': 'application/json' } });
    bytes += (await r.arrayBuffer()).byteLength;
  }
  return { bodyBytes: bytes / take.length };
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

function variants(given: readonly string[]): { name: string; cli: string }[] {
  const out: { name: string; cli: string }[] = [];
  for (const raw of given) {
    const eq = raw.indexOf('=');
    if (eq <= 0) throw new Error(`--variant must be NAME=PATH/cli.js, got ${raw}`);
    out.push({ name: raw.slice(0, eq), cli: resolve(raw.slice(eq + 1)) });
  }
  if (out.length === 0) out.push({ name: 'current', cli: join(ROOT, 'packages', 'tidal-serve', 'dist', 'cli.js') });
  return out;
}

async function main(): Promise<void> {
  const opts = parseOptions('request-cost', {
    items: { type: 'int', default: 20_000, description: 'demo corpus size' },
    rounds: { type: 'int', default: 5, description: 'rounds after a warm-up round; the median is reported' },
    ms: { type: 'int', default: 3000, description: 'milliseconds per variant and route' },
    refusals: { type: 'boolean', description: 'the refusal path: servers with --in-flight-cap 1 --no-adaptive' },
    connections: { type: 'int', default: 0, min: 0, description: 'closed-loop connections (0: 8, or 32 with --refusals)' },
    workers: { type: 'int', default: 2, description: "the server's query workers" },
    variant: { type: 'strings', description: 'NAME=PATH/cli.js, repeatable (default: current=this tree)' },
    profile: { type: 'boolean', description: "each variant's main-thread self time by function" },
  });
  const { items, rounds, ms, refusals, workers, profile } = opts;
  const connections = opts.connections || (refusals ? 32 : 8);
  const work = mkdtempSync(join(tmpdir(), 'tidal-cost-'));
  const running: Variant[] = [];
  try {
    // The server builds the same corpus (seed 42, 128 dimensions) for --demo.
    const corpus = new Corpus({ items, dims: 128, seed: 42 });
    const mix = prepareRequests(corpus, mulberry32(7), 4096);
    const files = {} as Record<Route, string>;
    const specsOf = {} as Record<Route, RequestSpec[]>;
    for (const route of ROUTES) {
      specsOf[route] = mix.filter((q) => q.kind === route).map(mixHttpRequest);
      files[route] = join(work, `${route}.json`);
      writeFileSync(files[route], JSON.stringify(specsOf[route]));
    }
    // One server at a time loads its corpus: loading several at once on 2 cores takes as long.
    for (const v of variants(opts.variant)) {
      process.stderr.write(`starting ${v.name} (${v.cli})...\n`);
      running.push(await start(v.name, v.cli, items, workers, profile, refusals ? ['--in-flight-cap', '1', '--no-adaptive'] : []));
    }
    const load0 = loadAverage();
    const report = new Report('request-cost', opts);
    console.log(`serve request cost${refusals ? ' (refusals: --in-flight-cap 1 --no-adaptive)' : ''}: ${items} items, ${workers} workers, ${connections} connections closed loop, ${rounds} rounds of ${ms} ms after a warm-up round; load average ${load0}`);
    const bodies = new Map<string, number>();
    for (const v of running) for (const route of ROUTES) bodies.set(`${v.name} ${route}`, (await sizes(v.url, specsOf[route], 100)).bodyBytes);
    const results = new Map<string, Measured[]>();
    for (let r = 0; r <= rounds; r++) {
      for (let k = 0; k < running.length; k++) {
        const v = running[(k + r) % running.length]!;
        for (const route of r % 2 === 0 ? ROUTES : [...ROUTES].reverse()) {
          const m = await measure(v, files[route], r === 0 ? Math.min(ms, 2000) : ms, connections, 100 + r, refusals);
          if (r === 0) {
            v.windowsUs.pop();
            continue;
          }
          const key = `${v.name} ${route}`;
          results.set(key, [...(results.get(key) ?? []), m]);
          process.stderr.write(`  round ${r} ${key}: main ${m.mainUs.toFixed(0)} µs, process ${m.processUs.toFixed(0)} µs, ${m.perSec.toFixed(0)}/s\n`);
        }
      }
    }
    const rows: string[][] = [];
    for (const route of ROUTES) {
      const base = results.get(`${running[0]!.name} ${route}`)!;
      for (const v of running) {
        const ms = results.get(`${v.name} ${route}`)!;
        const main = median(ms.map((m) => m.mainUs));
        // Each round's ratio to the first variant's figure in the same round: both were measured
        // within seconds of each other, so a neighbour's load that comes and goes cancels out of
        // the ratio more than out of either figure.
        const ratios = ms.map((m, i) => m.mainUs / base[i]!.mainUs);
        rows.push([
          route,
          v.name,
          main.toFixed(1),
          `${Math.min(...ms.map((m) => m.mainUs)).toFixed(0)}–${Math.max(...ms.map((m) => m.mainUs)).toFixed(0)}`,
          `${median(ratios).toFixed(2)}× (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`,
          median(ms.map((m) => m.processUs)).toFixed(0),
          median(ms.map((m) => m.perSec)).toFixed(0),
          `${Math.round(median(ms.map((m) => m.full)) * 100)} %`,
          (bodies.get(`${v.name} ${route}`) ?? 0).toFixed(0),
        ]);
      }
    }
    report.table('', ['route', 'variant', 'main thread µs / request', 'range', `× ${running[0]!.name}, per round`, 'process µs / request', 'requests/s', refusals ? 'refused' : 'at Full', 'body bytes'], rows);
    report.line(`load average at the end: ${loadAverage()}`);
    for (const v of running) {
      v.child.kill('SIGTERM');
      await v.exited;
      if (v.profileDir === null) continue;
      const p = summarizeProfile(v.profileDir, v.windowsUs, 20);
      if (p === null) continue;
      console.log(`\n${v.name}: main thread self time over ${p.samples} samples\n`);
      console.log(markdownTable(['self time', 'function'], p.top.map((t) => [`${(t.share * 100).toFixed(1)} %`, t.name.replaceAll('|', '\\|')])));
    }
    report.finish();
  } finally {
    for (const v of running) {
      if (v.child.exitCode === null) v.child.kill('SIGKILL');
      if (v.profileDir !== null) rmSync(v.profileDir, { recursive: true, force: true });
    }
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
