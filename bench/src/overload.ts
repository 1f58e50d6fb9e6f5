/**
 * `npm run bench:overload`: an open-loop overload benchmark. Builds the bench corpus once, measures
 * the Full-level capacity C, then offers 1×, 3× and 10× C (Poisson arrivals, mixed retrieve and
 * search, with concurrent signal writes) and drops back to 0.5× C — once with load management and
 * once without, each in its own child process so one run's backlog cannot leak into the other.
 * Writes docs/overload.md (tables) and docs/overload.svg (chart).
 */
import { spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PerformanceObserver, performance } from 'node:perf_hooks';
import { DegradationLevel, TidalDb, TidalError, levelName, type DegradationLevelName } from 'tidal-core';
import { Corpus, tidalSchema } from './corpus.js';
import { personalQueries, personalSchema, personalTypedReads, personalWriter, runRead } from './overload-personal.js';
import { prepareQueries, prepareTypedQueries, type QueryType } from './query-mix.js';
import { PERSONAL_DEFAULTS, PERSONAL_READS, personalSpec, type PersonalMixSpec } from './serve/personal-mix.js';
import { writeUsers } from './serve/personal-users.js';
import { mulberry32 } from './random.js';
import {
  Progress,
  Report,
  collectGarbage,
  fmtInt,
  machine,
  markdownTable,
  nowMs,
  parseOptions,
  parseOptionsOrThrow,
  percentile,
} from './harness/index.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');

interface PhaseSpec {
  name: string;
  factor: number;
  seconds: number;
}

interface PhaseResult {
  name: string;
  factor: number;
  offeredRate: number;
  offered: number;
  ok: number;
  goodput: number;
  p50: number;
  p99: number;
  p999: number;
  errors: Record<string, number>;
  levels: Record<DegradationLevelName, number>;
  refusalP99: number;
  refusalMax: number;
  /** Queries of this phase still unanswered when the run ended. */
  unfinished: number;
  /** Only for the last phase: ms from its start until the level was Full and stayed Full. */
  /** Last phase: from its start until the level was Full and held it for {@link HELD_FULL_MS}. */
  backToFullMs: number | null;
  /** Last phase: from its start until the level was Full to the end of the phase. */
  fullForGoodMs: number | null;
}

/** A stretch of ticks that sampled a level below Full in the last phase (see the child). */
interface Excursion {
  atMs: number;
  forMs: number;
  worst: number;
  maxInFlight: number;
  /** The gap between this tick and the previous one: how long the generator's thread was held. */
  gapMs: number;
  /** Arrivals the tick fired at once (those that fell due during the gap). */
  fired: number;
  /** This thread's GC pauses near its start: PerformanceObserver kind (1 minor, 4 major, 8 incremental, 16 weak callbacks), ms, and offset. */
  gc: { kind: number; ms: number; atMs: number }[];
}

interface Bin {
  t: number;
  offered: number;
  ok: number;
  p99: number;
  level: number;
  inFlight: number;
}

const LEVEL_NAMES: readonly DegradationLevelName[] = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'];
/** The share of each query type in the mix (query-mix.ts). */
const MIX_SHARE: Record<QueryType, number> = {
  trending: 0.25,
  'new in a category': 0.1,
  'popular around a context vector': 0.15,
  text: 0.25,
  'text + filter': 0.1,
  hybrid: 0.15,
};

/** The mixes: the default (no user named) and the personalized reads (overload-personal.ts). */
type Mix = 'default' | 'personal';

/** The share of each query type of a mix. */
function mixShares(mix: Mix): Readonly<Record<string, number>> {
  return mix === 'personal' ? PERSONAL_READS : MIX_SHARE;
}

/**
 * Per query type and level: mean single-client latency, mean worker service time (`explain.serviceMs`:
 * the execution alone, without the round trip to the worker) and overlap@10 with Full.
 */
type LevelsTable = Record<string, Record<DegradationLevelName, { meanMs: number; serviceMs: number; overlap: number }>>;

interface ChildReport {
  mode: 'on' | 'off';
  /** Cost and quality per level with the result cache off (the clock is fixed while it is measured). */
  levels?: LevelsTable;
  /** The same with the defaults: below Full, repeated queries are answered from the result cache. */
  levelsCached?: LevelsTable;
  capacity: number;
  fullServiceMs: number;
  noDiversityServiceMs: number;
  serviceMsByLevel: Record<string, number>;
  phases: PhaseResult[];
  bins: Bin[];
  lastPhaseExcursions?: Excursion[];
  rss: { start: number; peak: number; end: number };
  heapAfterGc: { start: number; end: number };
}

const BIN_MS = 250;
/** How long the level must stay Full after the overload for "back to Full" to count. */
const HELD_FULL_MS = 1000;
/** nowMs() − performance.now(): puts GC entries (performance time) on the ticks' time line. */
const PERF_OFFSET = nowMs() - performance.now();

// ---------------------------------------------------------------------------------------------
// Child: one mode, one schedule
// ---------------------------------------------------------------------------------------------

/** The flags the parent passes to its children (`--child` first). */
const CHILD_FLAGS = {
  mode: { type: 'string', default: 'on', choices: ['on', 'off'], description: 'load management on or off' },
  mix: { type: 'string', default: 'default', choices: ['default', 'personal'], description: 'the query mix' },
  users: { type: 'int', default: 10_000, min: 1, description: 'users of the personal mix' },
  dir: { type: 'string', default: '', description: 'the database (a copy of the built one)' },
  items: { type: 'int', default: 100_000, description: 'items of the corpus' },
  seconds: { type: 'int', default: 20, description: 'seconds per phase' },
  workers: { type: 'int', default: 0, min: 0, description: 'query workers (0: one per core)' },
  capacity: { type: 'int', default: 0, min: 0, description: 'C, measured when 0' },
  admission: { type: 'int', default: 0, min: 0, description: 'admission limit (0: auto)' },
  'levels-dir': { type: 'string', description: 'a copy for the per-level table with the result cache off' },
  'skip-levels': { type: 'boolean', description: 'no per-level table' },
  'levels-only': { type: 'boolean', description: 'the per-level table alone' },
  phases: { type: 'string', description: 'only the phases of these factors (10,0.5: a diagnostic run)' },
} as const;

async function child(argv: string[]): Promise<void> {
  const c = parseOptionsOrThrow(CHILD_FLAGS, argv);
  const mode = c.mode as 'on' | 'off';
  const dir = c.dir;
  const items = c.items;
  const seconds = c.seconds;
  const workers = c.workers || machine().cores;
  const admission = c.admission > 0 && mode === 'on' ? c.admission : null;
  const mix = c.mix as Mix;
  const corpus = new Corpus({ items, dims: 128 });
  const spec = mix === 'personal' ? personalSpec(corpus, c.users, 0) : null;
  const schema = mix === 'personal' ? personalSchema() : tidalSchema(128);
  const now = corpus.now;
  let clock = now;
  const db = await TidalDb.builder()
    .path(dir)
    .schema(schema)
    .workers(workers)
    .clock(() => clock)
    .loadManagement(mode === 'on')
    .admissionLimit(admission === null ? 'auto' : admission)
    .open();
  // Every figure below is of the ANN index in use: vector searches are exact while it builds.
  await db.warm({ waitForAnn: true });
  collectGarbage();
  const heapStart = process.memoryUsage().heapUsed;
  const rssStart = process.memoryUsage().rss;
  let rssPeak = rssStart;

  // The per-level table is measured twice: on a copy opened with the result cache off (what each
  // level's execution costs: the clock is fixed, so below Full a repeated query would otherwise be
  // answered from the cache for ever), then on this database with the defaults.
  const levelsDir = c['levels-dir'];
  let levelsTable: LevelsTable | undefined;
  let levelsCachedTable: LevelsTable | undefined;
  if (mode === 'on' && !c['skip-levels']) {
    if (levelsDir !== undefined) {
      const uncached = await TidalDb.builder()
        .path(levelsDir)
        .schema(schema)
        .workers(workers)
        .clock(() => now)
        .workSharing({ maxStalenessMs: { coarseAggregates: 0, noDiversity: 0 } })
        .open();
      await uncached.warm({ waitForAnn: true });
      levelsTable = await measureLevels(uncached, corpus, spec);
      await uncached.close();
    }
    if (!c['levels-only']) levelsCachedTable = await measureLevels(db, corpus, spec);
    levelsTable ??= levelsCachedTable;
  }
  // `--levels-only`: the per-level table with the cache off and nothing else (≈ 1 minute after the build).
  if (c['levels-only']) {
    process.stdout.write(`LEVELS ${JSON.stringify(levelsTable ?? null)}\n`);
    await db.close();
    process.exit(0);
  }

  // The same seed in both modes: both runs offer the same queries in the same order.
  const rand = mulberry32(1);
  // The default mix: 65 536 queries drawn up front: at 10× C the stream cycles through them every
  // few seconds, so an identical query in flight at the same moment is what a real stream would
  // also repeat (trending, the newest of a category), not an artefact of a short list. The
  // personal mix draws each read as it arrives (a user, an item, words, a vector).
  const queries = spec ? [] : prepareQueries(corpus, rand, 65_536);
  let qi = 0;
  const nextQuery = spec ? personalQueries(spec, rand) : () => queries[qi++ % queries.length]!;

  // Capacity: a closed loop with enough clients to keep every worker busy, at Full level.
  let capacity: number;
  if (c.capacity > 0) capacity = c.capacity;
  else {
    const clients = workers * 4;
    const until = nowMs() + 5000;
    let done = 0;
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (nowMs() < until) {
          await nextQuery()(db);
          done++;
        }
      }),
    );
    capacity = Math.round(done / 5);
  }
  process.stderr.write(`[${mode}] capacity C = ${capacity} queries/s\n`);

  const allPhases: PhaseSpec[] = [
    { name: '1× C', factor: 1, seconds },
    { name: '3× C', factor: 3, seconds },
    { name: '10× C', factor: 10, seconds },
    { name: '0.5× C', factor: 0.5, seconds: Math.max(5, Math.round(seconds / 2)) },
  ];
  // `--phases=10,0.5`: only the phases of those factors (a diagnostic run; the report needs all four).
  const only = c.phases?.split(',').map(Number);
  const schedule = only ? allPhases.filter((p) => only.includes(p.factor)) : allPhases;

  const phases: PhaseResult[] = [];
  const bins: Bin[] = [];
  const runStart = nowMs();
  let binStart = runStart;
  let bin = { offered: 0, ok: 0, lat: [] as number[] };
  const levelSamples: { t: number; level: number }[] = [];
  // What surrounds a tick that sampled a level below Full in the last phase: how long the tick
  // waited for the event loop, how many arrivals it fired at once, and the GC pauses near it.
  const excursions: { t: number; phaseMs: number; level: number; inFlight: number; gapMs: number; fired: number }[] = [];
  const gcs: { t: number; ms: number; kind: number }[] = [];
  const gcObserver = new PerformanceObserver((list) => {
    for (const e of list.getEntries())
      gcs.push({ t: e.startTime + PERF_OFFSET, ms: e.duration, kind: (e as unknown as { detail?: { kind?: number } }).detail?.kind ?? 0 });
  });
  gcObserver.observe({ entryTypes: ['gc'] });

  const flushBin = (t: number) => {
    const lat = Float64Array.from(bin.lat).sort();
    bins.push({
      t: (binStart - runStart) / 1000,
      offered: (bin.offered * 1000) / BIN_MS,
      ok: (bin.ok * 1000) / BIN_MS,
      p99: lat.length ? percentile(lat, 99) : Number.NaN,
      level: db.load.level,
      inFlight: db.load.inFlight,
    });
    bin = { offered: 0, ok: 0, lat: [] };
    binStart = t;
    const rss = process.memoryUsage().rss;
    if (rss > rssPeak) rssPeak = rss;
  };

  // Concurrent writes: 1 000 signals/s in batches of 50, to items that already have views (the
  // corpus's engaged items). Writes spread over all items would give ~900 items a new signal slot
  // every second, and the trending scan, which visits every slot, would slow down through the run
  // for a reason that has nothing to do with load.
  const engaged: number[] = [];
  for (let i = 0; i < items && engaged.length < 2000; i++) if (corpus.signalCounts(i).views > 0) engaged.push(i);
  let writeErrors = 0;
  // The personal mix's writes name users: signals, hides and follows (the mix's own shares).
  const writeUsers = spec ? personalWriter(spec, mulberry32(2)) : null;
  const writer = setInterval(() => {
    clock += 50;
    if (writeUsers) {
      writeUsers(db, 50, clock).then(
        (refused) => (writeErrors += refused),
        () => writeErrors++,
      );
      return;
    }
    const batch = Array.from({ length: 50 }, () => ({
      item: corpus.id(engaged[Math.floor(rand() * engaged.length)]!),
      kind: 'view' as const,
      at: clock,
    }));
    db.signals(batch).catch(() => writeErrors++);
  }, 50);

  const pending = new Set<Promise<void>>();
  for (const spec of schedule) {
    const rate = capacity * spec.factor;
    const p = new Progress(`[${mode}] ${spec.name} (${fmtInt(rate)} q/s offered)`, Math.round(rate * spec.seconds), 'queries');
    const lat: number[] = [];
    const refusals: number[] = [];
    const errors: Record<string, number> = {};
    const levels = { Full: 0, ReducedCandidates: 0, CoarseAggregates: 0, NoDiversity: 0 } as Record<DegradationLevelName, number>;
    let offered = 0;
    let ok = 0;
    let outstanding = 0;
    const phaseStart = nowMs();
    const phaseEnd = phaseStart + spec.seconds * 1000;
    let nextArrival = phaseStart;
    let lastTick = phaseStart;
    // Poisson arrivals: exponential gaps, fired by a 1 ms tick. Latency counts from the scheduled
    // arrival, so a late tick is charged to the system (no coordinated omission).
    while (nextArrival < phaseEnd) {
      const t = nowMs();
      const firedBefore = offered;
      while (nextArrival <= t && nextArrival < phaseEnd) {
        const scheduled = nextArrival;
        nextArrival += (-Math.log(1 - rand()) * 1000) / rate;
        offered++;
        bin.offered++;
        outstanding++;
        const called = nowMs();
        const query = nextQuery()(db);
        // A refusal is decided inside the call (admission is synchronous); what follows in this
        // loop is the generator's own work, so the call's own duration is what a refusal costs.
        const callMs = nowMs() - called;
        const q = query.then(
          (level) => {
            const l = nowMs() - scheduled;
            lat.push(l);
            bin.lat.push(l);
            ok++;
            bin.ok++;
            levels[levelName(level)]++;
          },
          (err: unknown) => {
            const code = TidalError.is(err) ? err.code : 'OTHER';
            errors[code] = (errors[code] ?? 0) + 1;
            if (code === 'TIDAL_OVERLOADED') refusals.push(callMs);
          },
        );
        const tracked = q.finally(() => {
          outstanding--;
          pending.delete(tracked);
        });
        pending.add(tracked);
        p.tick(1);
      }
      const tNow = nowMs();
      if (tNow - binStart >= BIN_MS) flushBin(tNow);
      const sampled = db.load.level;
      levelSamples.push({ t: tNow, level: sampled });
      if (sampled !== DegradationLevel.Full && spec === schedule[schedule.length - 1]) {
        excursions.push({
          t: tNow,
          phaseMs: tNow - phaseStart,
          level: sampled,
          inFlight: db.load.inFlight,
          gapMs: t - lastTick,
          fired: offered - firedBefore,
        });
      }
      lastTick = tNow;
      await new Promise((r) => setTimeout(r, 1));
    }
    p.finish();
    const sorted = Float64Array.from(lat).sort();
    const rs = Float64Array.from(refusals).sort();
    let backToFullMs: number | null = null;
    let fullForGoodMs: number | null = null;
    if (spec === schedule[schedule.length - 1]) {
      const inPhase = levelSamples.filter((s) => s.t >= phaseStart);
      let lastNonFull = -1;
      inPhase.forEach((s, i) => {
        if (s.level !== DegradationLevel.Full) lastNonFull = i;
      });
      fullForGoodMs =
        lastNonFull === inPhase.length - 1 ? Number.POSITIVE_INFINITY : lastNonFull < 0 ? 0 : inPhase[lastNonFull + 1]!.t - phaseStart;
      // Back to Full: the overload's backlog drained and the level Full and held for a second. A
      // later excursion (a GC pause of this thread lets a few dozen arrivals pile up at 0.5× C, as
      // at any load) is ordinary operation, not recovery: it is listed below the table, and
      // `fullForGoodMs` (Full to the end of the phase) is reported beside it.
      backToFullMs = Number.POSITIVE_INFINITY;
      let runStart = -1;
      for (const s of inPhase) {
        if (s.level !== DegradationLevel.Full) runStart = -1;
        else if (runStart < 0) runStart = s.t;
        if (runStart >= 0 && s.t - runStart >= HELD_FULL_MS) {
          backToFullMs = runStart - phaseStart;
          break;
        }
      }
    }
    phases.push({
      name: spec.name,
      factor: spec.factor,
      offeredRate: rate,
      offered,
      ok,
      goodput: (ok * 1000) / (nowMs() - phaseStart),
      p50: percentile(sorted, 50),
      p99: percentile(sorted, 99),
      p999: percentile(sorted, 99.9),
      errors,
      levels,
      refusalP99: rs.length ? percentile(rs, 99) : Number.NaN,
      refusalMax: rs.length ? rs[rs.length - 1]! : Number.NaN,
      unfinished: outstanding,
      backToFullMs,
      fullForGoodMs,
    });
  }
  clearInterval(writer);
  gcObserver.disconnect();
  // Contiguous ticks below Full in the last phase form one excursion: when it began, how high the
  // count went, the tick gap just before it (a stall of this thread: the arrivals that fell due
  // meanwhile leave at once) and the GC pauses of this thread from 150 ms before to 50 ms after.
  const groups: (typeof excursions)[] = [];
  for (const e of excursions) {
    const g = groups[groups.length - 1];
    if (g && e.t - g[g.length - 1]!.t < 20) g.push(e);
    else groups.push([e]);
  }
  const lastPhaseExcursions: Excursion[] = groups.map((g) => {
    const first = g[0]!;
    return {
      atMs: first.phaseMs,
      forMs: g[g.length - 1]!.t - first.t,
      worst: Math.max(...g.map((e) => e.level)),
      maxInFlight: Math.max(...g.map((e) => e.inFlight)),
      gapMs: first.gapMs,
      fired: first.fired,
      gc: gcs.filter((x) => x.t > first.t - 150 && x.t < first.t + 50).map((x) => ({ kind: x.kind, ms: x.ms, atMs: x.t - first.t })),
    };
  });
  for (const e of lastPhaseExcursions) {
    process.stderr.write(
      `[${mode}] below Full at +${e.atMs.toFixed(0)} ms for ${e.forMs.toFixed(0)} ms (level ≤ ${e.worst}, in flight ≤ ${e.maxInFlight}), tick gap before ${e.gapMs.toFixed(1)} ms fired ${e.fired}, gc [${e.gc.map((x) => `${x.kind}:${x.ms.toFixed(1)}ms@${x.atMs.toFixed(0)}`).join(' ')}]\n`,
    );
  }
  // Let what is still queued finish for up to 10 s, then report anyway (the baseline may not).
  const drainUntil = nowMs() + 10_000;
  while (pending.size > 0 && nowMs() < drainUntil) {
    if (nowMs() - binStart >= BIN_MS) flushBin(nowMs());
    await new Promise((r) => setTimeout(r, 5));
  }
  flushBin(nowMs());
  const stats = db.stats();
  const serviceMsByLevel: Record<string, number> = {};
  for (const [k, v] of Object.entries(stats.serviceMs)) serviceMsByLevel[k] = v.p50;
  const report: ChildReport = {
    mode,
    ...(levelsTable ? { levels: levelsTable } : {}),
    ...(levelsCachedTable && levelsCachedTable !== levelsTable ? { levelsCached: levelsCachedTable } : {}),
    capacity,
    fullServiceMs: stats.serviceMs.Full.p50,
    noDiversityServiceMs: stats.serviceMs.NoDiversity.p50,
    serviceMsByLevel,
    phases,
    bins,
    lastPhaseExcursions,
    rss: { start: rssStart, peak: rssPeak, end: process.memoryUsage().rss },
    heapAfterGc: { start: heapStart, end: 0 },
  };
  if (pending.size === 0) {
    await db.close();
    collectGarbage();
    report.heapAfterGc.end = process.memoryUsage().heapUsed;
  }
  process.stdout.write(`REPORT ${JSON.stringify(report)}\n`);
  if (writeErrors > 0) process.stderr.write(`[${mode}] ${writeErrors} write batches refused\n`);
  // The baseline may still hold thousands of queued queries: exit without waiting for them.
  process.exit(0);
}

/**
 * Cost and quality of each level, per query type, on a quiet database (one client, no writes, the
 * clock fixed): every query runs at Full, then at each level through the `level` option, twice;
 * latency is the mean of both rounds, overlap@10 the share of the Full top 10 the level returns.
 */
async function measureLevels(db: TidalDb, corpus: Corpus, spec: PersonalMixSpec | null): Promise<LevelsTable> {
  const queries: { type: string; run(db: TidalDb, level: DegradationLevel): ReturnType<typeof runRead> }[] = spec
    ? personalTypedReads(spec, mulberry32(11), 40).map((q) => ({ type: q.type, run: (d, level) => runRead(d, q.request, level) }))
    : prepareTypedQueries(corpus, mulberry32(11), 40);
  const full = new Map<number, string[]>();
  for (let i = 0; i < queries.length; i++) full.set(i, (await queries[i]!.run(db, DegradationLevel.Full)).ids);
  const sums = new Map<string, { ms: number; n: number; service: number; s: number; overlap: number; m: number }>();
  // One pass at every level first, not counted: what a worker builds on its first query below
  // Full (the popular subset, if warm() has not) and V8's compilation of each level's paths.
  for (const level of [DegradationLevel.ReducedCandidates, DegradationLevel.CoarseAggregates, DegradationLevel.NoDiversity]) {
    for (const q of queries) await q.run(db, level);
  }
  for (let round = 0; round < 2; round++) {
    for (const level of [
      DegradationLevel.Full,
      DegradationLevel.ReducedCandidates,
      DegradationLevel.CoarseAggregates,
      DegradationLevel.NoDiversity,
    ]) {
      for (let i = 0; i < queries.length; i++) {
        const q = queries[i]!;
        const t0 = nowMs();
        const r = await q.run(db, level);
        const ms = nowMs() - t0;
        const key = `${q.type}|${levelName(level)}`;
        const acc = sums.get(key) ?? { ms: 0, n: 0, service: 0, s: 0, overlap: 0, m: 0 };
        acc.ms += ms;
        acc.n++;
        if (r.serviceMs !== null) {
          acc.service += r.serviceMs;
          acc.s++;
        }
        const want = full.get(i)!.slice(0, 10);
        if (want.length > 0) {
          const got = new Set(r.ids.slice(0, 10));
          acc.overlap += want.filter((id) => got.has(id)).length / want.length;
          acc.m++;
        }
        sums.set(key, acc);
      }
    }
  }
  const table = {} as LevelsTable;
  for (const type of Object.keys(mixShares(spec ? 'personal' : 'default'))) {
    table[type] = {} as LevelsTable[string];
    for (const l of LEVEL_NAMES) {
      const a = sums.get(`${type}|${l}`)!;
      table[type][l] = { meanMs: a.ms / a.n, serviceMs: a.s > 0 ? a.service / a.s : Number.NaN, overlap: a.m > 0 ? a.overlap / a.m : 1 };
    }
  }
  return table;
}

/**
 * Two columns per level: the worker's service time (the execution the level changes) and the
 * caller's latency (with the round trip no level changes), each with its ratio to Full, then
 * overlap@10.
 */
function renderLevels(t: LevelsTable, mix: Mix): string {
  const shares = mixShares(mix);
  const types = Object.keys(shares);
  const header = ['query type', ...LEVEL_NAMES.flatMap((l) => [`${l} service ms (× Full)`, `latency ms (× Full), overlap@10`])];
  const cell = (ms: number, full: number) => `${f2(ms)} (${f2(ms / full)}×)`;
  const rows = types.map((type) => [
    type,
    ...LEVEL_NAMES.flatMap((l) => {
      const c = t[type]![l];
      const f = t[type]!.Full;
      return [cell(c.serviceMs ?? Number.NaN, f.serviceMs ?? Number.NaN), `${cell(c.meanMs, f.meanMs)}, ${c.overlap.toFixed(2)}`];
    }),
  ]);
  const weighted = (l: DegradationLevelName, key: 'meanMs' | 'serviceMs') =>
    types.reduce((a, type) => a + shares[type]! * (t[type]![l][key] ?? Number.NaN), 0);
  rows.push([
    'the mix (weighted)',
    ...LEVEL_NAMES.flatMap((l) => [
      cell(weighted(l, 'serviceMs'), weighted('Full', 'serviceMs')),
      cell(weighted(l, 'meanMs'), weighted('Full', 'meanMs')),
    ]),
  ]);
  return markdownTable(header, rows);
}

// ---------------------------------------------------------------------------------------------
// Parent: build once, run both modes, write the report and the chart
// ---------------------------------------------------------------------------------------------

function runChild(args: string[], timeoutMs: number, prefix = 'REPORT '): Promise<ChildReport> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['--expose-gc', fileURLToPath(import.meta.url), '--child', ...args], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const guard = setTimeout(() => c.kill('SIGKILL'), timeoutMs);
    c.on('exit', (code) => {
      clearTimeout(guard);
      const line = out.split('\n').find((l) => l.startsWith(prefix));
      if (line) resolve(JSON.parse(line.slice(prefix.length)) as ChildReport);
      else reject(new Error(`overload child ${args.join(' ')} exited with ${code} and no report`));
    });
  });
}

async function build(dir: string, items: number, workers: number, mix: Mix, users: number): Promise<void> {
  const corpus = new Corpus({ items, dims: 128 });
  const db = await TidalDb.builder()
    .path(dir)
    .schema(mix === 'personal' ? personalSchema() : tidalSchema(128))
    .workers(workers)
    .clock(() => corpus.now)
    .open();
  const p = new Progress('building corpus', items, 'items');
  for (const batch of corpus.items(1000)) {
    await db.upsertItems(batch);
    p.tick(batch.length);
  }
  p.finish();
  const s = corpus.signalSummary();
  const ps = new Progress('ingesting signals', s.total, 'signals');
  for (const batch of corpus.signalBatches(1000)) {
    await db.signals(batch);
    ps.tick(batch.length);
  }
  ps.finish();
  if (mix === 'personal') {
    const t = nowMs();
    await writeUsers(db, corpus, personalSpec(corpus, users, 0), PERSONAL_DEFAULTS.follows);
    process.stderr.write(`users: ${fmtInt(users)} with their histories and follows, ${((nowMs() - t) / 1000).toFixed(1)} s\n`);
  }
  // The index built and saved here, so that every child maps a whole one (each waits for it too).
  await db.warm({ waitForAnn: true });
  await db.close();
}

async function parent(argv: string[]): Promise<void> {
  const opts = parseOptions(
    'overload',
    {
      items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
      seconds: { type: 'int', default: 20, description: 'seconds per phase' },
      workers: { type: 'int', default: 0, min: 0, description: 'query workers (0: one per core)' },
      admission: { type: 'int', default: 0, min: 0, description: 'admission limit with load management on (0: auto)' },
      'levels-only': { type: 'boolean', description: 'the per-level cost and quality table alone (result cache off)' },
      mix: {
        type: 'string',
        default: 'default',
        choices: ['default', 'personal'],
        description: "the query mix: 'default' (no user named) or 'personal' (for_you, following, related, unseen; writes naming users)",
      },
      users: { type: 'int', default: 10_000, min: 1, description: 'users of the personal mix' },
    },
    argv,
  );
  const report = new Report('overload', opts);
  const items = opts.items;
  const seconds = opts.seconds;
  const workers = opts.workers || machine().cores;
  const work = mkdtempSync(join(tmpdir(), 'tidal-overload-'));
  try {
    const base = join(work, 'base');
    const mix = opts.mix as Mix;
    await build(base, items, workers, mix, opts.users);
    const mixArgs = [`--mix=${mix}`, `--users=${opts.users}`];
    const copy = (name: string) => {
      const d = join(work, name);
      cpSync(base, d, { recursive: true });
      return d;
    };
    const deadline = (seconds * 3.5 + 60) * 1000 + 120_000;
    if (opts['levels-only']) {
      const levels = (await runChild(
        [
          '--mode=on',
          `--dir=${copy('on')}`,
          `--levels-dir=${copy('levels')}`,
          `--items=${items}`,
          `--workers=${workers}`,
          '--levels-only',
          ...mixArgs,
        ],
        deadline,
        'LEVELS ',
      )) as unknown as LevelsTable;
      report.line(`Corpus: ${corpusLine(items, workers, mix, opts.users)}; result cache off.\n\n${renderLevels(levels, mix)}`);
      report.set('levels', levels);
      report.finish();
      return;
    }
    const on = await runChild(
      [
        '--mode=on',
        `--dir=${copy('on')}`,
        `--levels-dir=${copy('levels')}`,
        `--items=${items}`,
        `--seconds=${seconds}`,
        `--workers=${workers}`,
        `--admission=${opts.admission}`,
        ...mixArgs,
      ],
      deadline,
    );
    const off = await runChild(
      [
        '--mode=off',
        `--dir=${copy('off')}`,
        `--items=${items}`,
        `--seconds=${seconds}`,
        `--workers=${workers}`,
        `--capacity=${on.capacity}`,
        ...mixArgs,
      ],
      deadline,
    );
    const md = renderMarkdown(on, off, corpusLine(items, workers, mix, opts.users), seconds, mix);
    process.stdout.write(`\n${md}\n`);
    const docs = join(ROOT, 'docs');
    mkdirSync(docs, { recursive: true });
    const svg = mix === 'personal' ? 'overload-personal.svg' : 'overload.svg';
    writeFileSync(join(docs, svg), renderSvg(on, off));
    process.stderr.write(`wrote docs/${svg}\n`);
    report.set('on', on);
    report.set('off', off);
    report.finish();
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

const msOrNever = (ms: number) => (Number.isFinite(ms) ? `${fmtInt(ms)} ms` : 'not within the phase');
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '—');
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '—');

/** What the run ran on: items, workers, and the personal mix's users. */
function corpusLine(items: number, workers: number, mix: Mix, users: number): string {
  const who = mix === 'personal' ? `, ${fmtInt(users)} users (the personal mix)` : '';
  return `${fmtInt(items)} items${who}, ${workers} query workers`;
}

function renderMarkdown(on: ChildReport, off: ChildReport, corpus: string, seconds: number, mix: Mix): string {
  const rows = (r: ChildReport) =>
    r.phases.map((p) => {
      const total = Object.values(p.levels).reduce((a, b) => a + b, 0) || 1;
      const share = (Object.entries(p.levels) as [DegradationLevelName, number][])
        .filter(([, n]) => n > 0)
        .map(([l, n]) => `${l} ${((100 * n) / total).toFixed(0)}%`)
        .join(', ');
      const errs =
        Object.entries(p.errors)
          .map(([c, n]) => `${c} ${n}`)
          .join(', ') || '0';
      return [
        p.name,
        fmtInt(p.offeredRate),
        fmtInt(p.goodput),
        `${((100 * p.goodput) / p.offeredRate).toFixed(0)}%`,
        f1(p.p50),
        f1(p.p99),
        f1(p.p999),
        errs,
        share || '—',
        f2(p.refusalP99),
        fmtInt(p.unfinished),
        p.backToFullMs === null
          ? ''
          : `${msOrNever(p.backToFullMs)} (Full to the end from ${msOrNever(p.fullForGoodMs ?? Number.POSITIVE_INFINITY)})`,
      ];
    });
  const header = [
    'phase',
    'offered q/s',
    'goodput q/s',
    'goodput/offered',
    'p50 ms',
    'p99 ms',
    'p999 ms',
    'errors',
    'levels',
    'refusal p99 ms',
    'unanswered at end',
    'back to Full (held 1 s)',
  ];
  const mb = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
  return [
    `Corpus: ${corpus}, ${seconds} s per phase, writes ${mix === 'personal' ? '1 000/s naming users (signals 80 %, hides 10 %, follows 10 %)' : '1 000 signals/s'} throughout.`,
    '',
    `Capacity C (closed loop, Full level): ${fmtInt(on.capacity)} queries/s. Worker service time p50 by level (load management on): ${Object.entries(
      on.serviceMsByLevel,
    )
      .map(([l, ms]) => `${l} ${f2(ms)} ms`)
      .join(', ')}; NoDiversity / Full = ${f2(on.noDiversityServiceMs / on.fullServiceMs)}.`,
    '',
    ...(on.levels
      ? [
          '### Cost and quality per level',
          '',
          'Mean latency of one client (no queueing: ≈ the service time plus ~0.1 ms of dispatch), per query type and level forced with the `level` option, and overlap@10 with the same query at Full (same clock, no writes), on a copy of the database opened with the result cache off, so every query runs.',
          '',
          renderLevels(on.levels, mix),
          '',
          ...(on.levelsCached
            ? [
                "The same queries with the defaults (this database): below Full, a query repeated within its staleness bound is answered from the result cache, and with the clock fixed the bound never runs out, so these columns show what the cache saves on repeats, not the level's work.",
                '',
                renderLevels(on.levelsCached, mix),
                '',
              ]
            : []),
        ]
      : []),
    '### With load management',
    '',
    markdownTable(header, rows(on)),
    '',
    `RSS: start ${mb(on.rss.start)}, peak ${mb(on.rss.peak)}, end ${mb(on.rss.end)}; heap after GC: start ${mb(on.heapAfterGc.start)}, end ${on.heapAfterGc.end ? mb(on.heapAfterGc.end) : '—'}.`,
    '',
    renderExcursions(on.lastPhaseExcursions ?? []),
    '',
    '### Without load management (same schedule, same C)',
    '',
    markdownTable(header, rows(off)),
    '',
    `RSS: start ${mb(off.rss.start)}, peak ${mb(off.rss.peak)}, end ${mb(off.rss.end)}; heap after GC: start ${mb(off.heapAfterGc.start)}, end ${off.heapAfterGc.end ? mb(off.heapAfterGc.end) : '— (still draining)'}.`,
  ].join('\n');
}

/** perf_hooks' GC kinds (`constants.NODE_PERFORMANCE_GC_*`). */
const GC_KINDS: Record<number, string> = { 1: 'minor', 4: 'major', 8: 'incremental', 16: 'weak callbacks' };

/** What put the level below Full during the last phase, excursion by excursion (the last ten). */
function renderExcursions(ex: readonly Excursion[]): string {
  if (ex.length === 0) return 'Last phase: every tick sampled Full.';
  const rows = ex
    .slice(-10)
    .map((e) => [
      `+${fmtInt(e.atMs)} ms`,
      `${fmtInt(e.forMs)} ms`,
      LEVEL_NAMES[e.worst]!,
      fmtInt(e.maxInFlight),
      `${e.gapMs.toFixed(1)} ms (${e.fired} fired)`,
      e.gc
        .map((g) => `${GC_KINDS[g.kind] ?? `kind ${g.kind}`} ${g.ms.toFixed(1)} ms at ${g.atMs >= 0 ? '+' : ''}${g.atMs.toFixed(0)}`)
        .join(', ') || '—',
    ]);
  return [
    `Last phase: ${ex.length} excursion(s) below Full (the last ${rows.length}: when, how long, the worst level, the highest in-flight count, the generator's tick gap just before, this thread's GC pauses near it).`,
    '',
    markdownTable(['from phase start', 'lasted', 'worst level', 'in flight ≤', 'tick gap before', 'GC near'], rows),
  ].join('\n');
}

/** A hand-made SVG: per mode, offered vs goodput (q/s), p99 (ms, log scale) and the level over time. */
function renderSvg(on: ChildReport, off: ChildReport): string {
  const W = 900;
  const H = 300;
  const pad = { l: 60, r: 60, t: 30, b: 30 };
  const panels = [on, off].map((rep, idx) => {
    const y0 = idx * (H + 20);
    const bins = rep.bins;
    const tMax = Math.max(...bins.map((b) => b.t), 1);
    const rMax = Math.max(...bins.map((b) => Math.max(b.offered, b.ok)), 1);
    const x = (t: number) => pad.l + ((W - pad.l - pad.r) * t) / tMax;
    const yr = (v: number) => y0 + H - pad.b - ((H - pad.t - pad.b) * v) / rMax;
    const lMin = Math.log10(0.5);
    const lMax = Math.log10(30_000);
    const yl = (ms: number) => y0 + H - pad.b - ((H - pad.t - pad.b) * (Math.log10(Math.max(0.5, ms)) - lMin)) / (lMax - lMin);
    const colors = ['#ffffff', '#fff3c4', '#ffd59e', '#ffb0a0'];
    const shade = bins
      .map((b, i) => {
        const next = bins[i + 1]?.t ?? b.t + BIN_MS / 1000;
        return b.level > 0
          ? `<rect x="${x(b.t).toFixed(1)}" y="${y0 + pad.t}" width="${(x(next) - x(b.t)).toFixed(1)}" height="${H - pad.t - pad.b}" fill="${colors[b.level]}"/>`
          : '';
      })
      .join('');
    const line = (pts: [number, number][], color: string, dash = '') =>
      `<polyline fill="none" stroke="${color}" stroke-width="1.5" ${dash ? `stroke-dasharray="${dash}"` : ''} points="${pts
        .filter(([, y]) => Number.isFinite(y))
        .map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`)
        .join(' ')}"/>`;
    const ticksR = [0, 0.25, 0.5, 0.75, 1]
      .map((f) => `<text x="${pad.l - 6}" y="${yr(f * rMax) + 4}" text-anchor="end">${fmtInt(f * rMax)}</text>`)
      .join('');
    const ticksL = [1, 10, 100, 1000, 10000].map((ms) => `<text x="${W - pad.r + 6}" y="${yl(ms) + 4}">${ms} ms</text>`).join('');
    const ticksT = Array.from({ length: Math.floor(tMax / 10) + 1 }, (_, i) => i * 10)
      .map((t) => `<text x="${x(t)}" y="${y0 + H - pad.b + 16}" text-anchor="middle">${t}s</text>`)
      .join('');
    return [
      `<text x="${pad.l}" y="${y0 + 18}" font-weight="bold">${rep.mode === 'on' ? 'With load management' : 'Without load management'} — C = ${fmtInt(rep.capacity)} q/s; shading: level (yellow Reduced, orange Coarse, red NoDiversity)</text>`,
      shade,
      `<rect x="${pad.l}" y="${y0 + pad.t}" width="${W - pad.l - pad.r}" height="${H - pad.t - pad.b}" fill="none" stroke="#888"/>`,
      line(
        bins.map((b) => [x(b.t), yr(b.offered)]),
        '#888',
        '4 3',
      ),
      line(
        bins.map((b) => [x(b.t), yr(b.ok)]),
        '#1565c0',
      ),
      line(
        bins.map((b) => [x(b.t), yl(b.p99)]),
        '#c62828',
      ),
      ticksR,
      ticksL,
      ticksT,
    ].join('\n');
  });
  const legend = `<text x="${pad.l}" y="${2 * (H + 20) + 5}"><tspan fill="#888">- - offered q/s</tspan>  <tspan fill="#1565c0">— goodput q/s (left axis)</tspan>  <tspan fill="#c62828">— p99 latency of completed queries (right axis, log)</tspan></text>`;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${2 * (H + 20) + 15}" font-family="sans-serif" font-size="11">\n<rect width="100%" height="100%" fill="white"/>\n${panels.join('\n')}\n${legend}\n</svg>\n`;
}

const argv = process.argv.slice(2);
if (argv[0] === '--child') await child(argv.slice(1));
else await parent(argv);
