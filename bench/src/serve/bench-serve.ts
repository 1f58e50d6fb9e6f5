/**
 * `npm run bench:serve`: tidal serve under open-loop overload, with the load generator in another
 * process. Starts `tidal serve --demo` on the bench corpus (a child process, loopback, an ephemeral
 * port), measures the capacity C with a closed loop kept below the first degradation threshold (so
 * C is Full's capacity), then offers 1×, 3×, 10× and 0.5× C as Poisson arrivals
 * (bench/src/serve/loadgen.ts, a separate process) with latency timed from each request's schedule.
 * The same phases run against every server of `--variants` (default: the chain on, `--no-admission`,
 * `--worker-nice 0`), all at the first one's C.
 *
 * `--mix default` sends the query mix of docs/overload.md, picked from `--distinct` requests drawn
 * up front. `--mix personal` first builds `--users` users through the server's routes (histories
 * and follows: personal-users.ts), then draws every arrival's request afresh in the generator
 * (personal-mix.ts): for_you, for_you + unseen, following, related, trending, text and hybrid
 * reads, and signals, hides and follows naming users throughout. Either way C is measured only
 * once the server's vector searches use the ANN index (`/stats` `db.vectorSearch`).
 *
 * The whole set runs unpinned and pinned (`--pin both`, the default; `on`, `off`): pinned, the
 * server runs on `--server-cpus` and the generator (and this process) on `--generator-cpus`,
 * through `taskset`, so neither takes CPU from the other; each mode measures its own C. A phase in
 * which the generator fell behind its own schedule is marked INVALID (validity.ts) and its
 * latencies are not reported as the server's. While each phase runs, the server's /stats, its RSS
 * and every thread's CPU time are sampled.
 *
 * Writes the tables into docs/serve.md (between the bench:serve markers), the chart into
 * docs/serve.svg and the raw results into bench/results/serve.json; `--no-docs` leaves docs/ alone,
 * `--json PATH` writes the results elsewhere.
 *
 *     npm run bench:serve -- --help
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InvalidInputError } from 'tidal-core';
import { Corpus } from '../corpus.js';
import { mixHttpRequest, prepareRequests } from '../query-mix.js';
import { mulberry32 } from '../random.js';
import { Report, fmtInt, parseOptionsOrThrow, usage, type OptionSpec } from '../harness/index.js';
import { LOADGEN_DEFAULTS, type LoadgenClient, type RequestSpec } from './loadgen.js';
import { PERSONAL_DEFAULTS, personalSpec, type PersonalMixSpec } from './personal-mix.js';
import { buildUsers } from './personal-users.js';
import { allowedCpus, chooseCpus, formatCpuList, parseCpuList, setAffinity, tasksetAvailable, type PinMode } from './pinning.js';
import { summarizeProfiles } from './profile.js';
import {
  describePhase,
  renderMarkdown,
  renderSvg,
  type FailedRun,
  type PhaseOutcome,
  type PinLabel,
  type PinRun,
  type ServerRun,
  type Tick,
} from './report.js';
import { runLoadgen } from './spawn-loadgen.js';
import { soakRun } from './soak-run.js';
import { measureStages, renderStageRatios, renderStages } from './stages.js';
import { rssOf, startServer, stopServer, waitAnn, type Server } from './server-child.js';
import { readThreads, threadShares, type ThreadTime } from './threads.js';
import { checkThresholds, judgePhase, VALIDITY_DEFAULTS, type ValidityThresholds } from './validity.js';
import { DEFAULT_VARIANTS, parseVariants, resolveRuntime, type ResolvedRuntime, type VariantSpec } from './variants.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..', '..');
const LEVEL_HEADER = 'x-tidal-degradation-level';
/** Clock ticks per second of /proc's CPU times (CLK_TCK, 100 on Linux). */
const TICKS = 100;

interface Flags {
  items: number;
  seconds: number;
  closed: number;
  workers: number;
  distinct: number;
  mix: 'default' | 'personal';
  /** `--mix personal`: users built before the run, and the share of arrivals that are writes. */
  users: number;
  writeShare: number;
  profile: boolean;
  /** The phase (its factor of C) whose main-thread profile is reported. */
  profileAt: number;
  /** C given with `--capacity` (0: measured by the closed loop). */
  capacity: number;
  client: LoadgenClient;
  pin: PinMode;
  serverCpus: number[] | null;
  generatorCpus: number[] | null;
  serverNode: string;
  serverRoot: string;
  variants: VariantSpec[];
  /** The generator's `--late-ms`. */
  lateMs: number;
  validity: ValidityThresholds;
  docs: boolean;
  /** `--stages`: the per-stage CPU matrix instead of the phases, `stageSeconds` per cell. */
  stages: boolean;
  stageSeconds: number;
  stageRounds: number;
  /** `--pool`: the generator's connections in every open-loop phase (0: enough that no arrival waits). */
  pool: number;
  /** `--soak`: one long run per minute instead of the phases (soak-run.ts). */
  soak: boolean;
  duration: number;
  rate: number;
  fraction: number;
  json: string;
}

const FLAGS = {
  items: { type: 'int', default: 100_000, description: 'demo corpus size' },
  seconds: { type: 'int', default: 10, description: 'seconds per phase' },
  'phase-seconds': { type: 'int', default: 0, min: 0, description: 'the same as --seconds' },
  closed: { type: 'int', default: 16, description: 'closed-loop concurrency that measures C' },
  capacity: { type: 'int', default: 0, min: 0, description: "a fixed C in requests/s instead of the closed loop's (0: measured)" },
  workers: { type: 'int', default: 2, description: "the server's query workers" },
  distinct: { type: 'int', default: 8192, description: 'distinct requests in the default mix' },
  mix: {
    type: 'string',
    default: 'default',
    choices: ['default', 'personal'],
    description: "default: docs/overload.md's query mix; personal: users, for_you, following, related ... drawn per arrival, with writes",
  },
  users: {
    type: 'int',
    default: PERSONAL_DEFAULTS.users,
    min: 1,
    description: '--mix personal: users built through the routes before the run',
  },
  'write-share': {
    type: 'number',
    default: PERSONAL_DEFAULTS.writeShare * 100,
    description: '--mix personal: PCT of arrivals that are writes naming a user (signals, hides, follows)',
  },
  client: { type: 'string', default: 'raw', choices: ['raw', 'undici'], description: "the generator's client" },
  profile: {
    type: 'boolean',
    description: "the first server's profile at the phase of --profile-at: its main thread's and its busiest other thread's (an acceptor)",
  },
  'profile-at': { type: 'int', default: 3, description: 'the phase (factor of C) --profile reports' },
  pin: {
    type: 'string',
    default: 'both',
    choices: ['both', 'on', 'off'],
    description: 'unpinned and pinned runs, pinned only, unpinned only',
  },
  'server-cpus': { type: 'string', description: "pinned: the server's CPUs (default: all but the last)" },
  'generator-cpus': { type: 'string', description: "pinned: the generator's CPUs (default: the last); disjoint from the server's" },
  'server-node': { type: 'string', description: "the node binary of the server (default: this process's)" },
  'server-root': { type: 'string', description: 'the tree whose packages/tidal-serve/dist/cli.js runs (default: this tree)' },
  variants: {
    type: 'string',
    default: DEFAULT_VARIANTS,
    description:
      "servers to compare, ';'-separated [NAME=][RUNTIME:](PRESET|FLAGS), e.g. 'on;a2=--acceptors 2;n24=node24:--acceptors 2'; " +
      'presets on, off (--no-admission), nice0 (--worker-nice 0); runtimes default, node24 (node scripts/node24.mjs which / root)',
  },
  'skip-off': { type: 'boolean', description: 'drop the off preset from the list' },
  'skip-nice0': { type: 'boolean', description: 'drop the nice0 preset from the list' },
  'late-ms': {
    type: 'number',
    default: LOADGEN_DEFAULTS.lateMs,
    description: 'a send more than MS after its schedule is late (> 0, ≤ 60000)',
  },
  'max-late-share': {
    type: 'number',
    default: VALIDITY_DEFAULTS.maxLateShare * 100,
    description: "INVALID when more than PCT % of a phase's sends are late (≤ 100)",
  },
  'max-lag-ms': {
    type: 'number',
    default: VALIDITY_DEFAULTS.maxLagP99Ms,
    description: "INVALID when the generator's event-loop lag p99 is above MS (≤ 60000)",
  },
  'no-docs': { type: 'boolean', description: 'do not write docs/serve.md and docs/serve.svg' },
  stages: {
    type: 'boolean',
    description:
      "with --mix personal: instead of the phases, each read type at each level forced (`level` in the body), a closed loop of --closed each, and the server's CPU µs per request by stage (TIDAL_STAGE_TIMES=wall); the first variant only; never writes docs/",
  },
  'stage-seconds': { type: 'int', default: 3, min: 1, description: '--stages: seconds per type and level in each round' },
  'stage-rounds': {
    type: 'int',
    default: 2,
    min: 1,
    description: '--stages: rounds over every type and level, the levels rotated by round and type; a cell reports its rounds together',
  },
  pool: {
    type: 'int',
    default: 0,
    min: 0,
    description:
      'the generator keeps at most N keep-alive connections (opened before each phase; --soak opens them as needed); an arrival that finds them busy waits for one, billed from its schedule (0: min(8192, max(512, rate × 0.5)), so none waits)',
  },
  soak: {
    type: 'boolean',
    description:
      'instead of the phases, the personalized mix at a steady rate for --duration s on the first server, reported per minute (p50/p99, refusals, levels, RSS) with a verdict; writes bench/results/serve-soak.json, never docs/',
  },
  duration: { type: 'int', default: 600, min: 60, description: '--soak: seconds (≤ 3600)' },
  rate: { type: 'number', default: 0, description: '--soak: requests/s (0: --fraction × C, C measured once the ANN index is in use)' },
  fraction: { type: 'number', default: 0.7, description: '--soak: the share of C offered when --rate is 0' },
} as const satisfies Record<string, OptionSpec>;

function atMost(flag: string, n: number, max: number): number {
  if (n > max) throw new InvalidInputError(flag, `a number from 0 to ${max}`, n);
  return n;
}

function positive(flag: string, n: number): number {
  if (!(n > 0)) throw new InvalidInputError(flag, 'a number > 0', n);
  return n;
}

function parseFlags(argv: readonly string[]): Flags {
  const o = parseOptionsOrThrow(FLAGS, argv);
  const cpus = (name: 'server-cpus' | 'generator-cpus'): number[] | null => {
    const raw = o[name];
    return raw === undefined ? null : parseCpuList(`--${name}`, raw);
  };
  let variants = parseVariants(o.variants);
  if (o['skip-off']) variants = variants.filter((v) => v.name !== 'off');
  if (o['skip-nice0']) variants = variants.filter((v) => v.name !== 'nice0');
  if (variants.length === 0) throw new InvalidInputError('--variants', 'at least one server left after --skip-off/--skip-nice0', '');
  // A soak is the personalized mix: its writes name users throughout.
  if (o.soak && o.mix !== 'personal' && argv.some((a) => a === '--mix' || a.startsWith('--mix=')))
    throw new InvalidInputError('--mix', 'personal with --soak', o.mix);
  if (o.soak && o.stages) throw new InvalidInputError('--soak', 'given without --stages', true);
  return {
    items: o.items,
    seconds: o['phase-seconds'] > 0 && !argv.some((a) => a === '--seconds' || a.startsWith('--seconds=')) ? o['phase-seconds'] : o.seconds,
    closed: o.closed,
    workers: o.workers,
    distinct: o.distinct,
    mix: o.soak ? 'personal' : (o.mix as Flags['mix']),
    users: o.users,
    writeShare: atMost('--write-share', o['write-share'], 100) / 100,
    profile: o.profile,
    profileAt: o['profile-at'],
    // A fixed C (requests/s) instead of the closed loop's: two builds compared at the same offered rates.
    capacity: o.capacity,
    client: o.client as LoadgenClient,
    pin: o.pin as PinMode,
    serverCpus: cpus('server-cpus'),
    generatorCpus: cpus('generator-cpus'),
    serverNode: o['server-node'] ?? process.execPath,
    serverRoot: resolve(o['server-root'] ?? ROOT),
    variants,
    lateMs: positive('--late-ms', atMost('--late-ms', o['late-ms'], 60_000)),
    validity: checkThresholds({
      maxLagP99Ms: atMost('--max-lag-ms', o['max-lag-ms'], 60_000),
      maxLateShare: atMost('--max-late-share', o['max-late-share'], 100) / 100,
    }),
    docs: !o['no-docs'] && !o.stages && !o.soak,
    stages: o.stages,
    stageSeconds: o['stage-seconds'],
    stageRounds: o['stage-rounds'],
    pool: atMost('--pool', o.pool, LOADGEN_DEFAULTS.maxConnections),
    soak: o.soak,
    duration: atMost('--duration', o.duration, 3600),
    rate: atMost('--rate', o.rate, LOADGEN_DEFAULTS.maxRate),
    fraction: positive('--fraction', atMost('--fraction', o.fraction, 10)),
    // Each kind of run its own file: serve.json, serve-personal.json, serve-stages.json, serve-soak.json.
    json:
      o.json === undefined
        ? join(
            ROOT,
            'bench',
            'results',
            o.soak ? 'serve-soak.json' : o.stages ? 'serve-stages.json' : o.mix === 'personal' ? 'serve-personal.json' : 'serve.json',
          )
        : resolve(o.json),
  };
}

// ---------------------------------------------------------------------------------------------
// The server child and what is sampled from it
// ---------------------------------------------------------------------------------------------

/** One reading of the server's CPU counters (see {@link cpuSampler}). */
interface CpuTick {
  /** `performance.now()` of this process when read. */
  t: number;
  /** The whole process's utime + stime, in clock ticks. */
  processTicks: number;
  /** Every thread's run and wait time; the main thread's tid is the pid. */
  threads: ThreadTime[];
}

function cpuTick(pid: number): CpuTick {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { t: performance.now(), processTicks: Number(rest[11]) + Number(rest[12]), threads: readThreads(pid) };
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
      try {
        ticks.push(cpuTick(pid));
      } catch {
        // as above
      }
      return ticks;
    },
  };
}

function nearest(ticks: readonly CpuTick[], t: number): CpuTick {
  return ticks.reduce((best, x) => (Math.abs(x.t - t) < Math.abs(best.t - t) ? x : best));
}

/** CPU shares between the readings nearest to `from` and `to` (the schedule's start and end). */
function cpuOver(pid: number, ticks: readonly CpuTick[], from: number, to: number) {
  const a = nearest(ticks, from);
  const b = nearest(ticks, to);
  const s = (b.t - a.t) / 1000;
  const main = (x: CpuTick) => x.threads.find((t) => t.tid === pid) ?? { runNs: 0, waitNs: 0 };
  if (s <= 0) return { main: 0, mainWait: 0, process: 0, threads: [] };
  return {
    main: (main(b).runNs - main(a).runNs) / 1e9 / s,
    mainWait: (main(b).waitNs - main(a).waitNs) / 1e9 / s,
    process: (b.processTicks - a.processTicks) / TICKS / s,
    threads: threadShares(pid, a.threads, b.threads, s).slice(0, 8),
  };
}

/** The main thread's on-CPU µs between the readings nearest to `from` and `to`. */
function mainUsOver(pid: number, ticks: readonly CpuTick[], from: number, to: number): number {
  const run = (x: CpuTick) => x.threads.find((t) => t.tid === pid)?.runNs ?? 0;
  return (run(nearest(ticks, to)) - run(nearest(ticks, from))) / 1000;
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
          rss: rssOf(server.pid),
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

interface Context {
  flags: Flags;
  requestsFile: string;
  /** `--mix personal`: the corpus and the mix, to build the users on each server. */
  personal: { corpus: Corpus; spec: PersonalMixSpec } | null;
  /** The generator's CPUs when pinned. */
  generatorCpus: number[] | null;
}

async function phase(
  ctx: Context,
  server: Server,
  name: string,
  factor: number | null,
  mode: { rate: number } | { closed: number },
  seconds: number,
  seed: number,
): Promise<PhaseOutcome> {
  const { flags } = ctx;
  const rssStart = rssOf(server.pid);
  const startedUs = process.hrtime.bigint() / 1000n;
  const ticks = sampler(server, 250);
  const cpu = cpuSampler(server.pid, 100);
  // `--pool N`: a client's bounded pool, whose waits are billed from the schedule (and reported
  // apart: `poolWait`, refusal latency from the send). Otherwise enough connections that no
  // arrival waits for one while the server holds the others (at 0.5 s each, Little's law).
  const connections =
    'rate' in mode ? (flags.pool > 0 ? flags.pool : Math.min(8192, Math.max(512, Math.ceil(mode.rate * 0.5)))) : mode.closed;
  const { result: load, exitedAt } = await runLoadgen(
    [
      '--url',
      server.url,
      '--requests',
      ctx.requestsFile,
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
      '--late-ms',
      String(flags.lateMs),
      ...('rate' in mode ? ['--connections', String(connections)] : []),
      // Every connection open before the schedule starts, as a load balancer holds its pool: a
      // burst of thousands of new connections at the start of a phase overflowed the server's
      // accept queue (the kernel's ListenOverflows counter), and each dropped SYN cost its
      // request a 1 s retransmission, billed to the server's latency.
      ...(flags.client === 'raw' ? ['--preconnect', String(connections)] : []),
    ],
    (seconds + 60) * 1000,
    ctx.generatorCpus,
  );
  const series = await ticks.stop();
  const cpuTicks = cpu.stop();
  // The generator's run ends `elapsedMs` after its start (its last response), and its schedule
  // `durationMs` after it; its exit follows the last response by a few ms.
  const startAt = exitedAt - load.elapsedMs;
  const scheduleEndAt = startAt + load.durationMs;
  const shares = cpuOver(server.pid, cpuTicks, startAt, scheduleEndAt);
  const responses = load.completed;
  const outcome: PhaseOutcome = {
    name,
    factor,
    load,
    mainCpu: shares.main,
    mainWait: shares.mainWait,
    processCpu: shares.process,
    mainUsPerResponse: responses > 0 ? mainUsOver(server.pid, cpuTicks, startAt, exitedAt) / responses : null,
    threads: shares.threads,
    validity: judgePhase(load, flags.validity),
    rssStart,
    rssEnd: rssOf(server.pid),
    ticks: series,
    scheduleEndAt,
    monotonicUs: [Number(startedUs), Number(process.hrtime.bigint() / 1000n)],
    backToFullMs: null,
  };
  process.stderr.write(`  ${describePhase(outcome, process.stderr.isTTY === true)}\n`);
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

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

async function runServer(
  ctx: Context,
  pin: PinLabel,
  variant: VariantSpec,
  runtime: ResolvedRuntime,
  serverCpus: number[] | null,
  capacityRate: number | null,
  profile: boolean,
): Promise<ServerRun> {
  const { flags } = ctx;
  const profileDir = profile ? mkdtempSync(join(tmpdir(), 'tidal-serve-prof-')) : null;
  process.stderr.write(
    `starting ${variant.name}: tidal serve --demo (${fmtInt(flags.items)} items${variant.args.length === 0 ? '' : `, ${variant.args.join(' ')}`}; ${runtime.nodeVersion}${serverCpus === null ? '' : `, CPU ${formatCpuList(serverCpus)}`})...\n`,
  );
  const server = await startServer(flags, variant, runtime, serverCpus, profileDir);
  try {
    const cpusAllowed = formatCpuList(allowedCpus(server.pid));
    if (ctx.personal !== null) {
      const built = await buildUsers(server.url, ctx.personal.corpus, ctx.personal.spec, PERSONAL_DEFAULTS.follows);
      process.stderr.write(
        `  built ${fmtInt(built.users)} users, ${fmtInt(built.signals)} signals naming them, ${fmtInt(built.follows)} follows through the routes (${(built.ms / 1000).toFixed(1)} s)\n`,
      );
    }
    await waitAnn(server.url);
    // A warm-up the tables leave out: the first seconds after the load (JIT, caches, the OS's pages)
    // would otherwise be billed to whichever server runs first.
    await phase(ctx, server, 'warm-up', null, { closed: flags.closed }, Math.min(5, flags.seconds), 10);
    const capacity = await phase(ctx, server, 'capacity', null, { closed: flags.closed }, flags.seconds, 11);
    const c = capacityRate ?? capacity.load.goodputPerSec;
    if (!(c > 0)) throw new Error(`the closed loop measured no capacity (goodput ${capacity.load.goodputPerSec}/s)`);
    const phases: PhaseOutcome[] = [];
    const plan: [string, number][] = [
      ['1× C', 1],
      ['3× C', 3],
      ['10× C', 10],
      ['0.5× C', 0.5],
    ];
    let seed = 100;
    for (const [name, factor] of plan) phases.push(await phase(ctx, server, name, factor, { rate: c * factor }, flags.seconds, seed++));
    const last = phases[phases.length - 1]!;
    last.backToFullMs = backToFull(phases[phases.length - 2]!, last);
    const exitCode = await stopServer(server);
    const profiled = phases.find((p) => p.factor === flags.profileAt) ?? phases.find((p) => p.factor === 3)!;
    const profiles = profileDir === null ? [] : summarizeProfiles(profileDir, [profiled.monotonicUs], 30);
    return { pin, variant, runtime, serverCpus: cpusAllowed, c, capacity, phases, exitCode, profiles };
  } catch (err) {
    server.child.kill('SIGKILL');
    throw err;
  } finally {
    if (profileDir !== null) rmSync(profileDir, { recursive: true, force: true });
  }
}

/** Every variant once, in one pin mode, at the C of the first that runs. */
async function runPinMode(ctx: Context, pin: PinLabel, cpus: { server: number[]; generator: number[] } | null): Promise<PinRun> {
  const { flags } = ctx;
  process.stderr.write(
    `\n== ${pin}${cpus === null ? '' : `: server on CPU ${formatCpuList(cpus.server)}, generator on CPU ${formatCpuList(cpus.generator)}`} ==\n`,
  );
  const original = allowedCpus();
  // This process samples the server and starts the generator: it belongs on the generator's side.
  if (cpus !== null) setAffinity(process.pid, cpus.generator);
  const runs: ServerRun[] = [];
  const failed: FailedRun[] = [];
  try {
    for (const variant of flags.variants) {
      try {
        const runtime = resolveRuntime(variant.runtime, { node: flags.serverNode, root: flags.serverRoot }, ROOT);
        const c = flags.capacity > 0 ? flags.capacity : (runs[0]?.c ?? null);
        runs.push(
          await runServer(
            { ...ctx, generatorCpus: cpus?.generator ?? null },
            pin,
            variant,
            runtime,
            cpus?.server ?? null,
            c,
            flags.profile && runs.length === 0,
          ),
        );
      } catch (err) {
        const error = err instanceof Error ? err.message : String(err);
        process.stderr.write(`  ${variant.name} FAILED: ${error}\n`);
        failed.push({ pin, variant, error });
      }
    }
  } finally {
    if (cpus !== null) setAffinity(process.pid, original);
  }
  return { pin, cpus, runs, failed };
}

/** The pin modes to run, from `--pin` and whether taskset is here. */
function pinPlan(flags: Flags): { pin: PinLabel; cpus: { server: number[]; generator: number[] } | null }[] {
  const unpinned = { pin: 'unpinned' as const, cpus: null };
  if (flags.pin === 'off') return [unpinned];
  if (!tasksetAvailable()) {
    if (flags.pin === 'on') throw new Error('--pin on needs taskset (util-linux), which is not installed here; use --pin off');
    process.stderr.write('taskset (util-linux) is not installed: running unpinned only\n');
    return [unpinned];
  }
  const cpus = chooseCpus(allowedCpus(), flags.serverCpus, flags.generatorCpus);
  const pinned = { pin: 'pinned' as const, cpus };
  return flags.pin === 'on' ? [pinned] : [unpinned, pinned];
}

function writeDocs(markdown: string, svg: string, mix: Flags['mix']): void {
  const doc = join(ROOT, 'docs', 'serve.md');
  // Each mix has its own block and chart: a run of one leaves the other's tables as they were.
  const tag = mix === 'default' ? 'bench:serve' : 'bench:serve:personal';
  const chart = mix === 'default' ? 'serve.svg' : 'serve-personal.svg';
  const begin = `<!-- ${tag}:begin -->`;
  const end = `<!-- ${tag}:end -->`;
  const block = `${begin}\n${markdown}\n![goodput per phase](${chart})\n${end}`;
  const text = existsSync(doc) ? readFileSync(doc, 'utf8') : '# tidal serve\n';
  const next = text.includes(begin)
    ? text.slice(0, text.indexOf(begin)) + block + text.slice(text.indexOf(end) + end.length)
    : `${text.trimEnd()}\n\n## Measured under overload${mix === 'default' ? '' : ': the personalized mix'}\n\n${block}\n`;
  writeFileSync(doc, next);
  writeFileSync(join(ROOT, 'docs', chart), svg);
}

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help')) {
    process.stdout.write(`${usage('npm run bench -- --suite serve', FLAGS)}\n`);
    return 0;
  }
  let flags: Flags;
  let plan: ReturnType<typeof pinPlan>;
  try {
    flags = parseFlags(argv);
    if (flags.stages && flags.mix !== 'personal') throw new InvalidInputError('--stages', 'given with --mix personal', true);
    plan = pinPlan(flags);
  } catch (err) {
    process.stderr.write(`serve: ${err instanceof Error ? err.message : String(err)} (--help lists the flags)\n`);
    return 2;
  }
  const report = new Report('serve', { argv, json: flags.json });
  const work = mkdtempSync(join(tmpdir(), 'tidal-bench-serve-'));
  try {
    // The server builds the same corpus (seed 42, 128 dimensions); only its vocabulary and
    // category centroids matter for drawing queries, not its clock.
    const corpus = new Corpus({ items: flags.items, dims: 128, seed: 42 });
    const requestsFile = join(work, 'mix.json');
    let personal: Context['personal'] = null;
    if (flags.mix === 'personal') {
      const spec = personalSpec(corpus, flags.users, flags.writeShare);
      personal = { corpus, spec };
      writeFileSync(requestsFile, JSON.stringify(spec));
    } else {
      const specs: RequestSpec[] = prepareRequests(corpus, mulberry32(7), flags.distinct).map(mixHttpRequest);
      writeFileSync(requestsFile, JSON.stringify(specs));
    }
    const ctx: Context = { flags, requestsFile, personal, generatorCpus: null };
    if (flags.stages) return await stagesRun(ctx, plan[0]!, work, report);
    if (flags.soak) {
      const variant = flags.variants[0]!;
      const runtime = resolveRuntime(variant.runtime, { node: flags.serverNode, root: flags.serverRoot }, ROOT);
      return await soakRun({ flags, variant, runtime, cpus: plan[0]!.cpus, requestsFile, personal: personal! }, report);
    }
    const pins: PinRun[] = [];
    for (const p of plan) pins.push(await runPinMode(ctx, p.pin, p.cpus));
    report.set('flags', flags);
    report.set('pins', pins);
    report.finish();
    const md = renderMarkdown(pins, flags);
    if (flags.docs) writeDocs(md, renderSvg(pins), flags.mix);
    report.line(md);
    if (flags.docs) process.stderr.write(`wrote docs/serve.md and docs/${flags.mix === 'default' ? 'serve' : 'serve-personal'}.svg\n`);
    return pins.some((p) => p.failed.length > 0) ? 1 : 0;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** `--stages`: the first variant, in the first pin mode, through the stage matrix (stages.ts). */
async function stagesRun(ctx: Context, pin: ReturnType<typeof pinPlan>[number], work: string, report: Report): Promise<number> {
  const { flags } = ctx;
  const variant = flags.variants[0]!;
  const runtime = resolveRuntime(variant.runtime, { node: flags.serverNode, root: flags.serverRoot }, ROOT);
  const original = allowedCpus();
  if (pin.cpus !== null) setAffinity(process.pid, pin.cpus.generator);
  process.stderr.write(`starting ${variant.name} with stage times (${runtime.nodeVersion}, ${pin.pin})...\n`);
  const server = await startServer(flags, variant, runtime, pin.cpus?.server ?? null, null);
  try {
    const { corpus, spec } = ctx.personal!;
    const built = await buildUsers(server.url, corpus, spec, PERSONAL_DEFAULTS.follows);
    process.stderr.write(`  built ${fmtInt(built.users)} users (${(built.ms / 1000).toFixed(1)} s)\n`);
    await waitAnn(server.url);
    await phase({ ...ctx, generatorCpus: pin.cpus?.generator ?? null }, server, 'warm-up', null, { closed: flags.closed }, 5, 10);
    const rows = await measureStages({
      url: server.url,
      pid: server.pid,
      spec,
      dir: work,
      closed: flags.closed,
      seconds: flags.stageSeconds,
      rounds: flags.stageRounds,
      client: flags.client,
      generatorCpus: pin.cpus?.generator ?? null,
    });
    await stopServer(server);
    report.set('flags', flags);
    report.set('stages', { pin: pin.pin, variant: variant.name, nodeVersion: runtime.nodeVersion, rows });
    report.finish();
    report.line(
      `Server CPU µs per request by stage (\`--stages\`; ${variant.name}, ${runtime.nodeVersion}, ${pin.pin}; ${fmtInt(flags.items)} items, ${fmtInt(flags.users)} users; a closed loop of ${flags.closed} per cell, ${flags.stageRounds} × ${flags.stageSeconds} s, the levels rotated; load average (1 min) at the end ${loadavg()[0]!.toFixed(1)}):\n\n${renderStages(rows)}\n\nCPU per request at each level ÷ at Full:\n\n${renderStageRatios(rows)}\n`,
    );
    return 0;
  } catch (err) {
    server.child.kill('SIGKILL');
    throw err;
  } finally {
    if (pin.cpus !== null) setAffinity(process.pid, original);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

process.exitCode = await main();
