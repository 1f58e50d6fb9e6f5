/**
 * `npm run bench:admission`: what admission costs the main thread.
 *
 * - Refusal: nanoseconds per query refused by the admission cap, (a) at the load detector alone
 *   (`enter()` throwing OverloadedError) and (b) through `db.retrieve` (the public call, its
 *   rejected promise included). For (b) the cap is held by queries issued in the same tick, so
 *   nothing completes while the refusals are timed.
 * - The floor under (b): a rejected promise, settled, which any promise-returning API pays.
 * - Work sharing: nanoseconds to build the key of a typical retrieve task.
 * - Scheduler: nanoseconds per admitted query that the scheduler (priority queue, pipeline slot
 *   accounting, removal on abort) adds over calling the task directly, with a task that resolves
 *   at once, so only the plumbing is measured.
 *
 * Flags: `--refusals N` per round (default 200 000), `--queries N` per round for the scheduler
 * (default 200 000), `--rounds N` (default 7, after one warm-up round; the median is reported).
 */

import { LoadDetector, OverloadedError } from 'tidal-load';
import { TidalDb } from 'tidal-core';
// The scheduler is internal to tidal-core: the bench takes it from the internal entry.
import { PRIORITY, QueryScheduler, canonicalKey } from 'tidal-core/internal';
import { Report, nowMs, parseOptions } from './harness/index.js';

const opts = parseOptions('admission', {
  refusals: { type: 'int', default: 200_000, description: 'refusals per round' },
  queries: { type: 'int', default: 200_000, description: 'queries per round through the scheduler' },
  rounds: { type: 'int', default: 7, description: 'timed rounds after one warm-up; the median is reported' },
});
const REFUSALS = opts.refusals;
const QUERIES = opts.queries;
const ROUNDS = opts.rounds;

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** Runs `round` ROUNDS + 1 times (the first is warm-up) and returns the median of its ns/op. */
async function rounds(round: () => number | Promise<number>): Promise<number> {
  await round();
  const xs: number[] = [];
  for (let i = 0; i < ROUNDS; i++) xs.push(await round());
  return median(xs);
}

function detectorRefusal(): number {
  const detector = new LoadDetector({ thresholds: { reducedCandidates: 1, coarseAggregates: 2, noDiversity: 3 }, admissionLimit: 4 });
  const held = [detector.enter(), detector.enter(), detector.enter(), detector.enter()];
  let refused = 0;
  const start = nowMs();
  for (let i = 0; i < REFUSALS; i++) {
    try {
      detector.enter();
    } catch (err) {
      if (err instanceof OverloadedError) refused++;
    }
  }
  const ns = ((nowMs() - start) * 1e6) / REFUSALS;
  for (const g of held) g[Symbol.dispose]();
  if (refused !== REFUSALS) throw new Error(`expected ${REFUSALS} refusals, got ${refused}`);
  return ns;
}

/** The detector's non-throwing entry, which `db.retrieve` and `db.search` use. */
function detectorTryEnter(): number {
  const detector = new LoadDetector({ thresholds: { reducedCandidates: 1, coarseAggregates: 2, noDiversity: 3 }, admissionLimit: 4 });
  const held = [detector.enter(), detector.enter(), detector.enter(), detector.enter()];
  let refused = 0;
  const start = nowMs();
  for (let i = 0; i < REFUSALS; i++) if (detector.tryEnter() instanceof OverloadedError) refused++;
  const ns = ((nowMs() - start) * 1e6) / REFUSALS;
  for (const g of held) g[Symbol.dispose]();
  if (refused !== REFUSALS) throw new Error(`expected ${REFUSALS} refusals, got ${refused}`);
  return ns;
}

/** The floor any promise-returning call pays for a refusal: a rejected promise, settled. */
async function rejectionFloor(): Promise<number> {
  const err = new Error('refused');
  const calls = new Array<Promise<unknown>>(REFUSALS);
  const start = nowMs();
  for (let i = 0; i < REFUSALS; i++) calls[i] = Promise.reject(err);
  await Promise.allSettled(calls);
  return ((nowMs() - start) * 1e6) / REFUSALS;
}

/** The work-sharing key of a typical retrieve task (filter, diversity, a 64-dimension context). */
function shareKey(): number {
  const context = Float32Array.from({ length: 64 }, (_, i) => Math.sin(i));
  const task = {
    profile: 'trending',
    context,
    filter: { category: { in: ['jazz', 'rock'] }, createdAt: { gte: 1_700_000_000_000 } },
    diversity: { maxPer: { creator: 2 } },
    limit: 20,
    window: '1h',
    exclude: null,
  };
  let length = 0;
  const start = nowMs();
  for (let i = 0; i < QUERIES; i++) length += canonicalKey(task).length;
  const ns = ((nowMs() - start) * 1e6) / QUERIES;
  if (length === 0) throw new Error('empty keys');
  return ns;
}

async function dbRefusal(db: TidalDb): Promise<number> {
  const admitted = Array.from({ length: db.load.admissionLimit }, (_, i) => db.retrieve({ profile: 'new', limit: i + 1 }));
  const calls = new Array<Promise<unknown>>(REFUSALS);
  const start = nowMs();
  for (let i = 0; i < REFUSALS; i++) calls[i] = db.retrieve({ profile: 'new', limit: 1 });
  const settled = await Promise.allSettled(calls);
  const ns = ((nowMs() - start) * 1e6) / REFUSALS;
  await Promise.all(admitted);
  const refused = settled.filter((s) => s.status === 'rejected' && OverloadedError.is(s.reason)).length;
  if (refused !== REFUSALS) throw new Error(`expected ${REFUSALS} refusals, got ${refused}`);
  return ns;
}

/** A batch of tasks that resolve at once, `inFlight` at a time, through `run`. */
async function closedLoop(run: (task: () => Promise<number>) => Promise<number>, inFlight: number): Promise<number> {
  const task = () => Promise.resolve(1);
  let issued = 0;
  let done = 0;
  const start = nowMs();
  await new Promise<void>((resolve) => {
    const next = (): void => {
      if (issued >= QUERIES) {
        if (done === QUERIES) resolve();
        return;
      }
      issued++;
      void run(task).then(() => {
        done++;
        next();
      });
    };
    for (let i = 0; i < inFlight; i++) next();
  });
  return ((nowMs() - start) * 1e6) / QUERIES;
}

async function main(): Promise<void> {
  const report = new Report('admission', opts);
  const rows: string[][] = [];
  const row = (what: string, ns: number, note = '') => {
    rows.push([what, ns.toFixed(0), note]);
    process.stderr.write(`${what}: ${ns.toFixed(0)} ns\n`);
  };
  row('refusal at the load detector (`enter()` throws OverloadedError)', await rounds(detectorRefusal));
  row('refusal at the load detector (`tryEnter()` returns it)', await rounds(detectorTryEnter));
  row('a rejected promise, settled (the floor of any async refusal)', await rounds(rejectionFloor));

  const db = await TidalDb.builder()
    .ephemeral()
    .workers(1)
    .schema({ signals: [{ name: 'view', halfLifeMs: 3_600_000 }] })
    .loadThresholds({ reducedCandidates: 1, coarseAggregates: 2, noDiversity: 3 })
    .admissionLimit(4)
    // Nothing answered from kept results: the queries holding the cap must stay in flight.
    .workSharing({ maxStalenessMs: { coarseAggregates: 0, noDiversity: 0 } })
    .open();
  try {
    await db.upsert({ id: 'a' });
    row('refusal through `db.retrieve` (call to settled rejection)', await rounds(() => dbRefusal(db)));
  } finally {
    await db.close();
  }

  row('work-sharing key of a retrieve task (64-dim context, filter)', await rounds(shareKey));
  const depth = 8;
  for (const inFlight of [1, depth, 4 * depth]) {
    const direct = await rounds(() => closedLoop((t) => t(), inFlight));
    const scheduler = new QueryScheduler({ depth });
    const scheduled = await rounds(() => closedLoop((t) => scheduler.submit(t, { priority: PRIORITY.default, signal: null }), inFlight));
    row(`admitted query, ${inFlight} in flight, depth ${depth}, direct`, direct);
    const added = `+${(scheduled - direct).toFixed(0)} ns`;
    row(`admitted query, ${inFlight} in flight, depth ${depth}, through the scheduler`, scheduled, added);
  }
  report.table(`ns per operation, median of ${ROUNDS} rounds`, ['operation', 'ns', 'over direct'], rows);
  report.set('rows', rows);
  report.finish();
}

await main();
