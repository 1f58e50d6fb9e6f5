/**
 * Each read type of `bench:serve --mix personal` at each degradation level, in process: the demo
 * corpus and the mix's users in a TidalDb (the items, users, histories and follows `tidal serve
 * --demo` and the serve bench's user build give), then per level and type a closed loop of
 * `--closed` calls through the public API (`db.retrieve`, `db.search`), the level forced by the
 * request's `level`, every request drawn afresh from the mix's generator (personal-mix.ts), the
 * levels of a type side by side in each of `--rounds` rounds. Reports calls per second and the
 * process's CPU time per call (every thread, from /proc schedstat; the main thread's apart), each
 * level's ratio to Full, and the share of answers that ran for their call (an answer shared with
 * another caller or kept from an earlier one has `ageMs` > 0: the target is about requests that
 * run). Then overlap@10 of each level's answer with Full's, per type.
 *
 * With `--baseline DIR` (another built checkout) both trees get the same corpus and users, and each
 * cell runs on both, the trees taking turns (the first alternating by round): after ÷ before of
 * calls per second and of the CPU per call, the main thread's apart. Overlap is this tree's only.
 */
import { InvalidInputError, TidalDb, type RetrieveRequest, type SearchRequest } from 'tidal-core';
import { loadDemo, tidalSchema } from 'tidal-serve/demo';
import { Corpus } from '../src/corpus.js';
import { Report, fmtInt, loadAverage, loadBaseline, nowMs, parseOptions } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';
import { readThreads, type ThreadTime } from '../src/serve/threads.js';
import {
  LEVEL_NAMES,
  PERSONAL_DEFAULTS,
  PERSONAL_READS,
  personalSpec,
  personalDrawer,
  type PersonalMixSpec,
  type ReadType,
} from '../src/serve/personal-mix.js';
import { writeUsers } from '../src/serve/personal-users.js';

const opts = parseOptions('level-throughput', {
  items: { type: 'int', default: 100_000, description: 'items of the demo corpus' },
  users: { type: 'int', default: 10_000, description: 'users of the personal mix' },
  closed: { type: 'int', default: 8, description: 'calls in flight' },
  seconds: { type: 'int', default: 2, description: 'seconds per type and level in each round' },
  rounds: { type: 'int', default: 3, description: 'rounds over every type and level' },
  warmup: { type: 'int', default: 2, description: 'seconds of the mix at each level before anything is measured' },
  types: { type: 'string', default: '', description: 'comma-separated read types (default: every one of the mix)' },
  levels: { type: 'string', default: '', description: 'comma-separated levels (default: all four)' },
  affinity: {
    type: 'boolean',
    description:
      "views and likes carry a preference rate (0.05 and 0.3, as bench:personalization's schema): each user's history gives it creator affinities (the demo's schema gives none)",
  },
  quality: { type: 'int', default: 100, description: "requests per type run at every level for overlap@10 with Full's answer (0: none)" },
  baseline: { type: 'string', default: '', description: 'another built checkout: both trees, side by side, after ÷ before per cell' },
});
const baseline = loadBaseline(opts.baseline === '' ? undefined : opts.baseline, ['tidal-core']);

/** What a closed loop calls: this tree's TidalDb, or the baseline's. */
interface ReadDb {
  retrieve(req: RetrieveRequest): Promise<{ ageMs: number; degradationLevel: number }>;
  search(req: SearchRequest): Promise<{ ageMs: number; degradationLevel: number }>;
  close(): Promise<void>;
}

interface Cell {
  /** 'after' (this tree) or 'before' (`--baseline`). */
  tree: string;
  type: ReadType | 'mix';
  level: string;
  calls: number;
  ran: number;
  perSecond: number;
  cpuUs: number;
  /** The part of `cpuUs` on the main thread (the caller's and the database's thread). */
  mainUs: number;
  atLevel: number;
}

function runNs(threads: readonly ThreadTime[], main: boolean): number {
  return threads.reduce((a, t) => a + ((t.tid === process.pid) === main ? t.runNs : 0), 0);
}

/** What one closed loop counted. */
interface Counts {
  calls: number;
  ran: number;
  atLevel: number;
  wallMs: number;
  mainNs: number;
  otherNs: number;
}

/** One closed loop: `closed` callers each taking the next request until `seconds` have passed. */
async function loop(
  db: ReadDb,
  draw: () => { path: string; body: Record<string, unknown> },
  level: number,
  seconds: number,
): Promise<Counts> {
  const c: Counts = { calls: 0, ran: 0, atLevel: 0, wallMs: 0, mainNs: 0, otherNs: 0 };
  const end = nowMs() + seconds * 1000;
  const threads0 = readThreads(process.pid);
  const t0 = nowMs();
  await Promise.all(
    Array.from({ length: opts.closed }, async () => {
      while (nowMs() < end) {
        const { path, body } = draw();
        const r =
          path === '/search' ? await db.search(body as unknown as SearchRequest) : await db.retrieve(body as unknown as RetrieveRequest);
        c.calls++;
        if (r.ageMs === 0) c.ran++;
        if (r.degradationLevel === level) c.atLevel++;
      }
    }),
  );
  c.wallMs = nowMs() - t0;
  const threads1 = readThreads(process.pid);
  c.mainNs = runNs(threads1, true) - runNs(threads0, true);
  c.otherNs = runNs(threads1, false) - runNs(threads0, false);
  return c;
}

/**
 * overlap@10 with Full's answer: `--quality` requests per type, each run at every level back to
 * back (the same request, the clock a few milliseconds on), the share of Full's top 10 ids (or
 * of all of them, when fewer) in the level's top 10, averaged over the requests.
 */
async function quality(db: TidalDb, spec: PersonalMixSpec, types: readonly ReadType[], report: Report): Promise<Record<string, number[]>> {
  const out: Record<string, number[]> = {};
  for (const type of types) {
    const next = personalDrawer({ ...spec, only: type }, mulberry32(7_000 + types.indexOf(type)));
    const sums = LEVEL_NAMES.map(() => 0);
    for (let q = 0; q < opts.quality; q++) {
      const r = next();
      const body = JSON.parse(r.body as string) as Record<string, unknown>;
      const top: string[][] = [];
      for (const level of LEVEL_NAMES) {
        const req = { ...body, level, limit: 10 };
        const res =
          r.path === '/search'
            ? (await db.search(req as unknown as SearchRequest)).hits
            : (await db.retrieve(req as unknown as RetrieveRequest)).items;
        top.push(res.map((x) => x.id));
      }
      const full = new Set(top[0]);
      for (let l = 0; l < LEVEL_NAMES.length; l++)
        sums[l]! += full.size === 0 ? 1 : top[l]!.filter((id) => full.has(id)).length / full.size;
    }
    out[type] = sums.map((x) => x / opts.quality);
  }
  report.table(
    `overlap@10 with Full's answer, ${opts.quality} requests per type`,
    ['type', ...LEVEL_NAMES],
    types.map((t) => [t, ...out[t]!.map((x) => x.toFixed(2))]),
  );
  return out;
}

/** A comma-separated flag's names, each one of `all` (empty: all of them). @throws InvalidInputError naming the flag. */
function listFlag<T extends string>(flag: string, value: string, all: readonly T[]): T[] {
  if (value === '') return [...all];
  const names = value.split(',');
  for (const n of names) if (!all.includes(n as T)) throw new InvalidInputError(flag, `a comma-separated list of ${all.join(', ')}`, n);
  return names as T[];
}

// Checked before anything is built: a bad name ends the run with exit code 2, naming the flag.
let types: ReadType[];
let levels: (typeof LEVEL_NAMES)[number][];
try {
  types = listFlag('--types', opts.types, Object.keys(PERSONAL_READS) as ReadType[]);
  levels = listFlag('--levels', opts.levels, LEVEL_NAMES);
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(2);
}

/** The demo's schema (`tidal serve --demo`), or with `--affinity` its signals moving preferences and affinities. */
function schema() {
  const base = { ...tidalSchema(128), creatorField: 'creator' };
  if (!opts.affinity) return base;
  const [view, like] = base.signals;
  return {
    ...base,
    signals: [
      { ...view, windows: [...view.windows], preference: 0.05 },
      { ...like, windows: [...like.windows], preference: 0.3 },
    ],
  };
}

async function main(): Promise<void> {
  const report = new Report('level-throughput', opts);
  const open = async (Db: typeof TidalDb) => (await Db.builder().schema(schema()).ephemeral().workers(2).open()) as unknown as ReadDb;
  const sides: { tree: string; db: ReadDb }[] = [{ tree: 'after', db: await open(TidalDb) }];
  if (baseline) {
    const before = await baseline.load<{ TidalDb: typeof TidalDb }>('tidal-core');
    sides.push({ tree: 'before', db: await open(before.TidalDb) });
    report.line(`Baseline: ${baseline.dir} at ${baseline.commit} (before) against this tree (after).`);
  }
  const db = sides[0]!.db as unknown as TidalDb;
  try {
    const t0 = nowMs();
    const corpus = new Corpus({ items: opts.items, dims: 128, seed: 42 });
    const spec = personalSpec(corpus, opts.users, 0);
    for (const side of sides) {
      const d = side.db as unknown as TidalDb;
      await loadDemo(d, { items: opts.items });
      await writeUsers(d, corpus, spec, PERSONAL_DEFAULTS.follows);
      await d.warm({ waitForAnn: true });
    }
    report.line(
      `${fmtInt(opts.items)} items, ${fmtInt(opts.users)} users loaded in ${((nowMs() - t0) / 1000).toFixed(0)} s; load average ${loadAverage()}`,
    );
    const cells: Cell[] = [];
    let seed = 900;
    const drawer = (s: PersonalMixSpec, at: number) => {
      const next = personalDrawer(s, mulberry32(at));
      return () => {
        const r = next();
        return { path: r.path, body: JSON.parse(r.body as string) as Record<string, unknown> };
      };
    };
    // Every path optimized before the first cell: otherwise Full, measured first, pays for it.
    for (const side of sides)
      for (const level of levels) await loop(side.db, drawer({ ...spec, level }, seed++), LEVEL_NAMES.indexOf(level), opts.warmup);
    // Rounds, and in each the levels of a type side by side, so that the machine's drift falls on
    // every level alike: the ratios to Full are the figures to read on a shared machine. With a
    // baseline each cell runs on both trees, the same requests, the first tree alternating by round.
    const sums = new Map<string, Counts>();
    for (let round = 0; round < opts.rounds; round++) {
      // The mix as a whole (reads only, by their shares), then each type alone.
      for (const type of ['mix', ...types] as const) {
        for (const level of levels) {
          const at = seed++;
          for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
            const draw = drawer(type === 'mix' ? { ...spec, level } : { ...spec, only: type, level }, at);
            const c = await loop(side.db, draw, LEVEL_NAMES.indexOf(level), opts.seconds);
            const key = `${side.tree}|${type}|${level}`;
            const sum = sums.get(key) ?? { calls: 0, ran: 0, atLevel: 0, wallMs: 0, mainNs: 0, otherNs: 0 };
            for (const k of Object.keys(sum) as (keyof Counts)[]) sum[k] += c[k];
            sums.set(key, sum);
            process.stderr.write(
              `  round ${round + 1} ${sides.length > 1 ? `${side.tree.padEnd(7)}` : ''}${level.padEnd(17)} ${type.padEnd(15)} ${((c.calls * 1000) / c.wallMs).toFixed(0)}/s, ${((c.mainNs + c.otherNs) / 1000 / c.calls).toFixed(0)} µs CPU per call (${(c.mainNs / 1000 / c.calls).toFixed(0)} main), ${((c.ran / c.calls) * 100).toFixed(0)} % ran\n`,
            );
          }
        }
      }
    }
    for (const side of sides) {
      for (const type of ['mix', ...types] as const) {
        for (const level of levels) {
          const c = sums.get(`${side.tree}|${type}|${level}`)!;
          cells.push({
            tree: side.tree,
            type,
            level,
            calls: c.calls,
            ran: c.ran,
            perSecond: (c.calls * 1000) / c.wallMs,
            cpuUs: (c.mainNs + c.otherNs) / 1000 / c.calls,
            mainUs: c.mainNs / 1000 / c.calls,
            atLevel: c.atLevel / c.calls,
          });
        }
      }
    }
    const mine = cells.filter((c) => c.tree === 'after');
    const full = (t: Cell['type']) => mine.find((c) => c.type === t && c.level === 'Full') ?? mine.find((c) => c.type === t)!;
    report.table(
      'In process, closed loop, per type and level',
      ['type', 'level', 'calls', 'ran for the call', 'at level', 'calls/s', 'CPU µs / call', 'main thread', 'calls/s ÷ Full', 'CPU ÷ Full'],
      mine.map((c) => [
        c.type,
        c.level,
        fmtInt(c.calls),
        `${((c.ran / c.calls) * 100).toFixed(0)} %`,
        `${(c.atLevel * 100).toFixed(0)} %`,
        c.perSecond.toFixed(0),
        c.cpuUs.toFixed(0),
        c.mainUs.toFixed(0),
        (c.perSecond / full(c.type).perSecond).toFixed(2),
        (c.cpuUs / full(c.type).cpuUs).toFixed(2),
      ]),
    );
    if (baseline) {
      const before = (c: Cell) => cells.find((b) => b.tree === 'before' && b.type === c.type && b.level === c.level)!;
      report.table(
        'After ÷ before, the same requests, the trees taking turns',
        [
          'type',
          'level',
          'calls/s before / after',
          'after ÷ before',
          'CPU µs / call before / after',
          'main thread before / after',
          'CPU after ÷ before',
        ],
        mine.map((c) => {
          const b = before(c);
          return [
            c.type,
            c.level,
            `${b.perSecond.toFixed(0)} / ${c.perSecond.toFixed(0)}`,
            `${(c.perSecond / b.perSecond).toFixed(2)}×`,
            `${b.cpuUs.toFixed(0)} / ${c.cpuUs.toFixed(0)}`,
            `${b.mainUs.toFixed(0)} / ${c.mainUs.toFixed(0)}`,
            `${(c.cpuUs / b.cpuUs).toFixed(2)}×`,
          ];
        }),
      );
    }
    report.set('cells', cells);
    if (opts.quality > 0) report.set('overlap', await quality(db, spec, types, report));
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
