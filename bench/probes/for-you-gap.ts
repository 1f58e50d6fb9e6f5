/**
 * Where for_you's time at the caller goes beyond its worker service time, at a large catalogue:
 * the bench corpus's items (without embeddings unless `--embeddings`, so a million items are ready
 * in minutes), users with histories from a favourite category and 5 follows each, `warm()`, then
 * for_you at Full timed back to back (as the level table runs it) and interleaved with `related`
 * and `new` (as "where the time goes" runs it), in alternating blocks. Per mode: caller p50, the
 * worker's `explain.serviceMs` p50, `tookMs` p50 (the database's thread, validation to result) and
 * the rest (the caller's time outside `tookMs`).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TidalDb, type SignalInput } from 'tidal-core';
import { Corpus, personalizationSchema } from '../src/corpus.js';
import { Report, fmtInt, fmtMs, loadAverage, nowMs, parseOptions, summarize } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';

const opts = parseOptions('for-you-gap', {
  items: { type: 'int', default: 100_000, description: 'items of the bench corpus' },
  users: { type: 'int', default: 2000, description: 'users, 20 signals and 5 follows each' },
  queries: { type: 'int', default: 200, description: 'timed for_you queries per mode' },
  embeddings: { type: 'boolean', description: 'write the embeddings (the ANN index builds on its own thread)' },
  dir: {
    type: 'string',
    default: '',
    description: 'reopen a directory `--suite personalization --dir` kept (its --items and users) instead of loading',
  },
});
// The personalization suite's dimensions when reopening its directory.
const DIMS = opts.dir === '' ? 64 : 128;
const HISTORY = 20;
const BLOCK = 20;

async function main(): Promise<void> {
  const report = new Report('for-you-gap', opts);
  const corpus = new Corpus({ items: opts.items, dims: DIMS, seed: 42 });
  const reuse = opts.dir !== '';
  const dir = reuse ? opts.dir : fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-for-you-gap-'));
  const db = await TidalDb.builder()
    .path(dir)
    .schema(personalizationSchema(DIMS))
    .clock(() => corpus.now)
    .workers(2)
    .capacity({ items: opts.items + 1000, signalSlots: 2 * opts.items + 1000 })
    .open();
  try {
    const t0 = nowMs();
    const users = Array.from({ length: opts.users }, (_, u) => `user-${u}`);
    const histories: number[][] = [];
    if (!reuse) await load(db, corpus, users, histories);
    const t1 = nowMs();
    await db.warm();
    report.line(
      `${fmtInt(opts.items)} items${opts.embeddings || reuse ? '' : ' (no embeddings)'}, ${fmtInt(opts.users)} users, ${reuse ? `reopened from ${dir}` : 'loaded'} in ${((t1 - t0) / 1000).toFixed(0)} s, warm ${((nowMs() - t1) / 1000).toFixed(1)} s; load average ${loadAverage()}`,
    );
    const qrand = mulberry32(0x51);
    const pick = (): number => Math.floor(qrand() * users.length);
    const forYou = (u: number) => db.retrieve({ profile: 'for_you', user: users[u]!, explore: 0, level: 'Full', limit: 10 });
    type Samples = { caller: number[]; service: number[]; took: number[] };
    const modes: Record<'alone' | 'interleaved', Samples> = {
      alone: { caller: [], service: [], took: [] },
      interleaved: { caller: [], service: [], took: [] },
    };
    const timed = async (m: Samples, u: number): Promise<void> => {
      const s = nowMs();
      const r = await forYou(u);
      m.caller.push(nowMs() - s);
      m.service.push(r.explain.serviceMs ?? Number.NaN);
      m.took.push(r.tookMs);
    };
    for (let i = 0; i < 200; i++) await forYou(pick());
    for (let b = 0; b < opts.queries; b += BLOCK) {
      for (let q = 0; q < BLOCK; q++) await timed(modes.alone, pick());
      for (let q = 0; q < BLOCK; q++) {
        const u = pick();
        await timed(modes.interleaved, u);
        const h = histories[u] ?? [Math.floor(qrand() * opts.items)];
        await db.retrieve({ profile: 'related', item: corpus.id(h[q % h.length]!), level: 'CoarseAggregates' });
        await db.retrieve({ profile: 'new', limit: 1, level: 'NoDiversity' });
      }
    }
    const rows = (['alone', 'interleaved'] as const).map((k) => {
      const m = modes[k];
      const c = summarize(m.caller).p50;
      const t = summarize(m.took).p50;
      return [k, fmtMs(c), fmtMs(summarize(m.service).p50), fmtMs(t), fmtMs(c - t)];
    });
    report.table(
      `for_you at Full, ${fmtInt(modes.alone.caller.length)} queries per mode (p50 ms)`,
      ['mode', 'caller', 'worker service', 'tookMs', 'caller − tookMs'],
      rows,
    );
    report.line(`load average at the end ${loadAverage()}`);
    report.finish();
  } finally {
    await db.close();
    if (!reuse) fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** The corpus's items and signals, the users with their histories and follows. */
async function load(db: TidalDb, corpus: Corpus, users: string[], histories: number[][]): Promise<void> {
  const creators = new Map<string, number[]>();
  for (const batch of corpus.items(1000)) {
    for (const it of batch) {
      const c = String(it.metadata.creator);
      const list = creators.get(c) ?? [];
      list.push(corpus.indexOf(it.id));
      creators.set(c, list);
    }
    await db.upsertItems(opts.embeddings ? batch : batch.map(({ embedding: _, ...item }) => item));
  }
  for (const batch of corpus.signalBatches(1000)) await db.signals(batch);
  const rand = mulberry32(0x9e5);
  const names = [...creators.keys()];
  for (let i = 0; i < users.length; i += 1000) await db.upsertUsers(users.slice(i, i + 1000).map((id) => ({ id })));
  for (let u = 0; u < users.length; u++) {
    // A favourite handful of creators: most of the history is theirs.
    const fav = Array.from({ length: 5 }, () => names[Math.floor(rand() * names.length)]!);
    const h: number[] = [];
    const evs: SignalInput[] = [];
    for (let k = 0; k < HISTORY; k++) {
      const list = creators.get(fav[k % fav.length]!)!;
      const i = rand() < 0.8 ? list[Math.floor(rand() * list.length)]! : Math.floor(rand() * opts.items);
      h.push(i);
      evs.push({ item: corpus.id(i), kind: rand() < 0.33 ? 'like' : 'view', user: users[u]! });
    }
    histories.push(h);
    await db.signals(evs);
    await Promise.all(fav.map((creator) => db.follow({ user: users[u]!, creator })));
  }
}

await main();
