/**
 * `node --expose-gc bench/dist/related-cost.js`: the per-call cost of profile `related` at the
 * caller, where the whole query runs on the calling thread (validation, admission, planning, the
 * ranking of the co-engagement list, the result items, the recorder).
 *
 * Data: the bench corpus (`--items`, default 20 000, with its view and like signals), then
 * `--users` (default 4 000) users with `--history` (default 20) signals each, drawn mostly from one
 * favourite category as `bench:personalization` draws them, so the queried items' co-engagement
 * lists are full (32 partners). The work per call is bounded by the list, not by the corpus.
 *
 * Then `--rounds` (default 5) rounds of `--calls` (default 20 000) calls, each call awaited, over
 * items drawn from the histories; reports µs per call (p50, p99) per round and over all rounds,
 * and the median of the rounds' p50. `--variant=plain|page|explain|filter` picks the request:
 * plain `{ profile, item }`; page reads `nextCursor`; explain reads `explain` and serialises
 * the result; filter adds a filter and a user. With `node --cpu-prof` the profile shows where
 * the time goes; `--profile=FILE` profiles the rounds alone (the inspector's sampling profiler,
 * 50 µs) and prints the top self-time entries.
 *
 * Between two timed calls, `--between=MODE` runs untimed work that leaves the caches the way
 * `bench:personalization` leaves them: `worker` (or a bare `--between`) a worker query; `sql` the
 * hand-written SQL self-join `bench:personalization` times `related` against, over a SQLite file
 * holding the same histories (as its "taking turns with its SQL alone" row runs them); `touch`
 * a pass over `--touch-kb` KiB of memory (default 4 096). Calls 21–320 and 321–620 are timed
 * first, with the same work between them, as `bench:personalization` runs the code only a few
 * hundred times (its "taking turns with its SQL alone" row times calls 321–620).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Session } from 'node:inspector/promises';
import Database from 'better-sqlite3';
import { TidalDb, type RetrieveRequest, type SignalInput } from 'tidal-core';
import { Corpus, personalizationSchema } from './corpus.js';
import { mulberry32 } from './random.js';
import { collectGarbage, describeMachine, fmtInt, intFlag, percentile } from './stats.js';

const argv = process.argv.slice(2);
const ITEMS = intFlag(argv, 'items', 20_000);
const USERS = intFlag(argv, 'users', 4_000);
const HISTORY = intFlag(argv, 'history', 20);
const CALLS = intFlag(argv, 'calls', 20_000);
const ROUNDS = intFlag(argv, 'rounds', 5);
const VARIANT = argv.find((a) => a.startsWith('--variant='))?.slice('--variant='.length) ?? 'plain';
const betweenFlag = argv.find((a) => a === '--between' || a.startsWith('--between='));
const BETWEEN = betweenFlag === undefined ? 'none' : betweenFlag === '--between' ? 'worker' : betweenFlag.slice('--between='.length);
if (!['none', 'worker', 'sql', 'touch'].includes(BETWEEN)) throw new Error(`--between=${BETWEEN}: expected worker, sql or touch`);
const TOUCH_KB = intFlag(argv, 'touch-kb', 4096);
const PROFILE = argv.find((a) => a.startsWith('--profile='))?.slice('--profile='.length) ?? null;
const DIMS = 32;
const DAY = 86_400_000;
const log = (s = ''): void => void process.stdout.write(`${s}\n`);

async function main(): Promise<void> {
  const corpus = new Corpus({ items: ITEMS, dims: DIMS });
  const now = corpus.now;
  const schema = personalizationSchema(DIMS);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-bench-related-'));
  const db = await TidalDb.builder()
    .path(dir)
    .clock(() => now)
    .schema(schema)
    .workers(1)
    .capacity({ items: ITEMS + 1000, signalSlots: 2 * ITEMS + 1000 })
    .open();
  try {
    log(`# related: per-call cost\n\n${describeMachine()}\n`);
    const byCategory = new Map<string, number[]>();
    for (const batch of corpus.items(1000)) {
      await db.upsertItems(batch);
      for (const it of batch) {
        const i = corpus.indexOf(it.id);
        let l = byCategory.get(it.metadata.category);
        if (!l) byCategory.set(it.metadata.category, (l = []));
        l.push(i);
      }
    }
    for (const batch of corpus.signalBatches(1000)) await db.signals(batch);
    const rand = mulberry32(0x9e5);
    const categories = [...byCategory.keys()];
    const users = Array.from({ length: USERS }, (_, u) => `user-${u}`);
    for (let i = 0; i < USERS; i += 1000) await db.upsertUsers(users.slice(i, i + 1000).map((id) => ({ id })));
    const histories: number[][] = [];
    for (let u = 0; u < USERS; u += 50) {
      const batch: SignalInput[] = [];
      for (let v = u; v < Math.min(USERS, u + 50); v++) {
        const fav = byCategory.get(categories[v % categories.length]!)!;
        const h: number[] = [];
        for (let k = 0; k < HISTORY; k++) {
          const i = rand() < 0.8 ? fav[Math.floor(rand() ** 2 * fav.length)]! : Math.floor(rand() * ITEMS);
          h.push(i);
          batch.push({ item: corpus.id(i), kind: rand() < 0.33 ? 'like' : 'view', user: users[v]!, at: now - DAY * 7 + Math.floor(((k + rand()) / HISTORY) * 7 * DAY) });
        }
        histories.push(h);
      }
      await db.signals(batch);
    }
    await db.warm();

    const qrand = mulberry32(0x51);
    const items = Array.from({ length: 4096 }, () => {
      const h = histories[Math.floor(qrand() * histories.length)]!;
      return corpus.id(h[Math.floor(qrand() * h.length)]!);
    });

    // The SQL side of `bench:personalization`'s related, over the same histories (`--between=sql`).
    const sql = BETWEEN === 'sql' ? new Database(path.join(dir, 'baseline.db')) : null;
    let between: (i: number) => unknown = () => undefined;
    if (sql) {
      sql.pragma('journal_mode = WAL');
      sql.exec(`
        CREATE TABLE items(rowid INTEGER PRIMARY KEY, id TEXT);
        CREATE TABLE history(user INTEGER, pos INTEGER, item INTEGER, at REAL, PRIMARY KEY(user, pos)) WITHOUT ROWID;
        CREATE INDEX history_item ON history(item, user, pos);
      `);
      const insertItem = sql.prepare('INSERT INTO items VALUES (?, ?)');
      const insertHistory = sql.prepare('INSERT INTO history VALUES (?, ?, ?, 0)');
      sql.transaction(() => {
        for (let i = 0; i < ITEMS; i++) insertItem.run(i, corpus.id(i));
        histories.forEach((h, u) => h.forEach((i, pos) => insertHistory.run(u, pos, i)));
      })();
      const relatedSql = sql.prepare(`
        SELECT i.id, COUNT(*) AS n FROM history a JOIN history b ON b.user = a.user AND b.pos BETWEEN a.pos - 8 AND a.pos + 8 AND b.item != a.item
        JOIN items i ON i.rowid = b.item
        WHERE a.item = ? GROUP BY b.item ORDER BY n DESC, b.item LIMIT 20`);
      between = (i) => relatedSql.all(corpus.indexOf(items[i & 4095]!));
    } else if (BETWEEN === 'worker') {
      between = () => db.retrieve({ profile: 'new', limit: 20 });
    } else if (BETWEEN === 'touch') {
      const memory = new Float64Array((TOUCH_KB * 1024) / 8);
      between = (i) => {
        let x = 0;
        for (let j = 0; j < memory.length; j += 8) x += memory[j]! += i;
        return x;
      };
    }

    const request = (i: number): RetrieveRequest => {
      const item = items[i & 4095]!;
      if (VARIANT === 'filter') return { profile: 'related', item, filter: { category: { in: categories.slice(0, 6) } }, user: users[i % USERS]! };
      return { profile: 'related', item };
    };
    // What `bench:personalization` times: 20 calls of warm-up, then 300 after each for_you, then
    // 300 taking turns with the SQL alone, each after other work: the code runs a few hundred
    // times, not yet all optimized (its second 300 are the "taking turns with its SQL alone" row).
    for (let i = 0; i < 20; i++) await db.retrieve(request(i));
    const early: number[] = [];
    for (let i = 20; i < 620; i++) {
      await between(i);
      const s = process.hrtime.bigint();
      await db.retrieve(request(i));
      early.push(Number(process.hrtime.bigint() - s) / 1000);
    }
    const after = BETWEEN === 'none' ? 'nothing' : BETWEEN === 'touch' ? `a pass over ${fmtInt(TOUCH_KB)} KiB` : `a ${BETWEEN} query`;
    for (const [from, to] of [[0, 300], [300, 600]] as const) {
      const sorted = Float64Array.from(early.slice(from, to)).sort();
      log(`calls ${from + 21}–${to + 20} (after 20 of warm-up), each after ${after}: p50 ${percentile(sorted, 50).toFixed(1)} µs, p99 ${percentile(sorted, 99).toFixed(1)} µs`);
    }
    let full = 0;
    let returned = 0;
    for (let i = 0; i < 4096; i++) {
      const r = await db.retrieve(request(i));
      if (r.explain.candidates >= 32) full++;
      returned += r.items.length;
    }
    log(`${fmtInt(ITEMS)} items, ${fmtInt(USERS)} users × ${HISTORY} signals; variant ${VARIANT}; between calls: ${BETWEEN}; queried items with a full list (32 partners): ${((100 * full) / 4096).toFixed(0)} %, ${(returned / 4096).toFixed(1)} items returned per call.\n`);

    let sink = 0;
    const all: number[] = [];
    const p50s: number[] = [];
    const times = new Float64Array(CALLS);
    const session = PROFILE === null ? null : new Session();
    if (session) {
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.setSamplingInterval', { interval: 50 });
      await session.post('Profiler.start');
    }
    for (let round = 0; round < ROUNDS; round++) {
      collectGarbage();
      for (let i = 0; i < CALLS; i++) {
        await between(i);
        const req = request(i);
        const s = process.hrtime.bigint();
        const r = await db.retrieve(req);
        if (VARIANT === 'page') sink += r.nextCursor?.length ?? 0;
        else if (VARIANT === 'explain') sink += JSON.stringify(r).length + r.explain.candidates;
        else sink += r.items.length;
        times[i] = Number(process.hrtime.bigint() - s) / 1000;
      }
      const sorted = Float64Array.from(times).sort();
      const p50 = percentile(sorted, 50);
      p50s.push(p50);
      for (const t of times) all.push(t);
      log(`round ${round + 1}: p50 ${p50.toFixed(1)} µs, p99 ${percentile(sorted, 99).toFixed(1)} µs`);
    }
    if (session) {
      const { profile } = await session.post('Profiler.stop');
      fs.writeFileSync(PROFILE!, JSON.stringify(profile));
      log(`\nCPU profile of the rounds: ${PROFILE} (${topSelf(profile)})`);
      session.disconnect();
    }
    const sorted = Float64Array.from(all).sort();
    p50s.sort((a, b) => a - b);
    log(`\nall ${fmtInt(all.length)} calls: p50 ${percentile(sorted, 50).toFixed(1)} µs, p99 ${percentile(sorted, 99).toFixed(1)} µs; median round p50 ${p50s[p50s.length >> 1]!.toFixed(1)} µs (${sink > 0 ? 'ok' : 'empty'})`);
    sql?.close();
  } finally {
    await db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

/** The profile's ten largest self-time entries, as `name file:line share`. */
function topSelf(profile: { nodes: ProfileNode[]; samples?: number[] }): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  const samples = profile.samples ?? [];
  for (const id of samples) {
    const f = byId.get(id)!.callFrame;
    const key = `${f.functionName || '(anonymous)'} ${path.basename(f.url)}:${f.lineNumber + 1}`;
    self.set(key, (self.get(key) ?? 0) + 1);
  }
  const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, 25);
  return `top self time:\n${top.map(([k, n]) => `  ${((100 * n) / samples.length).toFixed(1).padStart(5)} %  ${k}`).join('\n')}\n`;
}

await main();
