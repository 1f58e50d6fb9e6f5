/**
 * `npm run bench:serve`: tidal serve under open-loop overload, with the load generator in another
 * process. Starts `tidal serve --demo` on the bench corpus (a child process, loopback, an ephemeral
 * port), measures the capacity C with a closed loop kept below the first degradation threshold (so
 * C is Full's capacity), then offers 1×, 3×, 10× and 0.5× C as Poisson arrivals
 * (bench/src/serve/loadgen.ts, a separate process) with latency timed from each request's schedule.
 * The same phases run again against a server started with `--no-admission` (tidal's own load
 * management stays; the HTTP chain is off), and against one with the chain on and its query workers
 * at the HTTP thread's own priority (`--worker-nice 0`), both at the first server's C. While each phase runs, the server's /stats, its RSS and
 * its main thread's CPU time are sampled.
 *
 * Writes the tables into docs/serve.md (between the bench:serve markers), the chart into
 * docs/serve.svg and the raw results into bench/results/serve.json.
 *
 * The generator's client is `--client raw` (the default: node:net sockets, ≈ 0.4× undici's CPU per
 * request, measured by bench/src/serve/client-cost.ts) or `--client undici`.
 *
 *     npm run bench:serve -- [--items 100000] [--seconds 10] [--closed 16] [--workers 2] [--client raw|undici] [--profile [--profile-at 3|10]] [--capacity N]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InvalidInputError } from 'tidal-core';
import { Corpus } from '../corpus.js';
import { mixHttpRequest, prepareRequests } from '../query-mix.js';
import { mulberry32 } from '../random.js';
import { describeMachine, fmtInt, intFlag, machine, markdownTable } from '../stats.js';
import type { LoadgenClient, LoadResult, RequestSpec } from './loadgen.js';
import { runLoadgen } from './spawn-loadgen.js';
import { summarizeProfile, type ProfileSummary } from './profile.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..', '..');
const CLI = join(ROOT, 'packages', 'tidal-serve', 'dist', 'cli.js');
const LEVEL_HEADER = 'x-tidal-degradation-level';
const LEVELS = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const;
/** Clock ticks per second of /proc's CPU times (CLK_TCK, 100 on Linux). */
const TICKS = 100;

interface Flags {
  items: number;
  seconds: number;
  closed: number;
  workers: number;
  distinct: number;
  profile: boolean;
  /** The phase (its factor of C) whose main-thread profile is reported. */
  profileAt: number;
  skipOff: boolean;
  skipNice0: boolean;
  /** C given with `--capacity` (0: measured by the closed loop). */
  capacity: number;
  client: LoadgenClient;
}

function parseFlags(argv: readonly string[]): Flags {
  return {
    items: intFlag(argv, 'items', 100_000),
    seconds: intFlag(argv, 'seconds', 10),
    closed: intFlag(argv, 'closed', 16),
    workers: intFlag(argv, 'workers', 2),
    distinct: intFlag(argv, 'distinct', 8192),
    profile: argv.includes('--profile'),
    profileAt: intFlag(argv, 'profile-at', 3),
    skipOff: argv.includes('--skip-off'),
    skipNice0: argv.includes('--skip-nice0'),
    // A fixed C (requests/s) instead of the closed loop's: two builds compared at the same offered rates.
    capacity: intFlag(argv, 'capacity', 0),
    client: clientFlag(argv),
  };
}

function clientFlag(argv: readonly string[]): LoadgenClient {
  const i = argv.findIndex((a) => a === '--client' || a.startsWith('--client='));
  if (i < 0) return 'raw';
  const value = argv[i]!.startsWith('--client=') ? argv[i]!.slice('--client='.length) : argv[i + 1];
  if (value !== 'raw' && value !== 'undici') throw new InvalidInputError('--client', 'raw or undici', value);
  return value;
}

// ---------------------------------------------------------------------------------------------
// The server child and what is sampled from it
// ---------------------------------------------------------------------------------------------

interface Server {
  child: ChildProcess;
  url: string;
  pid: number;
  exited: Promise<number | null>;
}

async function startServer(flags: Flags, variant: Variant, profileDir: string | null): Promise<Server> {
  const args = [
    ...(profileDir === null ? [] : ['--cpu-prof', '--cpu-prof-dir', profileDir]),
    CLI,
    'serve',
    '--demo',
    '--demo-items',
    String(flags.items),
    '--port',
    '0',
    '--workers',
    String(flags.workers),
    ...variant.args,
  ];
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let lastProgress = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    // The demo loader's progress line; echo the latest one so a long load shows it is moving.
    const line = chunk.split(/[\r\n]/).filter((l) => l.trim() !== '').pop();
    if (line !== undefined && line !== lastProgress) {
      lastProgress = line;
      process.stderr.write(`  server: ${line}\n`);
    }
  });
  const url = await new Promise<string>((resolve, reject) => {
    let buffered = '';
    const timer = setTimeout(() => reject(new Error('tidal serve did not start within 10 minutes')), 600_000);
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const m = /tidal serve listening on (http:\/\/\S+)/.exec(buffered);
      if (m !== null) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`tidal serve exited with ${code} before listening`));
    });
  });
  await waitReady(url);
  return { child, url, pid: child.pid!, exited };
}

async function waitReady(url: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(`${url}/readyz`);
      if (r.status === 200) return;
    } catch {
      // not accepting yet
    }
    await sleep(100);
  }
  throw new Error('tidal serve never became ready');
}

async function stopServer(server: Server): Promise<number | null> {
  server.child.kill('SIGTERM');
  const code = await Promise.race([server.exited, sleep(30_000).then(() => 'timeout' as const)]);
  if (code === 'timeout') {
    server.child.kill('SIGKILL');
    return server.exited;
  }
  return code;
}

/** utime + stime of the process and of its main thread, in clock ticks; RSS in bytes. */
function procSample(pid: number): { processTicks: number; mainTicks: number; rss: number } {
  const ticks = (stat: string): number => {
    // Fields after the command name (which may hold spaces) start at field 3; utime is 14, stime 15.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(rest[11]) + Number(rest[12]);
  };
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return {
    processTicks: ticks(readFileSync(`/proc/${pid}/stat`, 'utf8')),
    mainTicks: ticks(readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8')),
    rss: rssKb * 1024,
  };
}

interface Tick {
  /** `performance.now()` of this process when the sample came back. */
  t: number;
  level: string;
  inFlight: number;
  rss: number;
}

/** One reading of the server's CPU counters (see {@link cpuSampler}). */
interface CpuTick {
  /** `performance.now()` of this process when read. */
  t: number;
  /** The whole process's utime + stime, in clock ticks. */
  processTicks: number;
  /** The main thread's time on a CPU and waiting on a run queue, in ns (/proc/…/schedstat). */
  mainRunNs: number;
  mainWaitNs: number;
}

function cpuTick(pid: number): CpuTick {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [run, wait] = readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').trim().split(' ');
  return { t: performance.now(), processTicks: Number(rest[11]) + Number(rest[12]), mainRunNs: Number(run), mainWaitNs: Number(wait) };
}

/**
 * Reads the server's CPU counters every `everyMs` on a timer of this process (not through the
 * server), so a phase's CPU shares can be taken over its schedule alone: the generator's start,
 * its preconnect and its grace period would otherwise dilute them.
 */
function cpuSampler(pid: number, everyMs: number): { stop(): CpuTick[] } {
  const ticks: CpuTick[] = [cpuTick(pid)];
  const timer = setInterval(() => {
    try {
      ticks.push(cpuTick(pid));
    } catch {
      // The server exited; the phase's own result says so.
    }
  }, everyMs);
  return {
    stop() {
      clearInterval(timer);
      ticks.push(cpuTick(pid));
      return ticks;
    },
  };
}

/** CPU shares between the readings nearest to `from` and `to` (the schedule's start and end). */
function cpuOver(ticks: readonly CpuTick[], from: number, to: number): { main: number; mainWait: number; process: number } {
  const nearest = (t: number): CpuTick => ticks.reduce((best, x) => (Math.abs(x.t - t) < Math.abs(best.t - t) ? x : best));
  const a = nearest(from);
  const b = nearest(to);
  const s = (b.t - a.t) / 1000;
  if (s <= 0) return { main: 0, mainWait: 0, process: 0 };
  return {
    main: (b.mainRunNs - a.mainRunNs) / 1e9 / s,
    mainWait: (b.mainWaitNs - a.mainWaitNs) / 1e9 / s,
    process: (b.processTicks - a.processTicks) / TICKS / s,
  };
}

/** Samples /stats and /proc every `everyMs` until stopped. */
function sampler(server: Server, everyMs: number): { stop(): Promise<Tick[]> } {
  const ticks: Tick[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        const r = await fetch(`${server.url}/stats`);
        const body = (await r.json()) as { sample?: { level?: string }; server?: { inFlight?: number } };
        ticks.push({
          t: performance.now(),
          level: body.sample?.level ?? '?',
          inFlight: body.server?.inFlight ?? 0,
          rss: procSample(server.pid).rss,
        });
      } catch {
        // A sample lost to an overloaded loopback is a gap, not a failure of the run.
      }
      await sleep(everyMs);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return ticks;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Phases
// ---------------------------------------------------------------------------------------------

interface PhaseOutcome {
  name: string;
  factor: number | null;
  load: LoadResult;
  /** The server's main thread on a CPU, as a share of one core over the schedule. */
  mainCpu: number;
  /** The server's main thread runnable but waiting for a CPU, as a share of the schedule's time. */
  mainWait: number;
  /** The whole server process (main thread, query workers, writer), in cores over the schedule. */
  processCpu: number;
  rssStart: number;
  rssEnd: number;
  ticks: Tick[];
  /** `performance.now()` here when the generator's schedule ended (its last arrival). */
  scheduleEndAt: number;
  /** The phase's start and end on the system's monotonic clock, in µs (what CPU profiles time samples by). */
  monotonicUs: [number, number];
  /** For the phase after the overload: ms from the overload's last arrival until the level was Full for good. */
  backToFullMs: number | null;
}


async function phase(
  flags: Flags,
  server: Server,
  requestsFile: string,
  name: string,
  factor: number | null,
  mode: { rate: number } | { closed: number },
  seconds: number,
  seed: number,
): Promise<PhaseOutcome> {
  const before = procSample(server.pid);
  const startedUs = process.hrtime.bigint() / 1000n;
  const ticks = sampler(server, 250);
  const cpu = cpuSampler(server.pid, 100);
  // Enough connections that no arrival waits for one while the server holds the others (at
  // 0.5 s each, Little's law): a generator-side wait would be billed to the server's latency.
  const connections = 'rate' in mode ? Math.min(8192, Math.max(512, Math.ceil(mode.rate * 0.5))) : mode.closed;
  const { result: load, exitedAt } = await runLoadgen(
    [
      '--url',
      server.url,
      '--requests',
      requestsFile,
      ...('rate' in mode ? ['--rate', String(Math.round(mode.rate))] : ['--closed', String(mode.closed)]),
      '--duration-ms',
      String(seconds * 1000),
      '--grace-ms',
      '3000',
      '--seed',
      String(seed),
      '--count-header',
      LEVEL_HEADER,
      '--client',
      flags.client,
      ...('rate' in mode ? ['--connections', String(connections)] : []),
      // Every connection open before the schedule starts, as a load balancer holds its pool: a
      // burst of thousands of new connections at the start of a phase overflowed the server's
      // accept queue (the kernel's ListenOverflows counter), and each dropped SYN cost its
      // request a 1 s retransmission, billed to the server's latency.
      ...(flags.client === 'raw' ? ['--preconnect', String(connections)] : []),
    ],
    (seconds + 60) * 1000,
  );
  const series = await ticks.stop();
  const cpuTicks = cpu.stop();
  const after = procSample(server.pid);
  // The generator's run ends `elapsedMs` after its start, and its schedule `durationMs` after it.
  const scheduleEndAt = exitedAt - load.elapsedMs + load.durationMs;
  const shares = cpuOver(cpuTicks, scheduleEndAt - load.durationMs, scheduleEndAt);
  const outcome: PhaseOutcome = {
    name,
    factor,
    load,
    mainCpu: shares.main,
    mainWait: shares.mainWait,
    processCpu: shares.process,
    rssStart: before.rss,
    rssEnd: after.rss,
    ticks: series,
    scheduleEndAt,
    monotonicUs: [Number(startedUs), Number(process.hrtime.bigint() / 1000n)],
    backToFullMs: null,
  };
  process.stderr.write(`  ${describePhase(outcome)}\n`);
  return outcome;
}

/**
 * Ms from the overload's last arrival until the level was Full and stayed Full to the end of the
 * next phase, from both phases' samples; `null` if it never settled.
 */
function backToFull(overload: PhaseOutcome, next: PhaseOutcome): number | null {
  const series = [...overload.ticks, ...next.ticks].filter((t) => t.t >= overload.scheduleEndAt);
  let i = series.length;
  while (i > 0 && series[i - 1]!.level === 'Full') i--;
  if (i === series.length) return null;
  // The level was already Full at the first sample after the load dropped: report that sample's delay.
  return Math.max(0, Math.round(series[i]!.t - overload.scheduleEndAt));
}

/** A latency in ms; the generator reports an empty sample's percentiles as null. */
function ms(v: number | null, digits = 0): string {
  return v === null || !Number.isFinite(v) ? '–' : v.toFixed(digits);
}

function share(part: number, whole: number): string {
  return whole === 0 ? '–' : `${Math.round((100 * part) / whole)} %`;
}

function refusedCount(r: LoadResult): number {
  return Object.values(r.refusalsByCode).reduce((a, b) => a + b, 0);
}

function describePhase(p: PhaseOutcome): string {
  const r = p.load;
  return (
    `${p.name.padEnd(12)} offered ${fmtInt(r.offeredRatePerSec)}/s  goodput ${fmtInt(r.goodputPerSec)}/s (${share(r.goodputPerSec, r.offeredRatePerSec)})  ` +
    `refused ${fmtInt(refusedCount(r))}  p99 ${ms(r.latency.ok.p99)} ms  refusal p99 ${ms(r.latency.refused.p99, 1)} ms  main CPU ${Math.round(p.mainCpu * 100)} % (waiting ${Math.round(p.mainWait * 100)} %)  process ${p.processCpu.toFixed(2)} cores`
  );
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

/** One server configuration the phases run against. */
interface Variant {
  /** Short name for the JSON results and the progress lines. */
  name: 'on' | 'off' | 'nice0';
  /** The table's heading in docs/serve.md. */
  heading: string;
  /** Flags added to `tidal serve --demo …`. */
  args: string[];
}

const VARIANTS: Record<Variant['name'], Variant> = {
  on: { name: 'on', heading: 'Admission chain on (the default)', args: [] },
  off: { name: 'off', heading: 'Admission chain off (`--no-admission`; tidal\'s own load management stays)', args: ['--no-admission'] },
  nice0: { name: 'nice0', heading: 'Admission chain on, query workers at the HTTP thread\'s priority (`--worker-nice 0`)', args: ['--worker-nice', '0'] },
};

interface ServerRun {
  variant: Variant['name'];
  capacity: PhaseOutcome;
  phases: PhaseOutcome[];
  exitCode: number | null;
  profile: ProfileSummary | null;
}

async function runServer(flags: Flags, requestsFile: string, variant: Variant, capacityRate: number | null): Promise<ServerRun> {
  const profileDir = flags.profile && variant.name === 'on' ? mkdtempSync(join(tmpdir(), 'tidal-serve-prof-')) : null;
  process.stderr.write(`starting tidal serve --demo (${fmtInt(flags.items)} items${variant.args.length === 0 ? '' : `, ${variant.args.join(' ')}`})...\n`);
  const server = await startServer(flags, variant, profileDir);
  try {
    // A warm-up the tables leave out: the first seconds after the load (JIT, caches, the OS's pages)
    // would otherwise be billed to whichever server runs first.
    await phase(flags, server, requestsFile, 'warm-up', null, { closed: flags.closed }, Math.min(5, flags.seconds), 10);
    const capacity = await phase(flags, server, requestsFile, 'capacity', null, { closed: flags.closed }, flags.seconds, 11);
    const c = capacityRate ?? capacity.load.goodputPerSec;
    const phases: PhaseOutcome[] = [];
    const plan: [string, number][] = [
      ['1× C', 1],
      ['3× C', 3],
      ['10× C', 10],
      ['0.5× C', 0.5],
    ];
    let seed = 100;
    for (const [name, factor] of plan) phases.push(await phase(flags, server, requestsFile, name, factor, { rate: c * factor }, flags.seconds, seed++));
    const last = phases[phases.length - 1]!;
    last.backToFullMs = backToFull(phases[phases.length - 2]!, last);
    const exitCode = await stopServer(server);
    const profiled = phases.find((p) => p.factor === flags.profileAt) ?? phases.find((p) => p.factor === 3)!;
    const profile = profileDir === null ? null : summarizeProfile(profileDir, [profiled.monotonicUs], 30);
    if (profileDir !== null) rmSync(profileDir, { recursive: true, force: true });
    return { variant: variant.name, capacity, phases, exitCode, profile };
  } catch (err) {
    server.child.kill('SIGKILL');
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

function levelMix(r: LoadResult): string {
  const counts = r.headerCounts ?? {};
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  if (total === 0) return '–';
  return LEVELS.filter((l) => (counts[l] ?? 0) > 0)
    .map((l) => `${l === 'Full' ? 'F' : l === 'ReducedCandidates' ? 'R' : l === 'CoarseAggregates' ? 'C' : 'N'} ${Math.round((100 * (counts[l] ?? 0)) / total)}`)
    .join(' · ');
}

function phaseTable(run: ServerRun): string {
  const rows = [run.capacity, ...run.phases].map((p) => {
    const r = p.load;
    const codes = Object.entries(r.refusalsByCode)
      .sort((a, b) => b[1] - a[1])
      .map(([code, n]) => `${code} ${fmtInt(n)}`)
      .join(', ');
    return [
      p.name,
      fmtInt(r.offeredRatePerSec),
      fmtInt(r.goodputPerSec),
      share(r.goodputPerSec, r.offeredRatePerSec),
      codes === '' ? '0' : codes,
      `${ms(r.latency.ok.p50)} / ${ms(r.latency.ok.p99)}`,
      refusedCount(r) === 0 ? '–' : ms(r.latency.refused.p99, 1),
      levelMix(r),
      `${Math.round(p.mainCpu * 100)} % (${Math.round(p.mainWait * 100)} %)`,
      p.processCpu.toFixed(2),
      r.generator === undefined ? '–' : `${Math.round(r.generator.cpuShare * 100)} % / ${Math.round(r.generator.loopDelayP99Ms)}`,
      `${Math.round(p.rssEnd / 2 ** 20)}`,
      p.backToFullMs === null ? '–' : fmtInt(p.backToFullMs),
    ];
  });
  return markdownTable(
    ['phase', 'offered/s', 'goodput/s', 'of offered', 'refused (by code)', 'ok p50 / p99 ms', 'refusal p99 ms', 'levels %', 'main thread CPU (waiting)', 'process cores', 'generator CPU / lag p99 ms', 'RSS MiB', 'to Full ms'],
    rows,
  );
}

function renderMarkdown(runs: readonly ServerRun[], flags: Flags): string {
  const on = runs[0]!;
  const c = flags.capacity > 0 ? flags.capacity : on.capacity.load.goodputPerSec;
  const lines = [
    `Measured by \`npm run bench:serve\` on ${describeMachine(machine())}: \`tidal serve --demo\` with ${fmtInt(flags.items)} items and ${flags.workers} query workers in one process, the load generator (bench/src/serve/loadgen.ts, \`--client ${flags.client}\`, open-loop Poisson arrivals, latency from each request's scheduled time) in another, both on loopback. ${flags.seconds} s per phase; ${fmtInt(flags.distinct)} distinct requests (the query mix of docs/overload.md). ${flags.capacity > 0 ? `C is fixed at **${fmtInt(c)} requests/s** (\`--capacity\`; the closed loop of ${flags.closed} measured ${fmtInt(on.capacity.load.goodputPerSec)}/s)` : `Capacity C is the goodput of a closed loop of ${flags.closed} (below the first degradation threshold, so C is Full's capacity): **C = ${fmtInt(c)} requests/s**`}. The 1×…0.5× rates are multiples of it.`,
    '',
  ];
  for (const run of runs) lines.push(`### ${VARIANTS[run.variant].heading}`, '', phaseTable(run), '');
  lines.push(
    '"levels %": the share of 2xx responses at each degradation level (F Full, R ReducedCandidates, C CoarseAggregates, N NoDiversity). "main thread CPU": the server\'s main thread on a CPU, as a share of one core over the phase\'s schedule (its first to its last arrival), and in brackets the share of that time it was runnable but waiting for a CPU (/proc schedstat); "process cores": the whole server (main thread, query workers, writer). "generator CPU / lag p99": the load generator\'s CPU as a share of one core, and the p99 of its own event loop\'s delay, which every latency above includes (latency runs from each request\'s scheduled time). "to Full ms": after the 10× phase, time from its last arrival until the level was Full for good (sampled from /stats every 250 ms, so ±250 ms).',
    '',
  );
  if (on.profile !== null) {
    lines.push(`### Where the main thread goes at ${flags.profileAt}× C (\`--profile\`)`, '', `Self time of the server's main thread by function, over the ${fmtInt(on.profile.samples)} CPU-profile samples taken during the ${flags.profileAt}× phase (chain on).`, '', markdownTable(['self time', 'function'], on.profile.top.map((t) => [`${(t.share * 100).toFixed(1)} %`, t.name.replaceAll('|', '\\|')])), '');
  }
  return lines.join('\n');
}

const COLOURS: Record<Variant['name'], string> = { on: '#2a7', off: '#c55', nice0: '#57c' };
const LABELS: Record<Variant['name'], string> = { on: 'chain on', off: 'chain off', nice0: 'chain on, workers nice 0' };

function renderSvg(runs: readonly ServerRun[]): string {
  const on = runs[0]!;
  const W = 760;
  const H = 220;
  const pad = 50;
  const phases = on.phases.map((p) => p.name);
  const bw = (W - 2 * pad) / phases.length;
  const maxRate = Math.max(...runs.flatMap((r) => r.phases.map((p) => p.load.offeredRatePerSec))) * 1.05;
  const y = (v: number) => H - 30 - (v / maxRate) * (H - 60);
  const bars: string[] = [];
  phases.forEach((name, i) => {
    const x0 = pad + i * bw;
    const offered = on.phases[i]!.load.offeredRatePerSec;
    bars.push(`<rect x="${x0 + 4}" y="${y(offered)}" width="${bw - 8}" height="${H - 30 - y(offered)}" fill="#eee" stroke="#999"/>`);
    runs.forEach((r, k) => {
      const g = r.phases[i]!.load.goodputPerSec;
      const w = (bw - 16) / runs.length;
      bars.push(`<rect x="${x0 + 8 + k * w}" y="${y(g)}" width="${w - 2}" height="${H - 30 - y(g)}" fill="${COLOURS[r.variant]}"/>`);
      bars.push(`<text x="${x0 + 8 + k * w + w / 2}" y="${y(g) - 3}" text-anchor="middle">${fmtInt(g)}</text>`);
    });
    bars.push(`<text x="${x0 + bw / 2}" y="${H - 12}" text-anchor="middle">${name} (offered ${fmtInt(offered)}/s)</text>`);
  });
  const legend =
    `<rect x="${pad}" y="8" width="10" height="10" fill="#eee" stroke="#999"/><text x="${pad + 14}" y="17">offered</text>` +
    runs.map((r, k) => `<rect x="${pad + 80 + k * 170}" y="8" width="10" height="10" fill="${COLOURS[r.variant]}"/><text x="${pad + 94 + k * 170}" y="17">goodput, ${LABELS[r.variant]}</text>`).join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">\n<rect width="100%" height="100%" fill="white"/>\n${bars.join('\n')}\n${legend}\n</svg>\n`;
}

function writeDocs(markdown: string, svg: string): void {
  const doc = join(ROOT, 'docs', 'serve.md');
  const begin = '<!-- bench:serve:begin -->';
  const end = '<!-- bench:serve:end -->';
  const block = `${begin}\n${markdown}\n![goodput per phase](serve.svg)\n${end}`;
  const text = existsSync(doc) ? readFileSync(doc, 'utf8') : '# tidal serve\n';
  const next = text.includes(begin) ? text.slice(0, text.indexOf(begin)) + block + text.slice(text.indexOf(end) + end.length) : `${text.trimEnd()}\n\n## Measured under overload\n\n${block}\n`;
  writeFileSync(doc, next);
  writeFileSync(join(ROOT, 'docs', 'serve.svg'), svg);
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help')) {
    process.stdout.write('npm run bench:serve -- [--items N] [--seconds S] [--closed N] [--workers N] [--distinct N] [--client raw|undici] [--profile [--profile-at 3|10]] [--skip-off] [--skip-nice0] [--capacity N]\n');
    return;
  }
  const flags = parseFlags(argv);
  const work = mkdtempSync(join(tmpdir(), 'tidal-bench-serve-'));
  try {
    // The server builds the same corpus (seed 42, 128 dimensions); only its vocabulary and
    // category centroids matter for drawing queries, not its clock.
    const corpus = new Corpus({ items: flags.items, dims: 128, seed: 42 });
    const rand = mulberry32(7);
    const specs: RequestSpec[] = prepareRequests(corpus, rand, flags.distinct).map(mixHttpRequest);
    const requestsFile = join(work, 'mix.json');
    writeFileSync(requestsFile, JSON.stringify(specs));
    const runs = [await runServer(flags, requestsFile, VARIANTS.on, flags.capacity > 0 ? flags.capacity : null)];
    const c = flags.capacity > 0 ? flags.capacity : runs[0]!.capacity.load.goodputPerSec;
    if (!flags.skipOff) runs.push(await runServer(flags, requestsFile, VARIANTS.off, c));
    if (!flags.skipNice0) runs.push(await runServer(flags, requestsFile, VARIANTS.nice0, c));
    const results = join(ROOT, 'bench', 'results');
    mkdirSync(results, { recursive: true });
    const byName = Object.fromEntries(runs.map((r) => [r.variant, r]));
    writeFileSync(join(results, 'serve.json'), JSON.stringify({ machine: machine(), flags, on: byName.on, off: byName.off ?? null, nice0: byName.nice0 ?? null }, null, 2));
    const md = renderMarkdown(runs, flags);
    writeDocs(md, renderSvg(runs));
    process.stdout.write(`${md}\n`);
    process.stderr.write('wrote docs/serve.md, docs/serve.svg and bench/results/serve.json\n');
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

await main();
