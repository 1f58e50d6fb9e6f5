/**
 * `npm run bench:write`: the durable write path, side by side in one run on this machine.
 *
 * 1. Raw better-sqlite3: the same log rows tidal writes, inserted in transactions of 1024 rows, with
 *    the same pragmas (WAL; synchronous NORMAL for 'process', FULL for 'power'). The ceiling.
 * 2. tidal ingest at full rate, for each durability mode: a closed-loop producer keeps a window of
 *    `signals()` calls in flight. Acknowledgement latency per call, and the main thread's
 *    event-loop delay (monitorEventLoopDelay, 1 ms resolution) while it runs.
 * 3. Periodic checkpoints during ingest, and the cost of one checkpoint at this scale.
 * 4. Overload: an open-loop producer offers 2× the rate measured in 2; backpressure refuses the
 *    excess. Accepted throughput, refusals, queue depth and resident memory.
 *
 * Flags: `--events N` per ingest phase (default 1000000), `--items N` distinct items (default 20000),
 * `--overload-ms N` (default 4000), `--rounds N` raw/tidal alternations per durability mode (default
 * 3, medians reported). Every phase is bounded by its event count or its duration.
 */

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import Database from 'better-sqlite3';
// The file's tables are internal to tidal-core (not in its exports map): the bench reaches its build output.
import { openStorage } from 'tidal-wal/storage';
import { BackpressureError, TidalDb, type Durability, type SignalInput } from 'tidal-core';
import { SignalStore } from 'tidal-query';
import { SlotCheckpoint } from 'tidal-wal';
import { mulberry32 } from './random.js';
import { Report, collectGarbage, fmtInt, fmtMs, nowMs, parseOptions, summarize, type Summary } from './harness/index.js';

const opts = parseOptions('write', {
  events: { type: 'int', default: 1_000_000, description: 'signals per ingest phase' },
  items: { type: 'int', default: 20_000, description: 'distinct items' },
  'overload-ms': { type: 'int', default: 4_000, description: 'duration of the 2× overload phase' },
  rounds: { type: 'int', default: 3, description: 'raw/tidal alternations per durability mode; medians reported' },
  inflight: { type: 'int', default: 32, description: 'signals() calls kept in flight' },
});
const EVENTS = opts.events;
const ITEMS = opts.items;
const OVERLOAD_MS = opts['overload-ms'];
const ROUNDS = opts.rounds;
/** Signals per `signals()` call in the ingest phases, and calls kept in flight. */
const CALL = 256;
const IN_FLIGHT = opts.inflight;
/** Signals per call offered in the overload phase: the same calls as the max-rate run, so the two compare. */
const OVERLOAD_CALL = CALL;
/** Raw baseline transaction size: tidal's default maxBatch. */
const RAW_TX = 1024;
const BASE = Date.UTC(2026, 0, 1);
const SCHEMA = {
  signals: [
    { name: 'view', halfLifeMs: 6 * 3_600_000, velocity: true },
    { name: 'like', halfLifeMs: 86_400_000 },
  ],
};

let report: Report | undefined;
const log = (s = '') => (report ? report.line(s) : void process.stdout.write(`${s}\n`));

/** A fixed stream, so every run and every phase writes the same rows. */
const prng = mulberry32;

/**
 * The event stream, columnar: the rows stay compact in typed arrays for the whole run, and each
 * `signals()` call's objects are built when it is issued, as an application builds them from what it
 * receives. (Prebuilt, a million signal objects stayed live through every phase and billed their
 * marking to whichever phase's garbage collector ran.)
 */
interface Rows {
  n: number;
  ordinal: Int32Array;
  kind: Uint8Array;
  at: Float64Array;
}

/** `n` events over ITEMS items with a skew (item = ITEMS·r²: the first tenth gets ~30 %), 80 % views. */
function makeRows(n: number, seed: number): Rows {
  const rand = prng(seed);
  const rows: Rows = { n, ordinal: new Int32Array(n), kind: new Uint8Array(n), at: new Float64Array(n) };
  for (let i = 0; i < n; i++) {
    const r = rand();
    rows.ordinal[i] = Math.floor(ITEMS * r * r);
    rows.kind[i] = rand() < 0.8 ? 0 : 1;
    rows.at[i] = BASE + i;
  }
  return rows;
}

const IDS = Array.from({ length: ITEMS }, (_, i) => `item-${i}`);
const KIND_NAMES = SCHEMA.signals.map((k) => k.name);

/** Call number `c` of `size` signals (the last one may be shorter); there are `callCount(rows, size)`. */
function callAt(rows: Rows, c: number, size: number): SignalInput[] {
  const from = c * size;
  const to = Math.min(rows.n, from + size);
  const call = new Array<SignalInput>(to - from);
  for (let i = from; i < to; i++)
    call[i - from] = { item: IDS[rows.ordinal[i]!]!, kind: KIND_NAMES[rows.kind[i]!]!, weight: 1, at: rows.at[i]! };
  return call;
}

const callCount = (rows: Rows, size: number) => Math.ceil(rows.n / size);

function median(xs: readonly number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
}

function medianBy<T>(xs: readonly T[], by: (x: T) => number): T {
  return [...xs].sort((a, b) => by(a) - by(b))[Math.floor(xs.length / 2)]!;
}

function tempDir(tag: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `tidal-bench-${tag}-`));
}

// ---------------------------------------------------------------------------------------------
// 1. Raw better-sqlite3
// ---------------------------------------------------------------------------------------------

function rawInsert(rows: Rows, synchronous: 'NORMAL' | 'FULL'): number {
  const dir = tempDir('raw');
  const db = new Database(path.join(dir, 'raw.db'));
  try {
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${synchronous}`);
    db.pragma('wal_autocheckpoint = 1000');
    openStorage(db, path.join(dir, 'raw.db'));
    const insert = db.prepare('INSERT INTO signal_log (seq, ordinal, kind, weight, at, session) VALUES (?, ?, ?, ?, ?, ?)');
    const tx = db.transaction((from: number, to: number) => {
      for (let i = from; i < to; i++) insert.run(i + 1, rows.ordinal[i], rows.kind[i], 1, rows.at[i], null);
    });
    const t0 = nowMs();
    for (let i = 0; i < rows.n; i += RAW_TX) tx(i, Math.min(rows.n, i + RAW_TX));
    return (rows.n / (nowMs() - t0)) * 1000;
  } finally {
    db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// 2–3. tidal at full rate
// ---------------------------------------------------------------------------------------------

interface IngestResult {
  durability: Durability;
  checkpointEveryEvents: number | null;
  perSec: number;
  ack: Summary;
  loopP50Ms: number;
  loopP99Ms: number;
  loopMaxMs: number;
}

async function open(dir: string, durability: Durability, checkpointEveryEvents?: number): Promise<TidalDb> {
  const b = TidalDb.builder().path(dir).schema(SCHEMA).workers(1).durability(durability);
  if (checkpointEveryEvents !== undefined) b.checkpointEveryEvents(checkpointEveryEvents);
  return b.open();
}

async function ingest(rows: Rows, durability: Durability, checkpointEveryEvents?: number): Promise<IngestResult> {
  const dir = tempDir(durability);
  const db = await open(dir, durability, checkpointEveryEvents);
  collectGarbage();
  const acks: number[] = [];
  const loop = monitorEventLoopDelay({ resolution: 1 });
  const calls = callCount(rows, CALL);
  let events = 0;
  let next = 0;
  const t0 = nowMs();
  loop.enable();
  await new Promise<void>((resolve, reject) => {
    let outstanding = 0;
    const issue = (): void => {
      while (outstanding < IN_FLIGHT && next < calls) {
        const call = callAt(rows, next++, CALL);
        const t = nowMs();
        outstanding++;
        db.signals(call).then(() => {
          acks.push(nowMs() - t);
          events += call.length;
          outstanding--;
          if (next === calls && outstanding === 0) resolve();
          else issue();
        }, reject);
      }
    };
    issue();
  });
  const ms = nowMs() - t0;
  loop.disable();
  await db.close();
  fs.rmSync(dir, { recursive: true, force: true });
  return {
    durability,
    checkpointEveryEvents: checkpointEveryEvents ?? null,
    perSec: (events / ms) * 1000,
    ack: summarize(acks),
    loopP50Ms: loop.percentile(50) / 1e6,
    loopP99Ms: loop.percentile(99) / 1e6,
    loopMaxMs: loop.max / 1e6,
  };
}

/** One checkpoint of `slots` signal slots: all rows, then with `dirtyShare` of the rows changed. */
function checkpointCost(slots: number, dirtyShare: number): { fullMs: number; incrementalMs: number; rows: number; dirtyRows: number } {
  const dir = tempDir('ckpt');
  const db = new Database(path.join(dir, 'ckpt.db'));
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    // The tables SlotCheckpoint reads and writes, created as a tidal database file has them.
    openStorage(db, path.join(dir, 'ckpt.db'));
    const slotBytes = 1024;
    const arena = new SharedArrayBuffer(slots * slotBytes);
    const bytes = new Uint8Array(arena);
    for (let i = 0; i < bytes.length; i += 61) bytes[i] = i & 0xff;
    // Layout 1 is the layout of 1 024-byte slots, what this measures.
    const ck = new SlotCheckpoint(db, slotBytes, slots, 1);
    const run = () => {
      const t = nowMs();
      const rows = db.transaction(() => ck.write(arena, slots, slotBytes))();
      ck.committed();
      return { ms: nowMs() - t, rows };
    };
    const full = run();
    const rand = prng(7);
    const perRow = 64;
    const dirtyRows = Math.max(1, Math.round((slots / perRow) * dirtyShare));
    for (let i = 0; i < dirtyRows; i++) ck.markDirty(Math.floor(rand() * slots));
    const inc = run();
    return { fullMs: full.ms, incrementalMs: inc.ms, rows: full.rows, dirtyRows: inc.rows };
  } finally {
    db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Microseconds per event of the in-memory signal state alone (SignalStore.apply), for the breakdown. */
function applyCost(rows: Rows): number {
  const store = SignalStore.create({
    kinds: SCHEMA.signals.map((k) => ({ name: k.name, halfLifeMs: k.halfLifeMs, windows: [], velocity: false })),
    maxOrdinals: ITEMS,
    maxSlots: ITEMS * SCHEMA.signals.length,
  });
  const t0 = nowMs();
  for (let i = 0; i < rows.n; i++) store.apply(rows.ordinal[i]!, rows.kind[i]!, 1, rows.at[i]!);
  return ((nowMs() - t0) * 1000) / rows.n;
}

// ---------------------------------------------------------------------------------------------
// 4. Overload
// ---------------------------------------------------------------------------------------------

interface OverloadResult {
  offeredPerSec: number;
  acceptedPerSec: number;
  refusedShare: number;
  refusedCalls: number;
  maxDepthSeen: number;
  maxQueueEvents: number;
  retryAfter: Summary;
  ack: Summary;
  rssStartMiB: number;
  rssMaxMiB: number;
  rssEndMiB: number;
  heapMaxMiB: number;
  loopP99Ms: number;
}

async function overload(rows: Rows, offeredPerSec: number): Promise<OverloadResult> {
  const dir = tempDir('overload');
  const db = await open(dir, 'process');
  // A small pool of prebuilt calls, offered round and round: the load generator shares the main
  // thread with the database, and building objects for calls that are then refused would bill the
  // generator's work to the database's accepted throughput.
  const pool = Array.from({ length: Math.min(256, callCount(rows, OVERLOAD_CALL)) }, (_, c) => callAt(rows, c, OVERLOAD_CALL));
  collectGarbage();
  const mib = (b: number) => b / 2 ** 20;
  const rssStart = process.memoryUsage().rss;
  let rssMax = rssStart;
  let heapMax = process.memoryUsage().heapUsed;
  let offered = 0;
  let accepted = 0;
  let refused = 0;
  let refusedCalls = 0;
  let maxDepth = 0;
  let maxQueueEvents = 0;
  let outstanding = 0;
  let lastAck = 0;
  let next = 0;
  const retry: number[] = [];
  const acks: number[] = [];
  const loop = monitorEventLoopDelay({ resolution: 1 });
  const t0 = nowMs();
  loop.enable();
  await new Promise<void>((resolve, reject) => {
    let sampled = t0;
    const timer = setInterval(() => {
      const now = nowMs();
      if (now - sampled >= 50) {
        sampled = now;
        const m = process.memoryUsage();
        rssMax = Math.max(rssMax, m.rss);
        heapMax = Math.max(heapMax, m.heapUsed);
      }
      const done = now - t0 >= OVERLOAD_MS;
      if (done) {
        clearInterval(timer);
        const wait = setInterval(() => {
          if (outstanding === 0) {
            clearInterval(wait);
            resolve();
          }
        }, 5);
        return;
      }
      // Open loop: offer whatever the schedule says is due, however the database is doing.
      const due = Math.floor((offeredPerSec * (now - t0)) / 1000) - offered;
      for (let sent = 0; sent < due; sent += OVERLOAD_CALL) {
        const call = pool[next++ % pool.length]!;
        offered += call.length;
        const t = nowMs();
        outstanding++;
        db.signals(call).then(
          () => {
            outstanding--;
            accepted += call.length;
            lastAck = nowMs();
            acks.push(lastAck - t);
          },
          (err: unknown) => {
            outstanding--;
            if (!(err instanceof BackpressureError)) return reject(err);
            refused += call.length;
            refusedCalls++;
            maxDepth = Math.max(maxDepth, err.depth);
            maxQueueEvents = err.maxQueueEvents;
            retry.push(err.retryAfterMs);
          },
        );
      }
    }, 1);
  });
  loop.disable();
  const rssEnd = process.memoryUsage().rss;
  await db.close();
  fs.rmSync(dir, { recursive: true, force: true });
  return {
    offeredPerSec: (offered / OVERLOAD_MS) * 1000,
    acceptedPerSec: (accepted / (lastAck - t0)) * 1000,
    refusedShare: refused / offered,
    refusedCalls,
    maxDepthSeen: maxDepth,
    maxQueueEvents,
    retryAfter: summarize(retry),
    ack: summarize(acks),
    rssStartMiB: mib(rssStart),
    rssMaxMiB: mib(rssMax),
    rssEndMiB: mib(rssEnd),
    heapMaxMiB: mib(heapMax),
    loopP99Ms: loop.percentile(99) / 1e6,
  };
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const rep = (report = new Report('write', opts));
  // Other processes on a 2-core machine move every figure here; the load average says how much.
  const loadAtStart = os.loadavg()[0]!;
  log(
    `events per ingest phase ${fmtInt(EVENTS)}, items ${fmtInt(ITEMS)}, calls of ${CALL} signals with ${IN_FLIGHT} in flight; overload ${OVERLOAD_MS} ms in calls of ${OVERLOAD_CALL}`,
  );
  log();

  const rows = makeRows(EVENTS, 1);

  // Raw and tidal alternate, ROUNDS times each, and each reports its median round: on a shared
  // 2-core machine a neighbour's burst would otherwise land on one side of the ratio only.
  const rawProcessRuns: number[] = [];
  const procRuns: IngestResult[] = [];
  const rawPowerRuns: number[] = [];
  const powerRuns: IngestResult[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    rawProcessRuns.push(rawInsert(rows, 'NORMAL'));
    // Periodic checkpoints are off in these runs (their interval is above the event count) so they
    // measure the write path itself; a later run shows what checkpoints add.
    procRuns.push(await ingest(rows, 'process', EVENTS + 1));
    rawPowerRuns.push(rawInsert(rows, 'FULL'));
    powerRuns.push(await ingest(rows, 'power', EVENTS + 1));
  }
  const rawProcess = median(rawProcessRuns);
  const rawPower = median(rawPowerRuns);
  const proc = medianBy(procRuns, (x) => x.perSec);
  const power = medianBy(powerRuns, (x) => x.perSec);
  const rounds = (xs: number[]) => xs.map((x) => fmtInt(x)).join(' / ');
  log(
    `raw better-sqlite3, ${RAW_TX} rows per transaction, rows/s by round: ${rounds(rawProcessRuns)} (synchronous=NORMAL), ${rounds(rawPowerRuns)} (FULL)`,
  );
  log(
    `tidal 'process', signals/s by round: ${rounds(procRuns.map((x) => x.perSec))}; median: ack p50 ${fmtMs(proc.ack.p50)} ms p99 ${fmtMs(proc.ack.p99)} ms, loop delay p99 ${fmtMs(proc.loopP99Ms)} ms`,
  );
  log(
    `tidal 'power', signals/s by round:   ${rounds(powerRuns.map((x) => x.perSec))}; median: ack p50 ${fmtMs(power.ack.p50)} ms p99 ${fmtMs(power.ack.p99)} ms, loop delay p99 ${fmtMs(power.loopP99Ms)} ms`,
  );
  const ckptEvery = Math.max(10_000, Math.floor(EVENTS / 4));
  const withCkpt = await ingest(rows, 'process', ckptEvery);
  log(
    `tidal 'process' + checkpoint every ${fmtInt(ckptEvery)} events: ${fmtInt(withCkpt.perSec)} signals/s, loop delay p99 ${fmtMs(withCkpt.loopP99Ms)} ms max ${fmtMs(withCkpt.loopMaxMs)} ms`,
  );

  // Where the time of one durable signal goes: SQLite (the raw run), the in-memory signal state
  // (SignalStore.apply alone), and the rest (validation, queueing, promises, garbage collection).
  const rawUs = 1e6 / rawProcess;
  const applyUs = applyCost(rows);
  const procUs = 1e6 / proc.perSec;
  log(
    `per signal: tidal 'process' ${procUs.toFixed(2)} µs = raw SQLite ${rawUs.toFixed(2)} µs + signal state ${applyUs.toFixed(2)} µs + ` +
      `the rest ${(procUs - rawUs - applyUs).toFixed(2)} µs`,
  );

  const slots = ITEMS * SCHEMA.signals.length;
  const ck = checkpointCost(slots, 0.1);
  const ckBig = checkpointCost(200_000, 0.1);
  log(
    `checkpoint of ${fmtInt(slots)} slots: full ${fmtMs(ck.fullMs)} ms (${ck.rows} rows), 10 % of rows dirty ${fmtMs(ck.incrementalMs)} ms (${ck.dirtyRows} rows)`,
  );
  log(
    `checkpoint of 200,000 slots: full ${fmtMs(ckBig.fullMs)} ms (${ckBig.rows} rows), 10 % of rows dirty ${fmtMs(ckBig.incrementalMs)} ms (${ckBig.dirtyRows} rows)`,
  );

  const over = await overload(rows, 2 * proc.perSec);
  log(
    `overload at 2× (${fmtInt(over.offeredPerSec)} offered/s): accepted ${fmtInt(over.acceptedPerSec)}/s = ` +
      `${((over.acceptedPerSec / proc.perSec) * 100).toFixed(0)} % of max, refused ${(over.refusedShare * 100).toFixed(0)} % ` +
      `(${fmtInt(over.refusedCalls)} calls), max depth seen ${fmtInt(over.maxDepthSeen)} (maxQueueEvents ${fmtInt(over.maxQueueEvents)}), ` +
      `rss ${over.rssStartMiB.toFixed(0)} → max ${over.rssMaxMiB.toFixed(0)} → ${over.rssEndMiB.toFixed(0)} MiB`,
  );
  log();

  const ratio = (x: number, y: number) => `${(x / y).toFixed(2)}×`;
  const loadAtEnd = os.loadavg()[0]!;
  const md = [
    `1-minute load average ${loadAtStart.toFixed(2)} at the start, ${loadAtEnd.toFixed(2)} at the end. ` +
      `${fmtInt(EVENTS)} signals per ingest phase over ${fmtInt(ITEMS)} items, calls of ${CALL} with ${IN_FLIGHT} in flight; ` +
      `raw and tidal alternate ${ROUNDS} times per durability mode and each row is the median round.`,
    '',
    rep.markdown(
      ['durable ingest', 'signals/s', 'vs raw', 'ack p50 ms', 'ack p99 ms', 'loop delay p99 ms', 'loop delay max ms'],
      [
        ['raw better-sqlite3, synchronous=NORMAL, 1024 rows/tx', fmtInt(rawProcess), '1.00×', '—', '—', '—', '—'],
        [
          "tidal `'process'`",
          fmtInt(proc.perSec),
          ratio(proc.perSec, rawProcess),
          fmtMs(proc.ack.p50),
          fmtMs(proc.ack.p99),
          fmtMs(proc.loopP99Ms),
          fmtMs(proc.loopMaxMs),
        ],
        ['raw better-sqlite3, synchronous=FULL, 1024 rows/tx', fmtInt(rawPower), '1.00×', '—', '—', '—', '—'],
        [
          "tidal `'power'`",
          fmtInt(power.perSec),
          ratio(power.perSec, rawPower),
          fmtMs(power.ack.p50),
          fmtMs(power.ack.p99),
          fmtMs(power.loopP99Ms),
          fmtMs(power.loopMaxMs),
        ],
        [
          `tidal \`'process'\`, checkpoint every ${fmtInt(ckptEvery)} events`,
          fmtInt(withCkpt.perSec),
          ratio(withCkpt.perSec, rawProcess),
          fmtMs(withCkpt.ack.p50),
          fmtMs(withCkpt.ack.p99),
          fmtMs(withCkpt.loopP99Ms),
          fmtMs(withCkpt.loopMaxMs),
        ],
      ],
    ),
    '',
    rep.markdown(
      ["one durable signal, tidal `'process'`", 'µs'],
      [
        ['total (1 / ingest rate)', procUs.toFixed(2)],
        ['SQLite insert + commit (the raw run)', rawUs.toFixed(2)],
        ['in-memory signal state (SignalStore.apply alone)', applyUs.toFixed(2)],
        ['the rest: validation, queue, promises, garbage collection', (procUs - rawUs - applyUs).toFixed(2)],
      ],
    ),
    '',
    rep.markdown(
      ['checkpoint (main thread)', 'rows of 64 KiB', 'ms'],
      [
        [`full, ${fmtInt(slots)} slots`, String(ck.rows), fmtMs(ck.fullMs)],
        [`incremental, 10 % of rows dirty`, String(ck.dirtyRows), fmtMs(ck.incrementalMs)],
        ['full, 200,000 slots', String(ckBig.rows), fmtMs(ckBig.fullMs)],
        ['incremental, 10 % of rows dirty', String(ckBig.dirtyRows), fmtMs(ckBig.incrementalMs)],
      ],
    ),
    '',
    rep.markdown(
      [`overload: 2× the measured max, open loop, calls of ${OVERLOAD_CALL}`, 'value'],
      [
        ['offered signals/s', fmtInt(over.offeredPerSec)],
        [
          "accepted signals/s (vs max `'process'` above)",
          `${fmtInt(over.acceptedPerSec)} (${((over.acceptedPerSec / proc.perSec) * 100).toFixed(0)} %)`,
        ],
        ['refused with BackpressureError', `${(over.refusedShare * 100).toFixed(0)} % of signals (${fmtInt(over.refusedCalls)} calls)`],
        ['max queue depth seen / maxQueueEvents', `${fmtInt(over.maxDepthSeen)} / ${fmtInt(over.maxQueueEvents)}`],
        ['retryAfterMs p50 / p99 / max', `${fmtMs(over.retryAfter.p50)} / ${fmtMs(over.retryAfter.p99)} / ${fmtMs(over.retryAfter.max)}`],
        ['ack p50 / p99 ms (accepted calls)', `${fmtMs(over.ack.p50)} / ${fmtMs(over.ack.p99)}`],
        ['event-loop delay p99 ms', fmtMs(over.loopP99Ms)],
        [
          'resident memory start → max → end (MiB)',
          `${over.rssStartMiB.toFixed(0)} → ${over.rssMaxMiB.toFixed(0)} → ${over.rssEndMiB.toFixed(0)}`,
        ],
        ['heap used max (MiB)', over.heapMaxMiB.toFixed(0)],
      ],
    ),
  ].join('\n');
  log('```markdown');
  log(md);
  log('```');

  rep.set('raw', { processPerSec: rawProcess, powerPerSec: rawPower, processRounds: rawProcessRuns, powerRounds: rawPowerRuns });
  rep.set('ingest', {
    process: proc,
    power,
    withCheckpoints: withCkpt,
    processRounds: procRuns.map((x) => x.perSec),
    powerRounds: powerRuns.map((x) => x.perSec),
  });
  rep.set('breakdownUs', { total: procUs, raw: rawUs, apply: applyUs });
  rep.set('checkpoint', { slots, ...ck, big: ckBig });
  rep.set('overload', over);
  rep.set('loadAverage', { start: loadAtStart, end: loadAtEnd });
  rep.finish();
}

await main();
