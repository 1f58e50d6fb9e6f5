/**
 * The writes of `bench:serve --mix personal` in process: the demo corpus and the mix's users in a
 * TidalDb, then a closed loop of `--closed` single-event calls through the public API, each drawn
 * afresh as the mix draws its writes (80 % signals naming a user, 10 % hides, 10 % follows: what
 * a server's write routes do per request), for `--seconds` per round. Reports writes per second
 * and the CPU per write (every thread; the database's thread apart: it commits every write and
 * applies it to the user state, the seen sets and the co-engagement lists).
 *
 * With `--baseline DIR` (another built checkout) both trees get the same corpus and users and the
 * same writes, taking turns round by round: after ÷ before. `--mmap-threshold-kb` is process-wide:
 * compare two settings in separate processes, taking turns.
 */
import { TidalDb } from 'tidal-core';
import { loadDemo, tidalSchema } from 'tidal-serve/demo';
import { Corpus } from '../src/corpus.js';
import { Report, fmtInt, loadAverage, loadBaseline, nowMs, parseOptions } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';
import { readThreads } from '../src/serve/threads.js';
import { PERSONAL_DEFAULTS, personalDrawer, personalSpec } from '../src/serve/personal-mix.js';
import { writeUsers } from '../src/serve/personal-users.js';

const opts = parseOptions('user-writes', {
  items: { type: 'int', default: 100_000, description: 'items of the demo corpus' },
  users: { type: 'int', default: 10_000, description: 'users of the personal mix' },
  closed: { type: 'int', default: 16, description: 'calls in flight' },
  seconds: { type: 'int', default: 3, description: 'seconds per tree in each round' },
  rounds: { type: 'int', default: 4, description: 'rounds (each tree once per round)' },
  baseline: { type: 'string', default: '', description: 'another built checkout: both trees, side by side, after ÷ before' },
  'mmap-threshold-kb': {
    type: 'int',
    default: -1,
    min: -1,
    description: "the database's mmapThresholdKb (process-wide, so compared in separate processes; -1: its default)",
  },
  module: {
    type: 'boolean',
    description: 'a worker module in the query workers (as tidal serve runs): users and co-engagement then live in the shared records',
  },
});
/** A module that only reports memory when asked (the memory suite's): what matters is that there is one. */
const MODULE = new URL('../src/harness/memory-worker.js', import.meta.url);

/** The probe's database on `builder`: two workers, and the worker module with `--module`. */
function configure<B extends { workers(n: number): B; workerModule(url: URL, data?: unknown): B; mmapThresholdKb?(kb: number): B }>(
  builder: B,
): B {
  let b = builder.workers(2);
  if (opts['mmap-threshold-kb'] >= 0) b = b.mmapThresholdKb!(opts['mmap-threshold-kb']);
  return opts.module ? b.workerModule(MODULE, { channel: `user-writes-${process.pid}-${Math.random()}` }) : b;
}
const baseline = loadBaseline(opts.baseline === '' ? undefined : opts.baseline, ['tidal-core']);

interface Side {
  tree: string;
  db: TidalDb;
  writes: number;
  wallMs: number;
  mainNs: number;
  otherNs: number;
}

/** One closed loop of the mix's writes on `db`, drawn from `seed`. */
async function loop(side: Side, spec: ReturnType<typeof personalSpec>, seed: number): Promise<void> {
  const next = personalDrawer(spec, mulberry32(seed));
  const end = nowMs() + opts.seconds * 1000;
  const threads0 = readThreads(process.pid);
  const t0 = nowMs();
  let writes = 0;
  await Promise.all(
    Array.from({ length: opts.closed }, async () => {
      while (nowMs() < end) {
        const r = next();
        const body = JSON.parse(r.body as string) as Record<string, string>;
        const user = /^\/users\/([^/]+)\//.exec(r.path)?.[1];
        if (r.type === 'write:signal') await side.db.signal({ item: body['item']!, kind: body['kind']!, user: body['user']! });
        else if (r.type === 'write:hide') await side.db.hide({ user: user!, item: body['item']! });
        else await side.db.follow({ user: user!, creator: body['creator']! });
        writes++;
      }
    }),
  );
  side.wallMs += nowMs() - t0;
  side.writes += writes;
  for (const t of readThreads(process.pid)) {
    const before = threads0.find((x) => x.tid === t.tid)?.runNs ?? 0;
    if (t.tid === process.pid) side.mainNs += t.runNs - before;
    else side.otherNs += t.runNs - before;
  }
}

async function main(): Promise<void> {
  const report = new Report('user-writes', opts);
  const schema = { ...tidalSchema(128), creatorField: 'creator' };
  const sides: Side[] = [
    {
      tree: 'after',
      db: await configure(TidalDb.builder().schema(schema).ephemeral()).open(),
      writes: 0,
      wallMs: 0,
      mainNs: 0,
      otherNs: 0,
    },
  ];
  if (baseline) {
    const before = await baseline.load<{ TidalDb: typeof TidalDb }>('tidal-core');
    const db = (await configure(before.TidalDb.builder().schema(schema).ephemeral()).open()) as unknown as TidalDb;
    sides.push({ tree: 'before', db, writes: 0, wallMs: 0, mainNs: 0, otherNs: 0 });
    report.line(`Baseline: ${baseline.dir} at ${baseline.commit} (before) against this tree (after).`);
  }
  try {
    const t0 = nowMs();
    const corpus = new Corpus({ items: opts.items, dims: 128, seed: 42 });
    const spec = { ...personalSpec(corpus, opts.users, 1), writeShare: 1 };
    for (const side of sides) {
      await loadDemo(side.db, { items: opts.items });
      await writeUsers(side.db, corpus, spec, PERSONAL_DEFAULTS.follows);
      await side.db.warm({ waitForAnn: true });
    }
    report.line(
      `${fmtInt(opts.items)} items, ${fmtInt(opts.users)} users loaded in ${((nowMs() - t0) / 1000).toFixed(0)} s; load average ${loadAverage()}`,
    );
    // A first loop each, not counted: the paths compiled before anything is measured.
    for (const side of sides) {
      const warm = { ...side };
      await loop(warm, spec, 1);
    }
    for (let round = 0; round < opts.rounds; round++) {
      for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
        const before = { writes: side.writes, mainNs: side.mainNs, wallMs: side.wallMs };
        await loop(side, spec, 100 + round);
        const n = side.writes - before.writes;
        process.stderr.write(
          `  round ${round + 1} ${side.tree.padEnd(7)} ${((n * 1000) / (side.wallMs - before.wallMs)).toFixed(0)} writes/s, ${((side.mainNs - before.mainNs) / 1000 / n).toFixed(0)} µs of the main thread per write\n`,
        );
      }
    }
    const row = (s: Side) => [
      s.tree,
      fmtInt(s.writes),
      ((s.writes * 1000) / s.wallMs).toFixed(0),
      ((s.mainNs + s.otherNs) / 1000 / s.writes).toFixed(0),
      (s.mainNs / 1000 / s.writes).toFixed(0),
    ];
    report.table(
      `Single-event writes of the personal mix, closed loop of ${opts.closed}`,
      ['tree', 'writes', 'writes/s', 'CPU µs / write', 'main thread µs / write'],
      sides.map(row),
    );
    if (baseline) {
      const [a, b] = sides as [Side, Side];
      report.line(
        `after ÷ before: writes/s ${(a.writes / a.wallMs / (b.writes / b.wallMs)).toFixed(2)}×, main thread per write ${(a.mainNs / a.writes / (b.mainNs / b.writes)).toFixed(2)}×`,
      );
    }
    report.set(
      'sides',
      sides.map(({ tree, writes, wallMs, mainNs, otherNs }) => ({ tree, writes, wallMs, mainNs, otherNs })),
    );
    report.set('loadAverageEnd', loadAverage());
    report.finish();
  } finally {
    for (const side of sides) await side.db.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
