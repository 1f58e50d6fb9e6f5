// Probe: the load generator's CPU per request with its raw node:net client against undici (docs/serve.md).
/**
 * `node bench/probes/dist/probes/client-cost.js` (after `npm run probes`): what one request costs the LOAD GENERATOR, per client
 * (`--client raw` and `--client undici` of bench/src/serve/loadgen.ts), against the same
 * `tidal serve --demo` (one server for the whole run). The generator shares the machine with the
 * server in bench:serve, so every µs it spends is taken from the server, and its event-loop lag is
 * billed to the server's latency.
 *
 * Each round runs every rate (open-loop Poisson arrivals) with both clients, the clients' order
 * alternating per round; the figure is the generator process's CPU time over its run (user +
 * system, `process.cpuUsage`, from its own result) divided by the responses it got. The ratio raw ÷
 * undici is taken per round and rate (two runs seconds apart see the same neighbours), then its
 * median; that ratio is the result on a shared machine, the absolute figures move with its load.
 *
 *     node bench/probes/dist/probes/client-cost.js [--items 20000] [--rates 2000,4000,8000] [--rounds 3] [--ms 3000] [--workers 2]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Corpus } from '../src/corpus.js';
import { mixHttpRequest, prepareRequests } from '../src/query-mix.js';
import { mulberry32 } from '../src/random.js';
import { ROOT, Report, loadAverage, parseOptions } from '../src/harness/index.js';
import type { LoadgenClient, LoadResult, RequestSpec } from '../src/serve/loadgen.js';
import { runLoadgen } from '../src/serve/spawn-loadgen.js';

const CLI = join(ROOT, 'packages', 'tidal-serve', 'dist', 'cli.js');
const CLIENTS: readonly LoadgenClient[] = ['undici', 'raw'];


async function startServer(items: number, workers: number): Promise<{ child: ChildProcess; url: string; exited: Promise<number | null> }> {
  const child = spawn(process.execPath, [CLI, 'serve', '--demo', '--demo-items', String(items), '--port', '0', '--workers', String(workers)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      const m = /tidal serve listening on (http:\/\/\S+)/.exec(out);
      if (m !== null) resolve(m[1]!);
    });
    void exited.then((code) => reject(new Error(`tidal serve exited with ${code} before listening`)));
  });
  return { child, url, exited };
}


interface Measured {
  usPerResponse: number;
  cpuShare: number;
  loopP99Ms: number;
  perSec: number;
  refusedShare: number;
  errors: number;
  errorCodes: string;
}

async function measure(url: string, file: string, client: LoadgenClient, rate: number, ms: number, seed: number): Promise<Measured> {
  const { result: load } = await runLoadgen([
    '--url', url, '--requests', file, '--client', client, '--rate', String(rate), '--duration-ms', String(ms),
    '--grace-ms', '3000', '--seed', String(seed), '--count-header', 'x-tidal-degradation-level',
    // As bench:serve sizes its pools.
    '--connections', String(Math.min(8192, Math.max(512, Math.ceil(rate * 0.5)))),
  ]);
  const refused = Object.values(load.refusalsByCode).reduce((a, b) => a + b, 0);
  const errors = Object.values(load.errors).reduce((a, b) => a + b, 0) + load.abandoned;
  return {
    usPerResponse: load.generator.cpuUs / Math.max(1, load.completed),
    cpuShare: load.generator.cpuShare,
    loopP99Ms: load.generator.loopDelayP99Ms,
    perSec: load.achievedRatePerSec,
    refusedShare: refused / Math.max(1, load.completed),
    errors,
    errorCodes: JSON.stringify({ ...load.errors, ...(load.abandoned > 0 ? { abandoned: load.abandoned } : {}) }),
  };
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

async function main(): Promise<void> {
  const opts = parseOptions('client-cost', {
    items: { type: 'int', default: 20_000, description: 'demo corpus size' },
    rates: { type: 'ints', description: 'offered rates, requests/s (default 2000,4000,8000)' },
    rounds: { type: 'int', default: 3, description: 'rounds after a warm-up; the median is reported' },
    ms: { type: 'int', default: 3000, description: 'milliseconds per rate and client' },
    workers: { type: 'int', default: 2, description: "the server's query workers" },
  });
  const { items, rounds, ms, workers } = opts;
  const rates = opts.rates.length > 0 ? opts.rates : [2000, 4000, 8000];
  const work = mkdtempSync(join(tmpdir(), 'tidal-client-cost-'));
  let server: Awaited<ReturnType<typeof startServer>> | null = null;
  try {
    // The server builds the same corpus (seed 42, 128 dimensions) for --demo.
    const corpus = new Corpus({ items, dims: 128, seed: 42 });
    const specs: RequestSpec[] = prepareRequests(corpus, mulberry32(7), 8192).map(mixHttpRequest);
    const file = join(work, 'mix.json');
    writeFileSync(file, JSON.stringify(specs));
    process.stderr.write(`starting tidal serve --demo (${items} items)...\n`);
    server = await startServer(items, workers);
    const report = new Report('client-cost', opts);
    report.line(
      `tidal serve --demo ${items} items, ${workers} workers; open loop, ${rounds} rounds of ${ms} ms per rate and client after a warm-up.`,
    );
    report.line();
    const results = new Map<string, Measured[]>();
    for (let r = 0; r <= rounds; r++) {
      for (const rate of rates) {
        for (const client of r % 2 === 0 ? CLIENTS : [...CLIENTS].reverse()) {
          const m = await measure(server.url, file, client, rate, r === 0 ? Math.min(ms, 1500) : ms, 100 + r);
          if (r === 0) continue;
          const key = `${rate} ${client}`;
          results.set(key, [...(results.get(key) ?? []), m]);
          process.stderr.write(`  round ${r} ${rate}/s ${client}: ${m.usPerResponse.toFixed(1)} µs/response, cpu ${(m.cpuShare * 100).toFixed(0)} %, loop p99 ${m.loopP99Ms.toFixed(1)} ms, ${m.perSec.toFixed(0)} responses/s, refused ${(m.refusedShare * 100).toFixed(0)} %, errors ${m.errors} ${m.errorCodes}\n`);
        }
      }
    }
    const rows: string[][] = [];
    for (const rate of rates) {
      const undici = results.get(`${rate} undici`)!;
      const raw = results.get(`${rate} raw`)!;
      const ratios = raw.map((m, i) => m.usPerResponse / undici[i]!.usPerResponse);
      for (const [client, ms] of [['undici', undici], ['raw', raw]] as const) {
        rows.push([
          String(rate),
          client,
          median(ms.map((m) => m.usPerResponse)).toFixed(1),
          `${Math.min(...ms.map((m) => m.usPerResponse)).toFixed(1)}–${Math.max(...ms.map((m) => m.usPerResponse)).toFixed(1)}`,
          `${Math.round(median(ms.map((m) => m.cpuShare)) * 100)} %`,
          median(ms.map((m) => m.loopP99Ms)).toFixed(1),
          median(ms.map((m) => m.perSec)).toFixed(0),
          `${Math.round(median(ms.map((m) => m.refusedShare)) * 100)} %`,
          client === 'raw' ? `${median(ratios).toFixed(2)}× (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})` : '1',
        ]);
      }
    }
    report.table('', ['offered/s', 'client', 'generator µs / response', 'range', 'generator CPU (of a core)', 'loop delay p99 ms', 'responses/s', 'refused', '× undici, per round'], rows);
    report.line(`load average at the end: ${loadAverage()}`);
    report.finish();
  } finally {
    if (server !== null) {
      server.child.kill('SIGTERM');
      await Promise.race([server.exited, new Promise((r) => setTimeout(r, 30_000).unref())]);
      if (server.child.exitCode === null) server.child.kill('SIGKILL');
    }
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
