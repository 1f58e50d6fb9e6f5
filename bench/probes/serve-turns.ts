/**
 * Two builds of `tidal serve` side by side on one read type of the personal mix at one level: this
 * tree and `--baseline DIR` (another built checkout with its node_modules), each started once
 * (`--demo`, `--items` items, one acceptor thread, `--users` users built through the routes), then
 * a closed loop of `--closed` against each in turn, the first alternating by round, `--rounds`
 * rounds of `--seconds` s, every request drawn afresh from the mix's generator (personal-mix.ts,
 * the type and level forced). Reports the server process's CPU per response (every thread, /proc
 * schedstat) in each round and their medians: what a change of a few per cent costs or saves,
 * which one run per tree cannot tell on a shared machine (two processes of one tree differ by more).
 * Run it with the Node that serves: `node scripts/node24.mjs run -- node
 * bench/probes/dist/probes/serve-turns.js --baseline DIR --type following`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Corpus } from '../src/corpus.js';
import { Report, loadAverage, parseOptions } from '../src/harness/index.js';
import { LEVEL_NAMES, PERSONAL_READS, personalSpec } from '../src/serve/personal-mix.js';
import { buildUsers } from '../src/serve/personal-users.js';
import { closedLoop, measuredLoop } from '../src/serve/spawn-loadgen.js';

const READS = Object.keys(PERSONAL_READS);

const opts = parseOptions('serve-turns', {
  baseline: { type: 'string', default: '', description: 'the other built checkout (required)' },
  type: { type: 'string', default: 'for_you', description: `the read type: ${READS.join(', ')}` },
  level: { type: 'string', default: 'NoDiversity', description: `the level: ${LEVEL_NAMES.join(', ')}` },
  items: { type: 'int', default: 100_000, description: "the demo corpus's items" },
  users: { type: 'int', default: 10_000, description: 'users built through the routes' },
  closed: { type: 'int', default: 16, description: 'requests in flight' },
  seconds: { type: 'int', default: 5, description: 'seconds per tree and round' },
  rounds: { type: 'int', default: 4, description: 'rounds over both trees' },
});

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..', '..', '..');
if (opts.baseline === '') throw new Error('--baseline DIR is required: the other built checkout');
if (!READS.includes(opts.type)) throw new Error(`--type must be one of ${READS.join(', ')}, got ${opts.type}`);
if (!(LEVEL_NAMES as readonly string[]).includes(opts.level))
  throw new Error(`--level must be one of ${LEVEL_NAMES.join(', ')}, got ${opts.level}`);

interface Server {
  name: string;
  child: ChildProcess;
  url: string;
  us: number[];
}

function start(name: string, root: string): Promise<Server> {
  const cli = join(root, 'packages', 'tidal-serve', 'dist', 'cli.js');
  const args = [
    cli,
    'serve',
    '--demo',
    '--demo-items',
    String(opts.items),
    '--port',
    '0',
    '--workers',
    '2',
    '--acceptors',
    '1',
    '--wait-for-ann',
  ];
  const child = spawn(process.execPath, args, { cwd: root, stdio: ['ignore', 'pipe', 'ignore'] });
  return new Promise((done, fail) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      const m = /tidal serve listening on (http:\/\/\S+)/.exec(out);
      if (m !== null) done({ name, child, url: m[1]!, us: [] });
    });
    child.once('exit', (code) => fail(new Error(`${name}: tidal serve exited with ${code}`)));
  });
}

async function ready(url: string): Promise<void> {
  for (;;) {
    const r = await fetch(`${url}/readyz`).catch(() => null);
    if (r?.status === 200) return;
    await new Promise((res) => setTimeout(res, 250));
  }
}

const report = new Report('serve-turns', opts);
const dir = mkdtempSync(join(tmpdir(), 'tidal-serve-turns-'));
const servers: Server[] = [];
try {
  const corpus = new Corpus({ items: opts.items, dims: 128, seed: 42 });
  const spec = { ...personalSpec(corpus, opts.users, 0), only: opts.type, level: opts.level } as ReturnType<typeof personalSpec>;
  const requests = join(dir, 'requests.json');
  writeFileSync(requests, JSON.stringify(spec));
  for (const [name, root] of [
    ['this tree', ROOT],
    ['baseline', resolve(opts.baseline)],
  ] as const) {
    process.stderr.write(`${name}: loading ${opts.items} items and ${opts.users} users\n`);
    const s = await start(name, root);
    servers.push(s);
    await ready(s.url);
    await buildUsers(s.url, corpus, spec, 4);
  }
  for (const s of servers) await closedLoop(s.url, requests, opts.closed, 4000, 1);
  for (let round = 0; round < opts.rounds; round++) {
    process.stderr.write(`round ${round + 1} (load average ${loadAverage()})\n`);
    for (let i = 0; i < servers.length; i++) {
      const s = servers[(i + round) % servers.length]!;
      s.us.push((await measuredLoop(s.child.pid!, s.url, requests, opts.closed, opts.seconds * 1000, 10 + round)).us);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  report.table(
    `${opts.type} at ${opts.level}: server CPU µs per response`,
    ['tree', 'median', 'each round'],
    servers.map((s) => [s.name, median(s.us).toFixed(0), s.us.map((x) => x.toFixed(0)).join(', ')]),
  );
  report.line(`Node ${process.version}; baseline ${opts.baseline}; load average at the end ${loadAverage()}.`);
  report.set('results', Object.fromEntries(servers.map((s) => [s.name, s.us])));
  report.finish();
} finally {
  for (const s of servers) s.child.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}
