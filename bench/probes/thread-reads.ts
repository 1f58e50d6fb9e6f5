/**
 * Personalized reads answered in the query thread that takes them (users, sessions and
 * co-engagement read from shared memory) against the same reads sent to the database's thread, as
 * every `for_you`, `following`, `related` and `unseen` query of a worker module's thread (a `tidal
 * serve` acceptor) was before. One database with a worker module (thread-reads-module.ts) in each of
 * its query workers; each round, every worker runs the same number of queries in a closed loop,
 * one mode then the other, alternating. Per mode: queries/s over both threads, the per-query p50 and
 * p99 in the thread, the database thread's own CPU per query (its /proc task's utime + stime) and
 * the whole process's (every thread). The CPU columns hold under a loaded machine; queries/s and
 * latencies need a quiet one (more runnable threads also win a larger share of a contended CPU).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BroadcastChannel } from 'node:worker_threads';
import { TidalDb, type RetrieveRequest, type SignalInput } from 'tidal-core';
import { Corpus, personalizationSchema } from '../src/corpus.js';
import { Report, fmtInt, fmtMs, loadAverage, nowMs, parseOptions, summarize } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';
import type { RunAnswer, RunMessage } from './thread-reads-module.js';

const opts = parseOptions('thread-reads', {
  items: { type: 'int', default: 20_000, description: 'items of the bench corpus' },
  users: { type: 'int', default: 2000, description: 'users, 20 signals and 5 follows each' },
  queries: { type: 'int', default: 3000, description: 'queries per thread per round' },
  rounds: { type: 'int', default: 4, description: 'rounds of each mode, alternating' },
  concurrency: { type: 'int', default: 8, description: 'queries in flight per thread' },
});
const DIMS = 64;
const WORKERS = 2;

/** The database thread's CPU time so far, ms (utime + stime of its /proc task, clock ticks of 10 ms). */
function mainCpuMs(): number {
  const stat = fs.readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function main(): Promise<void> {
  const report = new Report('thread-reads', opts);
  // The corpus ends now: a query thread reads the wall clock, so both modes rank at the same time.
  const corpus = new Corpus({ items: opts.items, dims: DIMS, seed: 42, now: Date.now() });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-thread-reads-'));
  const name = `thread-reads-${process.pid}`;
  const db = await TidalDb.builder()
    .path(dir)
    .schema(personalizationSchema(DIMS))
    .workers(WORKERS)
    .workerModule(new URL('./thread-reads-module.js', import.meta.url), { channel: name })
    .open();
  const channel = new BroadcastChannel(name);
  try {
    const users = Array.from({ length: opts.users }, (_, u) => `user-${u}`);
    const t0 = nowMs();
    const histories = await load(db, corpus, users);
    await db.warm();
    report.line(
      `${fmtInt(opts.items)} items, ${fmtInt(opts.users)} users, ${WORKERS} query threads, loaded and warm in ${((nowMs() - t0) / 1000).toFixed(1)} s; load average ${loadAverage()}`,
    );
    const rand = mulberry32(0x7e4d);
    // Drawn per query: the user, the profile (for_you 50 %, following 20 %, related 15 %, new + unseen 15 %).
    const draw = (): RetrieveRequest => {
      const u = Math.floor(rand() * users.length);
      const user = users[u]!;
      const r = rand();
      if (r < 0.5) return { profile: 'for_you', user, limit: 10 };
      if (r < 0.7) return { profile: 'following', user, limit: 10 };
      if (r < 0.85) {
        const h = histories[u]!;
        return { profile: 'related', item: corpus.id(h[Math.floor(rand() * h.length)]!), user, limit: 10 };
      }
      return { profile: 'new', user, userFilter: { unseen: true }, limit: 10 };
    };
    let id = 0;
    const round = async (
      mode: 'local' | 'forward',
    ): Promise<{ answers: RunAnswer[]; cpuMs: number; processCpuMs: number; wallMs: number }> => {
      const msgId = ++id;
      const answers: RunAnswer[] = [];
      const done = new Promise<void>((resolve) => {
        channel.onmessage = (e) => {
          const a = (e as MessageEvent).data as RunAnswer;
          if (a.op !== 'done' || a.id !== msgId) return;
          answers.push(a);
          if (answers.length === WORKERS) resolve();
        };
      });
      const cpu0 = mainCpuMs();
      const p0 = process.cpuUsage();
      const w0 = nowMs();
      const queries = Array.from({ length: opts.queries }, draw);
      channel.postMessage({ op: 'run', id: msgId, mode, queries, concurrency: opts.concurrency } satisfies RunMessage);
      await done;
      const p = process.cpuUsage(p0);
      return { answers, cpuMs: mainCpuMs() - cpu0, processCpuMs: (p.user + p.system) / 1000, wallMs: nowMs() - w0 };
    };
    await round('local');
    await round('forward');
    const modes = { local: [] as Awaited<ReturnType<typeof round>>[], forward: [] as Awaited<ReturnType<typeof round>>[] };
    for (let r = 0; r < opts.rounds; r++) {
      for (const mode of r % 2 === 0 ? (['local', 'forward'] as const) : (['forward', 'local'] as const))
        modes[mode].push(await round(mode));
    }
    const rows = (['local', 'forward'] as const).map((mode) => {
      const rs = modes[mode];
      const answered = rs.reduce((s, r) => s + r.answers.reduce((a, b) => a + b.answered, 0), 0);
      const failed = rs.reduce((s, r) => s + r.answers.reduce((a, b) => a + b.failed, 0), 0);
      const wall = rs.reduce((s, r) => s + r.wallMs, 0);
      const cpu = rs.reduce((s, r) => s + r.cpuMs, 0);
      const processCpu = rs.reduce((s, r) => s + r.processCpuMs, 0);
      const lat = summarize(rs.flatMap((r) => r.answers.flatMap((a) => a.latencies)));
      return [
        mode === 'local' ? 'in the thread (now)' : 'sent to the database thread (before)',
        fmtInt(Math.round((answered / wall) * 1000)),
        fmtMs(lat.p50),
        fmtMs(lat.p99),
        ((cpu * 1000) / answered).toFixed(0),
        ((processCpu * 1000) / answered).toFixed(0),
        fmtInt(failed),
      ];
    });
    report.table(
      `personalized reads from ${WORKERS} query threads, ${opts.concurrency} in flight each, ${fmtInt(opts.rounds * opts.queries * WORKERS)} queries per mode`,
      ['where', 'queries/s', 'p50', 'p99', 'database thread CPU µs/query', 'process CPU µs/query', 'failed'],
      rows,
    );
    report.line(`load average at the end ${loadAverage()}`);
    report.finish();
  } finally {
    channel.close();
    await db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** The corpus's items and signals, the users with 20 signals each from five favourite creators, and 5 follows. */
async function load(db: TidalDb, corpus: Corpus, users: string[]): Promise<number[][]> {
  const creators = new Map<string, number[]>();
  for (const batch of corpus.items(1000)) {
    for (const it of batch) {
      const c = String(it.metadata.creator);
      const list = creators.get(c) ?? [];
      list.push(corpus.indexOf(it.id));
      creators.set(c, list);
    }
    await db.upsertItems(batch);
  }
  for (const batch of corpus.signalBatches(1000)) await db.signals(batch);
  const rand = mulberry32(0x9e5);
  const names = [...creators.keys()];
  for (let i = 0; i < users.length; i += 1000) await db.upsertUsers(users.slice(i, i + 1000).map((id) => ({ id })));
  const histories: number[][] = [];
  for (const user of users) {
    const fav = Array.from({ length: 5 }, () => names[Math.floor(rand() * names.length)]!);
    const h: number[] = [];
    const evs: SignalInput[] = [];
    for (let k = 0; k < 20; k++) {
      const list = creators.get(fav[k % fav.length]!)!;
      const i = rand() < 0.8 ? list[Math.floor(rand() * list.length)]! : Math.floor(rand() * opts.items);
      h.push(i);
      evs.push({ item: corpus.id(i), kind: rand() < 0.33 ? 'like' : 'view', user });
    }
    histories.push(h);
    await db.signals(evs);
    await Promise.all(fav.map((creator) => db.follow({ user, creator })));
  }
  return histories;
}

await main();
