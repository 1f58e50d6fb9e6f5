/**
 * `npm run bench:ratelimit`: the (agent, session) rate limiter against rate-limiter-flexible's
 * RateLimiterMemory on the same keys in the same run, and the heap an open session costs.
 *
 * Flags: `--checks N` checks per timed round (default 1 000 000), `--rounds N` (default 5, after
 * one warm-up round), `--sessions N` sessions opened for the memory figures (default 100 000).
 * Run with `--expose-gc` (the npm script does) so heap figures are taken after a full collection.
 *
 * Throughput is one caller checking one key at a time, the way a request handler would: tidal's
 * `tryTake` is a synchronous call, RateLimiterMemory's `consume` is awaited (it returns a promise,
 * and a refusal is a rejected promise). Both read the clock on every check (RateLimiterMemory calls
 * Date.now() itself; tidal is passed Date.now()).
 */

import { RateLimiterMemory, type RateLimiterRes } from 'rate-limiter-flexible';
import { RateLimiterConfig, TidalDb, type SessionHandle } from 'tidal-core';
import { RateLimiter } from 'tidal-load';
import { Report, collectGarbage, fmtInt, fmtMs, fmtRatio, loadAverage, nowMs, parseOptions } from './harness/index.js';

const opts = parseOptions('ratelimit', {
  checks: { type: 'int', default: 1_000_000, description: 'checks per timed round' },
  rounds: { type: 'int', default: 5, description: 'timed rounds after one warm-up; the median is reported' },
  sessions: { type: 'int', default: 100_000, description: 'sessions opened for the memory figures' },
});
const CHECKS = opts.checks;
const ROUNDS = opts.rounds;
const SESSIONS = opts.sessions;
const AGENTS = 1000;
const SESSIONS_PER_AGENT = 10;

let report: Report | undefined;
function log(line = ''): void {
  if (report) report.line(line);
  else process.stdout.write(`${line}\n`);
}

function heapUsed(): number {
  collectGarbage();
  collectGarbage();
  return process.memoryUsage().heapUsed;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** The key pattern both limiters see: 1 000 agents × 10 sessions, checked round-robin. */
const agents: string[] = [];
const sessions: string[] = [];
/** RateLimiterMemory takes one string key; built once, as an application would keep it per session. */
const joined: string[] = [];
for (let a = 0; a < AGENTS; a++) {
  for (let s = 0; s < SESSIONS_PER_AGENT; s++) {
    agents.push(`agent-${a}`);
    sessions.push(`session-${a}-${s}-${'x'.repeat(20)}`);
    joined.push(`agent-${a}:session-${a}-${s}-${'x'.repeat(20)}`);
  }
}
const KEYS = agents.length;

interface Scenario {
  name: string;
  tidal: () => RateLimiter;
  flexible: () => RateLimiterMemory;
  /** Whether every check but each key's first is refused. */
  refused: boolean;
}

const SCENARIOS: Scenario[] = [
  {
    // Far from the limit: every check is admitted.
    name: 'admitted',
    tidal: () => new RateLimiter(RateLimiterConfig.limited(1_000_000, 1_000_000)),
    flexible: () => new RateLimiterMemory({ points: 1_000_000, duration: 1 }),
    refused: false,
  },
  {
    // Over the limit: after each key's first check, every check is refused.
    name: 'refused',
    tidal: () => new RateLimiter(RateLimiterConfig.limited(1, 1)),
    flexible: () => new RateLimiterMemory({ points: 1, duration: 3600 }),
    refused: true,
  },
];

function runTidal(limiter: RateLimiter, n: number): { perSec: number; refused: number } {
  let refused = 0;
  const t = nowMs();
  for (let i = 0, k = 0; i < n; i++, k = k + 1 === KEYS ? 0 : k + 1) {
    if (limiter.tryTake(agents[k]!, sessions[k]!, Date.now()) > 0) refused++;
  }
  return { perSec: (n / (nowMs() - t)) * 1000, refused };
}

async function runFlexible(limiter: RateLimiterMemory, n: number): Promise<{ perSec: number; refused: number }> {
  let refused = 0;
  const t = nowMs();
  for (let i = 0, k = 0; i < n; i++, k = k + 1 === KEYS ? 0 : k + 1) {
    try {
      await limiter.consume(joined[k]!);
    } catch (res) {
      if (res instanceof Error) throw res;
      refused++;
    }
  }
  return { perSec: (n / (nowMs() - t)) * 1000, refused };
}

/** The floor of any promise-returning check: the same loop awaiting an already-settled promise. */
async function runPromiseFloor(n: number, reject: boolean): Promise<number> {
  // Made once, as rate-limiter-flexible's refusals are: no stack is captured per call.
  const refused = new Error('refused');
  const settled = async (): Promise<void> => {
    if (reject) throw refused;
  };
  const t = nowMs();
  for (let i = 0; i < n; i++) {
    try {
      await settled();
    } catch {
      // refused
    }
  }
  return (n / (nowMs() - t)) * 1000;
}

/**
 * RateLimiterMemory's storage step alone, called synchronously (an internal of the library, not
 * its API): what `consume` costs without its promise.
 */
function runFlexibleStorage(limiter: RateLimiterMemory, n: number, duration: number): number {
  const storage = (limiter as unknown as { _memoryStorage: { incrby(key: string, v: number, d: number): RateLimiterRes } })._memoryStorage;
  const t = nowMs();
  for (let i = 0, k = 0; i < n; i++, k = k + 1 === KEYS ? 0 : k + 1) storage.incrby(`rlflx:${joined[k]!}`, 1, duration);
  return (n / (nowMs() - t)) * 1000;
}

interface ThroughputRow {
  scenario: string;
  tidal: number;
  flexible: number;
  floor: number;
  storage: number;
  refusedTidal: number;
  refusedFlexible: number;
}

async function throughput(s: Scenario): Promise<ThroughputRow> {
  const tidal: number[] = [];
  const flexible: number[] = [];
  const floor: number[] = [];
  const storage: number[] = [];
  let refusedTidal = 0;
  let refusedFlexible = 0;
  // Round 0 warms up (JIT, maps at full size) and is not counted; the two sides alternate so a
  // slow stretch of the machine hits both.
  for (let round = 0; round <= ROUNDS; round++) {
    collectGarbage();
    const a = runTidal(s.tidal(), CHECKS);
    collectGarbage();
    const b = await runFlexible(s.flexible(), CHECKS);
    collectGarbage();
    const c = await runPromiseFloor(CHECKS, s.refused);
    collectGarbage();
    const d = runFlexibleStorage(s.flexible(), CHECKS, s.refused ? 3600 : 1);
    if (round === 0) continue;
    tidal.push(a.perSec);
    flexible.push(b.perSec);
    floor.push(c);
    storage.push(d);
    refusedTidal = a.refused;
    refusedFlexible = b.refused;
  }
  return {
    scenario: s.name,
    tidal: median(tidal),
    flexible: median(flexible),
    floor: median(floor),
    storage: median(storage),
    refusedTidal,
    refusedFlexible,
  };
}

/** Heap per bucket of a RateLimiter holding `n` buckets, with one agent per 10 sessions or one per session. */
function bucketBytes(n: number, sessionsPerAgent: number): number {
  const agentIds = Array.from({ length: n }, (_, i) => `agent-${Math.floor(i / sessionsPerAgent)}`);
  const sessionIds = Array.from({ length: n }, () => crypto.randomUUID());
  const limiter = new RateLimiter(RateLimiterConfig.limited(10, 20, { maxBuckets: n }));
  const before = heapUsed();
  for (let i = 0; i < n; i++) limiter.tryTake(agentIds[i]!, sessionIds[i]!, 0);
  const after = heapUsed();
  if (limiter.size !== n) throw new Error(`expected ${n} buckets, got ${limiter.size}`);
  return (after - before) / n;
}

interface SessionMemory {
  openPerSec: number;
  idleBytes: number;
  signalledBytes: number;
  /** Median of 5 sweeps with every session open and none due. */
  sweepMs: number;
}

/** Heap per open session of a database: idle, then after one rate-limited signal each. */
async function sessionBytes(n: number): Promise<SessionMemory> {
  const db = await TidalDb.builder()
    .ephemeral()
    .workers(1)
    .schema({ signals: [{ name: 'view', halfLifeMs: 3_600_000 }] })
    .rateLimiter(RateLimiterConfig.limited(10, 20, { maxBuckets: n }))
    .sessions({ maxOpen: n })
    .open();
  try {
    // The items exist beforehand, so the figures hold the sessions' own memory, not the item ids.
    await db.signals(Array.from({ length: 1000 }, (_, i) => ({ item: `item-${i}`, kind: 'view' })));
    // Allocated before the first figure: the caller's array is not the sessions' memory.
    const handles: (SessionHandle | null)[] = Array.from({ length: n }, () => null);
    const before = heapUsed();
    const t = nowMs();
    for (let i = 0; i < n; i++) handles[i] = db.openSession({ agent: `agent-${i % AGENTS}` });
    const openPerSec = (n / (nowMs() - t)) * 1000;
    const opened = heapUsed();
    for (let i = 0; i < n; i += 10_000) {
      const end = Math.min(n, i + 10_000);
      const writes: Promise<number>[] = [];
      for (let j = i; j < end; j++) writes.push(db.sessionSignal(handles[j]!, { item: `item-${j % 1000}`, kind: 'view' }));
      await Promise.all(writes);
    }
    const signalled = heapUsed();
    if (db.openSessions().length !== n) throw new Error('sessions were lost');
    // What the sweeper costs the main thread each interval when nothing is due: a scan of them all.
    const sweeps: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t0 = nowMs();
      if ((await db.sweepSessions()).length !== 0) throw new Error('no session should be due');
      sweeps.push(nowMs() - t0);
    }
    return { openPerSec, idleBytes: (opened - before) / n, signalledBytes: (signalled - before) / n, sweepMs: median(sweeps) };
  } finally {
    await db.close();
  }
}

async function main(): Promise<void> {
  if (typeof (globalThis as { gc?: unknown }).gc !== 'function') {
    throw new Error('run with node --expose-gc (npm run bench:ratelimit does): heap figures need a full collection');
  }
  const r = (report = new Report('ratelimit', opts));
  // Both sides run in the same rounds, so other load slows both; the ratio is the robust figure.
  log(
    `${fmtInt(CHECKS)} checks per round, median of ${ROUNDS} rounds after 1 warm-up, ${fmtInt(KEYS)} keys (${AGENTS} agents × ${SESSIONS_PER_AGENT} sessions) round-robin.`,
  );
  log();

  const rows: ThroughputRow[] = [];
  for (const s of SCENARIOS) {
    const r = await throughput(s);
    rows.push(r);
    const expected = s.refused ? CHECKS - KEYS : 0;
    if (r.refusedTidal !== expected || r.refusedFlexible !== expected) {
      throw new Error(`${s.name}: expected ${expected} refusals, tidal ${r.refusedTidal}, rate-limiter-flexible ${r.refusedFlexible}`);
    }
  }
  log('**checks per second (one caller, one key at a time)**');
  log();
  log(
    r.markdown(
      [
        'scenario',
        'tidal RateLimiter.tryTake',
        'RateLimiterMemory.consume (awaited)',
        'ratio',
        'awaited no-op promise',
        'RateLimiterMemory storage step, sync',
      ],
      rows.map((r) => [
        r.scenario,
        fmtInt(r.tidal),
        fmtInt(r.flexible),
        fmtRatio(r.tidal / r.flexible),
        fmtInt(r.floor),
        fmtInt(r.storage),
      ]),
    ),
  );
  log();
  log('"awaited no-op promise": the same loop awaiting an async function that returns (or throws) at once,');
  log('the floor of any promise-returning check. "storage step": RateLimiterMemory\'s internal Map update');
  log('(MemoryStorage.incrby) called directly, without the promise.');
  log();

  const grouped = bucketBytes(SESSIONS, 10);
  const single = bucketBytes(SESSIONS, 1);
  log(
    `RateLimiter heap per bucket (${fmtInt(SESSIONS)} buckets, UUID session ids): ${fmtInt(grouped)} bytes with 10 sessions per agent, ${fmtInt(single)} bytes with one session per agent`,
  );

  const mem = await sessionBytes(SESSIONS);
  log(`openSession: ${fmtInt(mem.openPerSec)} sessions/s (one SQLite insert each)`);
  log(
    `heap per open session (${fmtInt(SESSIONS)} sessions, handles kept by the caller): ${fmtInt(mem.idleBytes)} bytes idle, ${fmtInt(mem.signalledBytes)} bytes after one signal each (adds its bucket and seen set)`,
  );
  log(`sweep of ${fmtInt(SESSIONS)} open sessions, none due: ${fmtMs(mem.sweepMs)} ms (median of 5)`);
  log(`load average (1 min) at end: ${loadAverage()}`);
  r.set('throughput', rows);
  r.set('memory', { bucketBytesGrouped: grouped, bucketBytesSingle: single, ...mem });
  r.finish();
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error)?.stack ?? String(err)}\n`);
  process.exitCode = 1;
});
