/**
 * `bench:personalization --baseline DIR`: this tree's personalized reads against another built
 * checkout's, side by side in one process, as `query --baseline` does for the plain ones. The same
 * corpus, users, histories and follows go into both trees (the batches of the two taking turns),
 * then each query type runs over one query list in blocks of {@link BLOCK} that take turns (who goes
 * first alternating, a warm-up block each): per type each side's p50 and p99 at the caller, after ÷
 * before of the p50 and of every block (median and range: the figure to read on a shared machine),
 * and the share of before's top ids after returned too. Separate runs of the two trees move by up to
 * 1.9× from one to the next on this machine, which hides any difference of 1.1×.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { SchemaDefinition, SignalInput, TidalDb } from 'tidal-core';
import { Corpus } from './corpus.js';
import { mulberry32 } from './random.js';
import { drawFollows, drawHistory, favouriteOf } from './personal-draw.js';
import { blockRow, collectGarbage, compareInBlocks, nowMs, type Baseline, type BlockSide, type Report } from './harness/index.js';

/** Queries per block: long enough that a block is not one cache miss, short enough for many blocks. */
const BLOCK = 30;

export interface TreesOptions {
  readonly items: number;
  readonly users: number;
  readonly history: number;
  readonly queries: number;
  readonly dims: number;
  readonly schema: SchemaDefinition;
}

type Db = Pick<TidalDb, 'upsertItems' | 'signals' | 'upsertUsers' | 'follow' | 'warm' | 'retrieve' | 'close'>;
type DbClass = { builder(): ReturnType<typeof TidalDb.builder> };

export async function compareTrees(baseline: Baseline, before: DbClass, after: DbClass, o: TreesOptions, report: Report): Promise<void> {
  report.line(`Baseline: ${baseline.dir} at ${baseline.commit} (before) against this tree (after).`);
  report.line();
  const corpus = new Corpus({ items: o.items, dims: o.dims });
  const now = corpus.now;
  const sides = [
    { name: 'before', Db: before },
    { name: 'after', Db: after },
  ];
  const dirs: string[] = [];
  const dbs: Db[] = [];
  try {
    for (const side of sides) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), `tidal-bench-personal-${side.name}-`));
      dirs.push(dir);
      // Work sharing off, as in the suite's own run: repeated queries must each run.
      const builder = side.Db.builder()
        .path(dir)
        .clock(() => now)
        .schema(o.schema)
        .workSharing({ maxStalenessMs: { coarseAggregates: 0, noDiversity: 0 } });
      dbs.push(await builder.open());
    }
    let turn = 0;
    const both = async (call: (db: Db) => Promise<unknown>): Promise<void> => {
      for (const k of turn++ % 2 === 0 ? [0, 1] : [1, 0]) await call(dbs[k]!);
    };
    const t0 = nowMs();
    const byCategory = new Map<string, number[]>();
    const creatorOf: string[] = [];
    for (const batch of corpus.items(1000)) {
      await both((db) => db.upsertItems(batch));
      for (const it of batch) {
        const i = corpus.indexOf(it.id);
        creatorOf[i] = it.metadata.creator;
        let l = byCategory.get(it.metadata.category);
        if (!l) byCategory.set(it.metadata.category, (l = []));
        l.push(i);
      }
    }
    for (const batch of corpus.signalBatches(1000)) await both((db) => db.signals(batch));
    // The users as the suite's own run draws them (its seed, its 80 % favourite category).
    const rand = mulberry32(0x9e5);
    const users = Array.from({ length: o.users }, (_, u) => `user-${u}`);
    for (let i = 0; i < o.users; i += 1000) await both((db) => db.upsertUsers(users.slice(i, i + 1000).map((id) => ({ id }))));
    const history: number[][] = [];
    for (let u = 0; u < o.users; u += 50) {
      const batch: SignalInput[] = [];
      for (let v = u; v < Math.min(o.users, u + 50); v++) {
        const h = drawHistory(rand, corpus, favouriteOf(byCategory, v), users[v]!, o.history, now);
        batch.push(...h.events);
        history.push(h.items);
      }
      await both((db) => db.signals(batch));
    }
    for (let u = 0; u < o.users; u += 200) {
      const follows: { user: string; creator: string }[] = [];
      for (let v = u; v < Math.min(o.users, u + 200); v++) {
        for (const creator of drawFollows(rand, favouriteOf(byCategory, v), creatorOf)) follows.push({ user: users[v]!, creator });
      }
      await both((db) => Promise.all(follows.map((e) => db.follow(e))));
    }
    for (const db of dbs) await db.warm({ waitForAnn: true });
    collectGarbage();
    report.line(`Both trees loaded (items, signals, users, histories, follows) and warm in ${((nowMs() - t0) / 1000).toFixed(0)} s.`);
    report.line();

    // One query list per type, drawn once: both trees answer the very same requests.
    const q = mulberry32(0x7ee);
    const user = (): string => users[Math.floor(q() * o.users)]!;
    const item = (): string => {
      const h = history[Math.floor(q() * history.length)]!;
      return corpus.id(h[Math.floor(q() * h.length)]!);
    };
    type Req = Parameters<Db['retrieve']>[0];
    const types: { label: string; next: () => Req }[] = [
      { label: 'for_you, Full', next: () => ({ profile: 'for_you', user: user(), explore: 0, level: 'Full' }) },
      { label: 'for_you, NoDiversity', next: () => ({ profile: 'for_you', user: user(), explore: 0, level: 'NoDiversity' }) },
      { label: 'for_you + unseen', next: () => ({ profile: 'for_you', user: user(), explore: 0, userFilter: { unseen: true } }) },
      { label: 'following', next: () => ({ profile: 'following', user: user() }) },
      { label: 'related', next: () => ({ profile: 'related', item: item() }) },
    ];
    const blocks = Math.max(1, Math.ceil(o.queries / BLOCK));
    const rows: string[][] = [];
    const results: unknown[] = [];
    for (const type of types) {
      const queries = Array.from({ length: (blocks + 1) * BLOCK }, () => type.next());
      const side = (k: number): BlockSide<Req> => ({
        name: sides[k]!.name,
        run: async (req) => ({ ids: (await dbs[k]!.retrieve(req)).items.map((x) => x.id) }),
      });
      const c = await compareInBlocks([side(0), side(1)], queries, BLOCK);
      const { before: sb, after: sa } = c;
      const row = blockRow(type.label, c, false);
      process.stderr.write(`${row.join(' | ')}\n`);
      rows.push(row);
      results.push({ label: type.label, before: sb, after: sa, perBlock: c.perBlock, agreement: c.agreement });
    }
    report.table(
      `${blocks * BLOCK} timed queries per type in blocks of ${BLOCK}, after one warm-up block; ms at the caller`,
      ['', 'before p50', 'after p50', 'after ÷ before (p50)', 'per block (range)', 'before p99', 'after p99', 'same top-k'],
      rows,
    );
    report.set('baseline', { dir: baseline.dir, commit: baseline.commit, types: results });
  } finally {
    for (const db of dbs) await db.close();
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
  }
}
