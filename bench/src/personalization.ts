/**
 * `npm run bench:personalization`: `for_you` and `related` at the caller (through a worker, one
 * query at a time), against the same rankings written by hand in SQL over the same data; the
 * write cost of a user signal against a plain one; and the cost and quality of each degradation
 * level for following, hot, rising, top and related.
 *
 * Data: the bench corpus (`--items`, default 100 000, with its view and like signals), then
 * `--users` (default 10 000) users with `--history` (default 20) signals each, drawn mostly from
 * one favourite category (a like in three), and 5 follows each. The SQL side is one SQLite file
 * holding the same items, embeddings, signals, the users' histories and, for `for_you`, each
 * user's preference vector and creator affinities as tidal computed them (so both rank by the
 * same inputs); its for_you scores every item (a cosine UDF over the embedding BLOBs, the window
 * count by index), its related counts co-engagement within the same 8-event window by a self-join.
 * Then where the time goes: at the caller against the worker's service time (each kind of query
 * at a level of its own, so that level's service-time window holds it alone), the cheapest worker
 * query as the round trip's floor, and the ANN search alone on this thread over the workers' snapshot.
 * Then two A/B pairs, interleaved: for_you at one clock (trending kept per worker) against the
 * clock moved before each query (trending walked every time), and the ANN search at each level's
 * k with expansion k against the built 128 (time, and the neighbours both share).
 * Last, for_you's quality per level against the exhaustive ranking (every item scored by the same
 * mix) and against the former Full (the 500 ANN neighbours alone).
 *
 * Flags: `--items N`, `--users N`, `--history N`, `--queries N` (timed per side, default 300;
 * the SQL for_you runs a tenth of them, at least 20), `--warmup N` (related calls, each beside its
 * SQL, with a for_you every tenth, on other users and items before anything is timed; default 1 000).
 * With `--baseline DIR` (another built checkout) it runs only the personalized reads of both trees,
 * interleaved (personalization-trees.ts).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import {
  DegradationLevel,
  TidalDb,
  type DegradationLevelName,
  type RetrieveRequest,
  type SchemaDefinition,
  type SignalInput,
} from 'tidal-core';
import { AnnIndex, FOR_YOU_BUDGETS, forYouBudgetAt, levelPlan } from 'tidal-query';
import { Corpus, personalizationSchema } from './corpus.js';
import { mulberry32 } from './random.js';
import { internalsOf } from 'tidal-core/internal';
import {
  exhaustiveTop,
  features,
  forYouTask,
  overlapAt10,
  sourceRecall,
  sweep,
  sweepContext,
  sweepSets,
  sweepTable,
  ExactNeighbours,
  type ForYouData,
  type SweepUser,
} from './for-you-sweep.js';
import { Report, collectGarbage, fmtInt, fmtMs, fmtRatio, loadBaseline, nowMs, parseOptions, summarize } from './harness/index.js';
import { compareTrees } from './personalization-trees.js';
import { FOLLOWS_PER_USER, drawFollows, drawHistory, favouriteOf } from './personal-draw.js';
import { logMemory } from './harness/memory.js';

const opts = parseOptions('personalization', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  users: { type: 'int', default: 10_000, description: 'users with a history' },
  history: { type: 'int', default: 20, description: 'signals per user' },
  queries: { type: 'int', default: 300, description: 'timed queries per side (the SQL for_you runs a tenth, at least 20)' },
  warmup: { type: 'int', default: 1000, description: 'untimed related calls (with their SQL) before anything is timed' },
  sweep: {
    type: 'string',
    default: '',
    description:
      "only for_you's quality: where the exhaustive top items lie in each source, then every level's plan and these budget sets (`[Level:]field=n,...` separated by `/`, or `plans`) side by side on this thread",
  },
  'exact-ann': {
    type: 'boolean',
    description:
      "with --sweep: each user's exact nearest neighbours stand in for the ANN index, which is not built (quality of exact neighbours; times without the ANN search)",
  },
  'sweep-users': { type: 'int', default: 100, description: 'users of the sweep' },
  'sweep-no-affinity': {
    type: 'boolean',
    description:
      "with --sweep: the sweep's users without their creator affinities (in the exhaustive ranking too), as the serve mix's users, who only view",
  },
  'sweep-reps': { type: 'int', default: 3, description: 'timed passes of the sweep over its users' },
  dir: {
    type: 'string',
    default: '',
    description:
      'keep the database and its SQL copy in DIR; a later run with the same --items, --users and --history reopens them instead of loading',
  },
  baseline: {
    type: 'string',
    description: "another built checkout: its personalized reads against this tree's, interleaved, instead of the SQL comparison",
  },
});
const baseline = loadBaseline(opts.baseline, ['tidal-core']);
const ITEMS = opts.items;
const USERS = opts.users;
const HISTORY = opts.history;
const QUERIES = opts.queries;
const WARMUP = opts.warmup;
const DIMS = 128;
const LEVELS: DegradationLevelName[] = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'];
let report: Report | undefined;
const log = (s = ''): void => (report ? report.line(s) : void process.stdout.write(`${s}\n`));

async function main(): Promise<void> {
  if (baseline) {
    const before = await baseline.load<{ TidalDb: typeof TidalDb }>('tidal-core');
    const r = new Report('personalization', opts);
    const o = { items: ITEMS, users: USERS, history: HISTORY, queries: QUERIES, dims: DIMS, schema: personalizationSchema(DIMS) };
    await compareTrees(baseline, before.TidalDb, TidalDb, o, r);
    r.finish();
    return;
  }
  const corpus = new Corpus({ items: ITEMS, dims: DIMS });
  const now = corpus.now;
  // Typed as a SchemaDefinition: the events are generated with kinds as strings.
  const schema: SchemaDefinition = personalizationSchema(DIMS);
  const dir = opts.dir === '' ? fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-bench-personal-')) : path.resolve(opts.dir);
  fs.mkdirSync(dir, { recursive: true });
  // What a kept directory was loaded with: a run that asks for the same reopens it (the ANN index
  // from its snapshot) and skips every write; any other run starts the directory afresh.
  const marker = path.join(dir, 'personalization-bench.json');
  const loadedWith = JSON.stringify({ items: ITEMS, users: USERS, history: HISTORY, dims: DIMS });
  const reuse = opts.dir !== '' && fs.existsSync(marker) && fs.readFileSync(marker, 'utf8') === loadedWith;
  if (opts.dir !== '' && !reuse) {
    for (const f of fs.readdirSync(dir)) fs.rmSync(path.join(dir, f), { recursive: true, force: true });
  }
  // Work sharing off: the level table repeats identical queries, and each must run.
  // The clock stands still except in the trending A/B, where one side moves it a millisecond a query.
  let clockMs = now;
  const db = await TidalDb.builder()
    .path(dir)
    .clock(() => clockMs)
    .schema(schema)
    .workSharing({ maxStalenessMs: { coarseAggregates: 0, noDiversity: 0 } })
    .capacity({ items: ITEMS + 1000, signalSlots: 2 * ITEMS + 1000 })
    .open();
  const sql = new Database(path.join(dir, 'baseline.db'));
  sql.pragma('journal_mode = WAL');
  if (!reuse)
    sql.exec(`
    CREATE TABLE items(rowid INTEGER PRIMARY KEY, id TEXT, creator TEXT, created_at REAL, embedding BLOB);
    CREATE TABLE signals(item INTEGER, kind TEXT, at REAL);
    CREATE INDEX signals_kind_at ON signals(kind, at, item);
    CREATE TABLE history(user INTEGER, pos INTEGER, item INTEGER, at REAL, PRIMARY KEY(user, pos)) WITHOUT ROWID;
    CREATE INDEX history_item ON history(item, user, pos);
    CREATE TABLE affinity(user INTEGER, creator TEXT, score REAL, PRIMARY KEY(user, creator)) WITHOUT ROWID;
  `);

  report = new Report('personalization', opts);
  log(`${fmtInt(ITEMS)} items, ${fmtInt(USERS)} users × ${HISTORY} signals, ${QUERIES} queries per side.\n`);
  if (reuse) log(`Reopening ${dir} (loaded by an earlier run with the same flags): no write is timed.\n`);

  // ---- load ------------------------------------------------------------------------------------
  const t = nowMs();
  const byCategory = new Map<string, number[]>();
  const creatorOf: string[] = [];
  const created = new Float64Array(ITEMS);
  const embeddings = new Float32Array(ITEMS * DIMS);
  const insertItem = sql.prepare('INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?, ?)');
  for (const batch of corpus.items(1000)) {
    if (!reuse) await db.upsertItems(batch);
    sql.transaction(() => {
      for (const it of batch) {
        const i = corpus.indexOf(it.id);
        creatorOf[i] = it.metadata.creator;
        created[i] = it.createdAt;
        embeddings.set(it.embedding, i * DIMS);
        let l = byCategory.get(it.metadata.category);
        if (!l) byCategory.set(it.metadata.category, (l = []));
        l.push(i);
        if (!reuse)
          insertItem.run(
            i,
            it.id,
            it.metadata.creator,
            it.createdAt,
            Buffer.from(it.embedding.buffer, it.embedding.byteOffset, it.embedding.byteLength),
          );
      }
    })();
  }
  const insertSignal = sql.prepare('INSERT INTO signals VALUES (?, ?, ?)');
  for (const batch of reuse ? [] : corpus.signalBatches(1000)) {
    await db.signals(batch);
    sql.transaction(() => {
      for (const s of batch) insertSignal.run(corpus.indexOf(s.item), s.kind, s.at);
    })();
  }
  log(`Corpus loaded in ${((nowMs() - t) / 1000) | 0} s.`);
  collectGarbage();
  const heapBefore = process.memoryUsage().heapUsed;

  // Users and their histories, interleaved with plain signals of the same size to time both.
  const rand = mulberry32(0x9e5);
  const users = Array.from({ length: USERS }, (_, u) => `user-${u}`);
  // Each loading step's time, printed as it ends: at 1 000 000 items the steps differ by minutes.
  let stepAt = nowMs();
  const step = (what: string): void => {
    log(`  ${what}: ${((nowMs() - stepAt) / 1000).toFixed(1)} s`);
    stepAt = nowMs();
  };
  for (let i = 0; i < USERS && !reuse; i += 1000) await db.upsertUsers(users.slice(i, i + 1000).map((id) => ({ id })));
  const insertHistory = sql.prepare('INSERT INTO history VALUES (?, ?, ?, ?)');
  const histories: number[][] = [];
  const events: SignalInput[][] = [];
  for (let u = 0; u < USERS; u++) {
    const h = drawHistory(rand, corpus, favouriteOf(byCategory, u), users[u]!, HISTORY, now);
    histories.push(h.items);
    events.push(h.events);
  }
  step(`${fmtInt(USERS)} users upserted, their histories drawn`);
  const BATCH_USERS = 50;
  let userMs = 0;
  let plainMs = 0;
  let userSignals = 0;
  for (let u = 0; u < USERS && !reuse; u += BATCH_USERS) {
    const batch = events.slice(u, u + BATCH_USERS).flat();
    // The same batch without users, to items with no state of their own: the plain cost.
    const plain = batch.map((s) => ({ item: `plain-${userSignals % 5000}`, kind: s.kind, at: s.at }));
    let s = nowMs();
    await db.signals(batch);
    userMs += nowMs() - s;
    s = nowMs();
    await db.signals(plain);
    plainMs += nowMs() - s;
    userSignals += batch.length;
    if ((u / BATCH_USERS) % 40 === 39) log(`    signals: ${fmtInt(u + BATCH_USERS)} of ${fmtInt(USERS)} users`);
  }
  if (!reuse) step(`${fmtInt(userSignals)} user signals and as many plain ones written`);
  if (!reuse)
    sql.transaction(() => {
      for (let u = 0; u < USERS; u++) histories[u]!.forEach((i, pos) => insertHistory.run(u, pos, i, events[u]![pos]!.at));
    })();
  // Follows a thousand at a time (the group commit batches them; one await each is one commit each).
  for (let u = 0; u < USERS && !reuse; u += 200) {
    const calls: Promise<void>[] = [];
    for (let v = u; v < Math.min(USERS, u + 200); v++) {
      for (const creator of drawFollows(rand, favouriteOf(byCategory, v), creatorOf)) calls.push(db.follow({ user: users[v]!, creator }));
    }
    await Promise.all(calls);
  }
  if (!reuse) step(`the histories copied to SQL, ${fmtInt(USERS * FOLLOWS_PER_USER)} follows written`);
  const insertAffinity = sql.prepare('INSERT INTO affinity VALUES (?, ?, ?)');
  const preference: Float32Array[] = [];
  for (let u = 0; u < USERS; u++) {
    const state = (await db.getUser(users[u]!))!;
    preference.push(state.preference ?? new Float32Array(DIMS));
    if (!reuse)
      sql.transaction(() => {
        for (const [c, s] of Object.entries(state.affinity)) insertAffinity.run(u, c, s);
      })();
  }
  step('every user read back (preference, affinity) and copied to SQL');
  const exactAnn = opts.sweep !== '' && opts['exact-ann'];
  // The sweep and the timings are of the ANN index: wait for it when the warm leaves it to its own thread.
  if (!exactAnn) await db.warm({ waitForAnn: true });
  if (!exactAnn)
    step(reuse ? 'warm() (the ANN index mapped from its snapshot)' : 'warm() (the ANN index built over the items, the workers caught up)');
  if (opts.dir !== '') fs.writeFileSync(marker, loadedWith);
  collectGarbage();
  const heapUsers = process.memoryUsage().heapUsed - heapBefore;
  log(
    `Main-thread heap grown by the users, their state and the co-engagement index: ${fmtInt(heapUsers / 1048576)} MiB (${fmtInt(heapUsers / USERS)} B per user).`,
  );
  log(`Users loaded in ${((nowMs() - t) / 1000) | 0} s in all.`);
  report.set('memoryAfterLoad', logMemory('after load (items, users, signals, warm)', log));

  // The corpus as the exhaustive ranking reads it, and the first users of the timed queries'
  // sequence as the sweep sees them.
  let data: ForYouData | undefined;
  const forYouData = (): ForYouData => {
    if (data) return data;
    const velocity = new Float64Array(ITEMS);
    let maxVelocity = 0;
    for (let i = 0; i < ITEMS; i++) {
      velocity[i] = db.itemSignals(corpus.id(i)).view?.velocity?.['1h'] ?? 0;
      if (velocity[i]! > maxVelocity) maxVelocity = velocity[i]!;
    }
    return (data = { dims: DIMS, now, embeddings, created, velocity, maxVelocity, creatorOf });
  };
  const sweepUsers = async (n: number): Promise<SweepUser[]> => {
    const r = mulberry32(0x51);
    const out: SweepUser[] = [];
    for (let q = 0; q < n; q++) {
      const id = users[Math.floor(r() * USERS)]!;
      const st = (await db.getUser(id))!;
      if (!st.preference) continue;
      const state = internalsOf(db).users.queryState('user', id, false, false);
      if (opts['sweep-no-affinity']) {
        out.push({
          id,
          preference: st.preference,
          affinity: new Map(),
          state: { ...state, affinityCreators: [], affinityScores: new Float64Array(0) },
        });
        continue;
      }
      out.push({ id, preference: st.preference, affinity: new Map(Object.entries(st.affinity).filter(([, a]) => a > 0)), state });
    }
    return out;
  };
  const snapshotFile = (): string | undefined => fs.readdirSync(dir).find((f) => /^ann-[0-9]+-[0-9a-f]+\.usearch$/.test(f));
  if (opts.sweep !== '') {
    const data = forYouData();
    const sweepers = await sweepUsers(opts['sweep-users']);
    await forYouSweepRun(db, dir, exactAnn ? new ExactNeighbours(data, sweepers, 2048) : snapshotFile()!, data, sweepers);
    await db.close();
    sql.close();
    if (opts.dir === '') fs.rmSync(dir, { recursive: true, force: true });
    report.finish();
    return;
  }
  if (!reuse)
    log(
      `\nWrite cost, interleaved batches of ${BATCH_USERS * HISTORY}: ${fmtInt(userSignals)} user signals ${fmtMs((userMs / userSignals) * 1000)} µs each, ` +
        `the same batches without a user ${fmtMs((plainMs / userSignals) * 1000)} µs each: ${fmtRatio(userMs / plainMs)}.`,
    );

  // ---- for_you and related against SQL ---------------------------------------------------------
  sql.function('cosine', { deterministic: true }, (blob: unknown, q: unknown) => {
    const a = new Float32Array((blob as Buffer).buffer, (blob as Buffer).byteOffset, DIMS);
    const b = new Float32Array((q as Buffer).buffer, (q as Buffer).byteOffset, DIMS);
    let d = 0;
    let na = 0;
    let nb = 0;
    for (let k = 0; k < DIMS; k++) {
      d += a[k]! * b[k]!;
      na += a[k]! * a[k]!;
      nb += b[k]! * b[k]!;
    }
    return d / Math.sqrt(na * nb);
  });
  // for_you written out: 0.4·max(0, cos) + 0.3·velocity/max + 0.2·2^(−age/24h) + 0.1·affinity/max.
  const forYouSql = sql.prepare(`
    WITH vel AS (SELECT item, COUNT(*) / 3600.0 AS v FROM signals WHERE kind = 'view' AND at >= @since GROUP BY item),
         mv AS (SELECT MAX(v) AS m FROM vel),
         aff AS (SELECT creator, MAX(score, 0) AS a FROM affinity WHERE user = @user),
         ma AS (SELECT MAX(a) AS m FROM aff)
    SELECT i.id,
           0.4 * MAX(0, cosine(i.embedding, @pref))
         + 0.3 * COALESCE(vel.v / NULLIF(mv.m, 0), 0)
         + 0.2 * POWER(2, -MAX(0, @now - i.created_at) / 86400000.0)
         + 0.1 * COALESCE(aff.a / NULLIF(ma.m, 0), 0) AS score
    FROM items i LEFT JOIN vel ON vel.item = i.rowid LEFT JOIN aff ON aff.creator = i.creator, mv, ma
    ORDER BY score DESC LIMIT 20`);
  // related written out: pairs within 8 positions of one user's history, each counted once per pair event.
  const relatedSql = sql.prepare(`
    SELECT i.id, COUNT(*) AS n FROM history a JOIN history b ON b.user = a.user AND b.pos BETWEEN a.pos - 8 AND a.pos + 8 AND b.item != a.item
    JOIN items i ON i.rowid = b.item
    WHERE a.item = ? GROUP BY b.item ORDER BY n DESC, b.item LIMIT 20`);

  const qrand = mulberry32(0x51);
  const forYouUsers = Array.from({ length: QUERIES }, () => Math.floor(qrand() * USERS));
  const relatedItems = Array.from({ length: QUERIES }, () => {
    const h = histories[Math.floor(qrand() * USERS)]!;
    return h[Math.floor(qrand() * h.length)]!;
  });
  // One related query and then its SQL, on the q-th item: both times, and how far they agree.
  const relatedPair = async (q: number): Promise<{ tidalMs: number; sqlMs: number; overlap: number }> => {
    let s = nowMs();
    const rel = await db.retrieve({ profile: 'related', item: corpus.id(relatedItems[q]!) });
    const tidalMs = nowMs() - s;
    s = nowMs();
    const relSql = relatedSql.all(relatedItems[q]!) as { id: string }[];
    const sqlMs = nowMs() - s;
    return {
      tidalMs,
      sqlMs,
      overlap: overlapAt10(
        rel.items.map((i) => i.id),
        relSql.map((r) => r.id),
      ),
    };
  };
  const tidalTimes = { for_you: [] as number[], related: [] as number[] };
  const sqlTimes = { for_you: [] as number[], related: [] as number[] };
  const overlap = { for_you: [] as number[], related: [] as number[] };
  const sqlEvery = { for_you: Math.max(1, Math.floor(QUERIES / Math.max(20, Math.floor(QUERIES / 10)))), related: 1 };
  // Warm-up on other users and items, each query beside its SQL: V8 compiles related's functions
  // (run on this thread) with its optimizing compiler only after about 600 calls, and a service
  // calls them far more often than this bench's 300; SQLite has no such warm-up but its page cache.
  const wrand = mulberry32(0x77);
  for (let q = 0; q < WARMUP; q++) {
    if (q % 10 === 0) await db.retrieve({ profile: 'for_you', user: users[Math.floor(wrand() * USERS)]!, explore: 0 });
    const h = histories[Math.floor(wrand() * USERS)]!;
    const ordinal = h[Math.floor(wrand() * h.length)]!;
    await db.retrieve({ profile: 'related', item: corpus.id(ordinal) });
    relatedSql.all(ordinal);
  }
  for (let q = 0; q < QUERIES; q++) {
    // Taking turns, one query each, so the shared machine's noise falls on both sides alike.
    const u = forYouUsers[q]!;
    let s = nowMs();
    const mine = await db.retrieve({ profile: 'for_you', user: users[u]!, explore: 0 });
    tidalTimes.for_you.push(nowMs() - s);
    if (q % sqlEvery.for_you === 0) {
      const p = preference[u]!;
      s = nowMs();
      const theirs = forYouSql.all({ since: now - 59 * 60_000, user: u, pref: Buffer.from(p.buffer, p.byteOffset, p.byteLength), now }) as {
        id: string;
      }[];
      sqlTimes.for_you.push(nowMs() - s);
      overlap.for_you.push(
        overlapAt10(
          mine.items.map((i) => i.id),
          theirs.map((r) => r.id),
        ),
      );
    }
    const pair = await relatedPair(q);
    tidalTimes.related.push(pair.tidalMs);
    sqlTimes.related.push(pair.sqlMs);
    overlap.related.push(pair.overlap);
  }
  // related again, taking turns with its own SQL alone: above, each related call follows a for_you
  // and, every tenth query, for_you's SQL (a scan of 100 000 embeddings), so both sides of the
  // related pair start from caches that scan emptied; here neither does.
  const alone = { tidal: [] as number[], sql: [] as number[], overlap: [] as number[] };
  for (let q = 0; q < QUERIES; q++) {
    const pair = await relatedPair(q);
    alone.tidal.push(pair.tidalMs);
    alone.sql.push(pair.sqlMs);
    alone.overlap.push(pair.overlap);
  }
  const row = (name: string, mine: number[], theirs: number[], ov: number[]): string[] => {
    const a = summarize(mine);
    const b = summarize(theirs);
    return [
      name,
      fmtMs(a.p50),
      fmtMs(a.p99),
      fmtMs(b.p50),
      fmtMs(b.p99),
      fmtRatio(b.p50 / a.p50),
      mean(ov).toFixed(2),
      `${mine.length} / ${theirs.length}`,
    ];
  };
  const rows = [
    row('for_you', tidalTimes.for_you, sqlTimes.for_you, overlap.for_you),
    row('related, after each for_you (and its SQL)', tidalTimes.related, sqlTimes.related, overlap.related),
    row('related, taking turns with its SQL alone', alone.tidal, alone.sql, alone.overlap),
  ];
  log('\n## for_you and related, tidal vs hand-written SQL (ms at the caller)\n');
  log(
    report.markdown(
      ['profile', 'tidal p50', 'tidal p99', 'SQL p50', 'SQL p99', 'SQL p50 / tidal p50', 'overlap@10', 'queries (tidal / SQL)'],
      rows,
    ),
  );

  // ---- where the time goes ---------------------------------------------------------------------
  // Each kind of query at a level of its own, so the worker service-time window of that level
  // (stats().serviceMs) holds its samples alone; interleaved query by query.
  const BREAK = Math.min(QUERIES, 200);
  const caller = { forYou: [] as number[], related: [] as number[], floor: [] as number[] };
  // Each query's own worker time (explain.serviceMs), not stats().serviceMs: a level's window there
  // holds every query served at that level, this phase's or not.
  const service = { forYou: [] as number[], related: [] as number[], floor: [] as number[] };
  const relatedTook: number[] = [];
  for (let q = 0; q < BREAK; q++) {
    let s = nowMs();
    const f = await db.retrieve({ profile: 'for_you', user: users[forYouUsers[q]!]!, explore: 0, level: 'Full' });
    caller.forYou.push(nowMs() - s);
    service.forYou.push(f.explain.serviceMs ?? Number.NaN);
    s = nowMs();
    const r = await db.retrieve({ profile: 'related', item: corpus.id(relatedItems[q]!), level: 'CoarseAggregates' });
    caller.related.push(nowMs() - s);
    service.related.push(r.explain.serviceMs ?? Number.NaN);
    relatedTook.push(r.tookMs);
    s = nowMs();
    const n = await db.retrieve({ profile: 'new', limit: 1, level: 'NoDiversity' });
    caller.floor.push(nowMs() - s);
    service.floor.push(n.explain.serviceMs ?? Number.NaN);
  }
  // The ANN search alone, on this thread, over the snapshot the workers map (the same graph).
  const snapshot = snapshotFile();
  // k = 500 / 200 / 128 at the built breadth; for_you's Full with its own breadth (its view).
  const fullAnn = FOR_YOU_BUDGETS[0]!.ann;
  const annMs: Record<number, number[]> = { 500: [], 200: [], 128: [], [fullAnn]: [] };
  if (snapshot) {
    const ann = AnnIndex.view(DIMS, path.join(dir, snapshot));
    for (let q = 0; q < BREAK; q++) {
      for (const k of [500, 200, 128, fullAnn]) {
        const s = nowMs();
        if (k === fullAnn) ann.search(preference[forYouUsers[q]!]!, k, k);
        else ann.search(preference[forYouUsers[q]!]!, k);
        annMs[k]!.push(nowMs() - s);
      }
    }
  }
  const p50 = (xs: number[]): string => (xs.length === 0 ? 'n/a' : fmtMs(summarize(xs).p50));
  const rest = (at: number[], worker: number[]): string => fmtMs(summarize(at).p50 - summarize(worker).p50);
  log('\n## Where the time goes (p50, ms; interleaved)\n');
  log(
    report.markdown(
      ['query', 'at the caller', 'worker service time', 'rest (dispatch, hop, main thread)'],
      [
        ['for_you (Full)', p50(caller.forYou), p50(service.forYou), rest(caller.forYou, service.forYou)],
        ['related', p50(caller.related), p50(service.related), `tookMs p50 ${p50(relatedTook)}`],
        ["worker floor: 'new', limit 1", p50(caller.floor), p50(service.floor), rest(caller.floor, service.floor)],
        ['ANN search alone, k = 500 (this thread)', p50(annMs[500]!), '', ''],
        ['ANN search alone, k = 200 (this thread)', p50(annMs[200]!), '', ''],
        ['ANN search alone, k = 128 (this thread)', p50(annMs[128]!), '', ''],
        [`ANN search alone, k = expansion = ${fullAnn}, for_you's Full (this thread)`, p50(annMs[fullAnn]!), '', ''],
      ],
    ),
  );

  // ---- trending kept per clock, A/B ------------------------------------------------------------
  // for_you keeps trending per clock in each worker: at one clock (a burst) every query after the
  // first takes the kept list; with the clock moved a millisecond before each query, every query
  // walks trending itself. A worker keeps one clock's lists, so the sides take turns in blocks of
  // 20 queries (the first of a kept block, per worker, walks again): Full, explore 0.
  const ab = { kept: [] as number[], walked: [] as number[] };
  const AB_BLOCK = 20;
  let tick = 0;
  for (let b = 0; b < BREAK; b += AB_BLOCK) {
    for (const side of ['kept', 'walked'] as const) {
      for (let q = b; q < Math.min(BREAK, b + AB_BLOCK); q++) {
        clockMs = side === 'kept' ? now : now + 1 + tick++;
        const s = nowMs();
        await db.retrieve({ profile: 'for_you', user: users[forYouUsers[q]!]!, explore: 0, level: 'Full' });
        ab[side].push(nowMs() - s);
      }
    }
  }
  clockMs = now;
  log('\n## Trending kept per clock (for_you Full, ms at the caller; interleaved)\n');
  log(
    report.markdown(
      ['for_you Full', 'p50', 'p99'],
      [
        ['one clock: trending kept (walked once per worker)', fmtMs(summarize(ab.kept).p50), fmtMs(summarize(ab.kept).p99)],
        ['clock moved before each query: trending walked', fmtMs(summarize(ab.walked).p50), fmtMs(summarize(ab.walked).p99)],
        ['kept / walked (p50)', fmtRatio(summarize(ab.kept).p50 / summarize(ab.walked).p50), ''],
      ],
    ),
  );

  // ---- the ANN search's expansion per level, A/B -----------------------------------------------
  // for_you searches k = its level's ANN budget with expansion ef = k; before, ef was the built 128
  // at every level. Time and recall (against the built expansion's k neighbours) on this thread,
  // over the workers' snapshot, interleaved.
  if (snapshot) {
    const ann = AnnIndex.view(DIMS, path.join(dir, snapshot));
    const efRows: string[][] = [];
    const budgets = FOR_YOU_BUDGETS.map((b) => b.ann);
    const t = budgets.map(() => ({ narrow: [] as number[], built: [] as number[], recall: 0 }));
    // Each expansion is a mapping of its own: one untimed pass first touches its pages, as a
    // long-running worker's have been.
    for (let q = 0; q < BREAK; q++) for (const k of budgets) ann.search(preference[forYouUsers[q]!]!, k, k);
    // One level at a time over every vector: run level by level per vector, the built index's
    // search at 128 warmed that vector's path for the next level's built search only.
    budgets.forEach((k, i) => {
      for (let rep = 0; rep < 3; rep++) {
        for (let q = 0; q < BREAK; q++) {
          const p = preference[forYouUsers[q]!]!;
          // Either side first in turn: the second search of a vector finds the graph in cache.
          const timed = (ef: number | undefined): ReturnType<AnnIndex['search']> => {
            const s = nowMs();
            const r = ef === undefined ? ann.search(p, k) : ann.search(p, k, ef);
            (ef === undefined ? t[i]!.built : t[i]!.narrow).push(nowMs() - s);
            return r;
          };
          let narrow: ReturnType<AnnIndex['search']>;
          let built: ReturnType<AnnIndex['search']>;
          if ((q + rep) % 2 === 0) {
            narrow = timed(k);
            built = timed(undefined);
          } else {
            built = timed(undefined);
            narrow = timed(k);
          }
          if (rep === 0) {
            const want = new Set(built.keys);
            let hit = 0;
            for (const o of narrow.keys) if (want.has(o)) hit++;
            t[i]!.recall += want.size > 0 ? hit / want.size : 1;
          }
        }
      }
    });
    budgets.forEach((k, i) => {
      const a = summarize(t[i]!.narrow).p50;
      const b = summarize(t[i]!.built).p50;
      efRows.push([LEVELS[i]!, String(k), fmtMs(a), fmtMs(b), fmtRatio(a / b), (t[i]!.recall / BREAK).toFixed(3)]);
    });
    log("\n## for_you's ANN search per level: expansion = k against the built 128 (p50 ms, this thread; interleaved)\n");
    log(report.markdown(['level', 'k', 'ef = k', 'ef = 128', 'ratio', 'neighbours shared with ef = 128'], efRows));
  }

  // ---- levels ----------------------------------------------------------------------------------
  const requests: [string, (q: number) => RetrieveRequest][] = [
    ['following newest', (q) => ({ profile: 'following', user: users[forYouUsers[q]!]! })],
    ['following popular', (q) => ({ profile: 'following', user: users[forYouUsers[q]!]!, order: 'popular' })],
    ['hot', () => ({ profile: 'hot' })],
    ['rising 1h', () => ({ profile: 'rising', window: '1h' })],
    ['top 24h', () => ({ profile: 'top', window: '24h' })],
    ['top 7d', () => ({ profile: 'top', window: '7d' })],
    ['related', (q) => ({ profile: 'related', item: corpus.id(relatedItems[q]!) })],
    ['for_you', (q) => ({ profile: 'for_you', user: users[forYouUsers[q]!]!, explore: 0 })],
  ];
  const levelRows: string[][] = [];
  const n = Math.min(QUERIES, 100);
  for (const [name, make] of requests) {
    const full: string[][] = [];
    for (const level of LEVELS) {
      collectGarbage();
      const times: number[] = [];
      let candidates = 0;
      let slots = 0;
      let ov = 0;
      const perSource = { ann: 0, creators: 0, newest: 0, trending: 0 };
      for (let q = 0; q < n; q++) {
        // Users differ per query; the global profiles vary by the clock alone, so one query is repeated.
        const s = nowMs();
        const r = await db.retrieve({ ...make(q), level, limit: 10 });
        times.push(nowMs() - s);
        candidates += r.explain.candidates;
        slots += r.explain.slotsVisited ?? 0;
        const fs = r.explain.forYouSources;
        if (fs) for (const k of ['ann', 'creators', 'newest', 'trending'] as const) perSource[k] += fs[k];
        const ids = r.items.map((i) => i.id);
        if (level === 'Full') full.push(ids);
        ov += overlapAt10(ids, full[q]!);
      }
      const sm = summarize(times);
      const sources =
        name === 'for_you' ? (['ann', 'creators', 'newest', 'trending'] as const).map((k) => fmtInt(perSource[k] / n)).join(' / ') : '';
      levelRows.push([name, level, fmtMs(sm.p50), fmtMs(sm.p99), fmtInt(candidates / n), fmtInt(slots / n), (ov / n).toFixed(2), sources]);
    }
  }
  log('\n## Levels: cost and quality (limit 10, ms at the caller; overlap@10 with Full)\n');
  log(
    report.markdown(
      ['profile', 'level', 'p50', 'p99', 'candidates', 'slots read', 'overlap@10', 'for_you: ANN / creators / newest / trending'],
      levelRows,
    ),
  );

  // ---- for_you's quality against its own formula -----------------------------------------------
  // The exhaustive ranking scores every item by the documented mix, velocity over the largest of
  // all items (what the SQL computes); the former Full took the 500 ANN neighbours alone,
  // velocity over their largest. Both on this thread, over the bench's own copy of the items and
  // the snapshot the workers search (ordinals are the corpus indexes: items were written in order).
  if (snapshot) {
    const ann = AnnIndex.view(DIMS, path.join(dir, snapshot));
    const data = forYouData();
    const Q = Math.min(QUERIES, 100);
    const ovs = { exhaustive: new Map<string, number>(), oldFull: new Map<string, number>(), newFull: new Map<string, number>() };
    let oldVsExhaustive = 0;
    let checkedSim = 0;
    const sweepers = await sweepUsers(Q);
    for (let q = 0; q < Q; q++) {
      const u = sweepers[q]!;
      const exhaustive = exhaustiveTop(data, u).map((i) => corpus.id(i));
      const near = ann.search(u.preference, 500);
      if (near.keys.length > 0 && Math.abs(near.similarity[0]! - features(data, u, near.keys[0]!).similarity) < 1e-3) checkedSim++;
      let maxV500 = 0;
      for (const o of near.keys) if (data.velocity[o]! > maxV500) maxV500 = data.velocity[o]!;
      const oldFull = exhaustiveTop(data, u, 10, near.keys, maxV500).map((i) => corpus.id(i));
      oldVsExhaustive += overlapAt10(oldFull, exhaustive);
      let newFull: string[] = [];
      for (const level of LEVELS) {
        const ids = (await db.retrieve({ profile: 'for_you', user: u.id, explore: 0, level, limit: 10 })).items.map((i) => i.id);
        if (level === 'Full') newFull = ids;
        ovs.exhaustive.set(level, (ovs.exhaustive.get(level) ?? 0) + overlapAt10(ids, exhaustive));
        ovs.oldFull.set(level, (ovs.oldFull.get(level) ?? 0) + overlapAt10(ids, oldFull));
        ovs.newFull.set(level, (ovs.newFull.get(level) ?? 0) + overlapAt10(ids, newFull));
      }
    }
    log(`\n## for_you quality (${Q} users, limit 10, overlap@10; ordinal check ${checkedSim}/${Q})\n`);
    log(
      report.markdown(
        ['ranking', 'with the exhaustive ranking', 'with the former Full (ANN 500 alone)', 'with this Full'],
        [
          ['former Full (ANN 500 alone)', (oldVsExhaustive / Q).toFixed(2), '1.00', ''],
          ...LEVELS.map((l) => [
            l,
            (ovs.exhaustive.get(l)! / Q).toFixed(2),
            (ovs.oldFull.get(l)! / Q).toFixed(2),
            (ovs.newFull.get(l)! / Q).toFixed(2),
          ]),
        ],
      ),
    );
  }
  const mem = process.memoryUsage();
  log(`\nMain-thread heap after the run: ${fmtInt(mem.heapUsed / 1048576)} MiB (RSS ${fmtInt(mem.rss / 1048576)} MiB).`);

  await db.close();
  sql.close();
  if (opts.dir === '') fs.rmSync(dir, { recursive: true, force: true });
  report.finish();
}

function mean(xs: readonly number[]): number {
  return xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

/**
 * The sweep (`--sweep`): where the exhaustive top items lie in each source, then each budget set's
 * overlap@10 and time on this thread.
 */
async function forYouSweepRun(
  db: TidalDb,
  dir: string,
  ann: string | ExactNeighbours,
  data: ForYouData,
  users: SweepUser[],
): Promise<void> {
  const sets = sweepSets(opts.sweep === 'plans' ? '' : opts.sweep);
  const t = nowMs();
  const { ctx, exec } = sweepContext(db, dir, ann);
  // The exhaustive ranking of a kept directory's users is kept beside it: a reopened database ranks at the same clock over the same state.
  const kept = path.join(dir, `for-you-exhaustive-${users.length}.json`);
  const truth: number[][] =
    opts.dir !== '' && fs.existsSync(kept)
      ? (JSON.parse(fs.readFileSync(kept, 'utf8')) as number[][])
      : users.map((u) => exhaustiveTop(data, u));
  if (opts.dir !== '') fs.writeFileSync(kept, JSON.stringify(truth));
  log(`\nThe exhaustive top 10 of ${users.length} users in ${((nowMs() - t) / 1000).toFixed(1)} s (context and velocities included).`);
  // The sweep's context answers as the workers do: its Full against the database's.
  let same = 0;
  if (typeof ann !== 'string')
    log('Exact neighbours stand in for the ANN index: quality of exact neighbours, times without the ANN search.');
  for (const u of typeof ann === 'string' ? users : []) {
    const mine = exec.run(forYouTask(u), levelPlan(DegradationLevel.Full), data.now).items.map((i) => i.id);
    const theirs = (await db.retrieve({ profile: 'for_you', user: u.id, explore: 0, level: 'Full', limit: 10 })).items.map((i) => i.id);
    if (mine.join() === theirs.join()) same++;
  }
  if (typeof ann === 'string') log(`This thread's Full ranking is the workers' for ${same} of ${users.length} users.`);
  const full = forYouBudgetAt(levelPlan(DegradationLevel.Full).forYou, ctx.catalog.presentCount);
  const recall = sourceRecall(ctx, exec, data, users, truth, full, data.now);
  log(`\n## Where the exhaustive top 10 lie, per source (${users.length} users; share of the top items within each depth)\n`);
  log(report!.markdown(['source', 'recall at depth'], recall.rows));
  log(`\n${recall.missed}`);
  log(
    `\n## for_you budget sweep (${users.length} users × ${opts['sweep-reps']} passes, sets interleaved; ms on this thread, CPU time and wall time)\n`,
  );
  const rows = sweep(exec, sets, users, truth, data.now, opts['sweep-reps']);
  log(
    report!.markdown(
      ['budget set', 'overlap@10 with the exhaustive ranking', 'CPU p50', 'CPU mean', 'wall p50', 'candidates'],
      sweepTable(rows),
    ),
  );
}

await main();
