/**
 * The ANN index built on a thread of its own: a warm that would add more than `ann.backgroundRows`
 * rows returns at once, queries are answered meanwhile by an exact search over the int8 vectors
 * (and say so), the build reports its progress, takes in what was written during it, and ends in a
 * snapshot every worker adopts; close() lets it finish or saves what it has for the next open to
 * resume; a failure is reported and retried by the next warm.
 * The build is held at its start (a test hook) so what is seen during it does not depend on timing.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { InternalError, InvalidInputError, TidalDb, type ItemInput, type SchemaDefinition, type TidalWarning } from 'tidal-core';
import { internalsOf } from 'tidal-core/internal';
import { HOUR, NOW, cosine, mulberry32 } from './helpers.js';

const DIMS = 8;
const SCHEMA: SchemaDefinition = {
  signals: [{ name: 'view', halfLifeMs: HOUR }],
  embeddingDims: DIMS,
  metadata: { creator: 'string' },
  creatorField: 'creator',
};

function vector(rand: () => number): number[] {
  return Array.from({ length: DIMS }, () => rand() * 2 - 1);
}

function makeItems(from: number, n: number, seed: number): ItemInput[] {
  const rand = mulberry32(seed);
  return Array.from({ length: n }, (_, i) => ({
    id: `b${from + i}`,
    embedding: vector(rand),
    createdAt: NOW - (from + i) * 1000,
    metadata: { creator: `c${(from + i) % 7}` },
  }));
}

const dirs: string[] = [];
const open: TidalDb[] = [];
afterEach(async () => {
  for (const db of open.splice(0)) await db.close().catch(() => {});
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A database that builds every ANN index on its own thread; `configure` adds to the builder. */
async function openDb(
  warnings: TidalWarning[],
  path?: string,
  workers = 2,
  configure: (b: ReturnType<typeof TidalDb.builder>) => void = () => {},
): Promise<TidalDb> {
  const b = TidalDb.builder()
    .schema(SCHEMA)
    .workers(workers)
    .clock(() => NOW)
    .ann({ backgroundRows: 0 })
    .onWarning((w) => warnings.push(w));
  configure(b);
  const db = await (path ? b.path(path) : b.ephemeral()).open();
  open.push(db);
  return db;
}

/** Every returned hit is as near as the exact k-th nearest item, to int8 rounding. */
function expectExactTopK(all: ItemInput[], q: number[], ids: readonly string[], k: number): void {
  const ranked = all.map((it) => cosine(q, it.embedding as number[])).sort((a, b) => b - a);
  const kth = ranked[k - 1]!;
  const byId = new Map(all.map((it) => [it.id, it.embedding as number[]]));
  expect(ids).toHaveLength(k);
  for (const id of ids) expect(cosine(q, byId.get(id)!), id).toBeGreaterThan(kth - 0.02);
}

describe('the ANN index built on its own thread', () => {
  it('builds in the warm at exactly backgroundRows embedded items, and on its own thread at one more', async () => {
    // Only present items with an embedding count: items without one and deleted ones do not.
    const outcome = async (embedded: number): Promise<string> => {
      const warnings: TidalWarning[] = [];
      const db = await openDb(warnings, undefined, 1, (b) => b.ann({ backgroundRows: 30 }));
      internalsOf(db).annBuild.hold();
      await db.upsertItems(makeItems(0, embedded, 3));
      await db.upsertItems(Array.from({ length: 10 }, (_, i) => ({ id: `plain${i}`, createdAt: NOW - i })));
      await db.upsertItems(makeItems(1000, 5, 4));
      for (let i = 0; i < 5; i++) await db.delete(`b${1000 + i}`);
      return (await db.warm())[0]!.annSource;
    };
    expect(await outcome(30)).toBe('built');
    expect(await outcome(31)).toBe('building');
  });

  it('answers vector searches exactly while it builds, takes in the writes made meanwhile, and every worker adopts it', async () => {
    const warnings: TidalWarning[] = [];
    const db = await openDb(warnings);
    const build = internalsOf(db).annBuild;
    build.hold();
    const items = makeItems(0, 300, 1);
    await db.upsertItems(items);
    await db.upsertUsers([{ id: 'u', embedding: vector(mulberry32(9)) }]);

    const warmed = await db.warm();
    expect(warmed.map((w) => w.annSource)).toEqual(['building', 'building']);
    expect(warnings.map((w) => w.code)).toContain('TIDAL_ANN_BUILDING');
    expect(db.stats().annBuild).toMatchObject({ state: 'building', builds: 1 });

    const rand = mulberry32(5);
    for (let q = 0; q < 10; q++) {
      const v = vector(rand);
      const r = await db.search({ vector: v, limit: 10 });
      expect(r.explain.vectorSearch).toBe('exact');
      expectExactTopK(
        items,
        v,
        r.hits.map((h) => h.id),
        10,
      );
    }
    // An item's own vector finds it first.
    const own = await db.search({ vector: items[42]!.embedding as number[], limit: 1 });
    expect(own.hits[0]!.id).toBe('b42');
    // for_you scans no row for its neighbours while the index builds: without a popular item the
    // search is exact over every row; with some, the popular subset's nearest stand in.
    const cold = await db.retrieve({ profile: 'for_you', user: 'u', limit: 10 });
    expect(cold.items).toHaveLength(10);
    expect(cold.explain.vectorSearch).toBe('exact');
    await db.signals(items.slice(0, 60).map((it, i) => ({ item: it.id, kind: 'view', at: NOW - i * 1000 })));
    const feed = await db.retrieve({ profile: 'for_you', user: 'u', limit: 10, level: 'Full' });
    expect(feed.items).toHaveLength(10);
    expect(feed.explain.vectorSearch).toBeUndefined();
    expect(feed.explain.popularCandidates).toBeGreaterThan(0);
    const around = await db.retrieve({ profile: 'popular', context: vector(rand), limit: 5 });
    expect(around.explain.vectorSearch).toBe('exact');

    // Written during the build: in the index once it is adopted.
    const later = makeItems(300, 40, 2);
    await db.upsertItems(later);
    await db.delete('b7');
    const during = await db.search({ vector: later[3]!.embedding as number[], limit: 1 });
    expect(during.hits[0]!.id).toBe('b303');

    build.release();
    const adopted = await db.warm({ waitForAnn: true });
    expect(adopted.map((w) => w.annSource)).toEqual(['snapshot', 'snapshot']);
    for (const w of adopted) expect(w.annSize).toBe(339);
    expect(db.stats().annBuild).toMatchObject({ state: 'done', vectors: 339, builds: 1, error: null });
    expect(db.stats().annBuild.rowsDone).toBeGreaterThanOrEqual(339);
    for (const it of [later[3]!, items[42]!]) {
      const r = await db.search({ vector: it.embedding as number[], limit: 1 });
      expect(r.explain.vectorSearch).toBe('ann');
      expect(r.hits[0]!.id).toBe(it.id);
    }
    const gone = await db.search({ vector: items[7]!.embedding as number[], limit: 20 });
    expect(gone.hits.map((h) => h.id)).not.toContain('b7');
  });

  it('exports the build as gauges', async () => {
    const { Registry } = await import('prom-client');
    const registry = new Registry();
    const db = await openDb([], undefined, 1, (b) => b.metrics(registry));
    internalsOf(db).annBuild.hold();
    await db.upsertItems(makeItems(0, 60, 4));
    await db.warm();
    expect(await registry.metrics()).toMatch(/^tidal_ann_building 1$/m);
    internalsOf(db).annBuild.release();
    await db.warm({ waitForAnn: true });
    const text = await registry.metrics();
    expect(text).toMatch(/^tidal_ann_building 0$/m);
    expect(text).toMatch(/^tidal_ann_build_rows_done 60$/m);
    expect(text).toMatch(/^tidal_ann_build_rows_total 60$/m);
  });

  it('a finished build is adopted by a warm of its own, without waitForAnn', async () => {
    const db = await openDb([]);
    await db.upsertItems(makeItems(0, 200, 3));
    expect((await db.warm()).map((w) => w.annSource)).toEqual(['building', 'building']);
    await internalsOf(db).annBuild.settled();
    // The build's end started a warm of its own; no call here warms.
    await internalsOf(db).warmed();
    expect(
      internalsOf(db)
        .lastWarm()
        .map((w) => w.annSource),
    ).toEqual(['snapshot', 'snapshot']);
    expect((await db.search({ vector: vector(mulberry32(4)), limit: 3 })).explain.vectorSearch).toBe('ann');
  });

  it('close() waits for a running build to finish and save the index; the next open builds nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tidal-annbg-'));
    dirs.push(dir);
    const warnings: TidalWarning[] = [];
    let waiting!: () => void;
    const closeWaits = new Promise<void>((resolve) => (waiting = resolve));
    // A wait longer than any run: the build is released once the close has said it waits, so a slow machine cannot cut it short.
    const first = await openDb(warnings, dir, 2, (b) =>
      b.ann({ backgroundRows: 0, closeWaitMs: 600_000 }).onWarning((w) => {
        warnings.push(w);
        if (w.code === 'TIDAL_ANN_CLOSE_WAIT') waiting();
      }),
    );
    const build = internalsOf(first).annBuild;
    build.hold();
    await first.upsertItems(makeItems(0, 150, 6));
    await first.warm();
    expect(first.stats().annBuild.state).toBe('building');
    // The close waits on the build (its progress line says so), which ends once released.
    const closed = first.close();
    await closeWaits;
    expect(warnings.find((w) => w.code === 'TIDAL_ANN_CLOSE_WAIT')!.message).toMatch(/waits up to 600000 ms .*\(no rows added yet\)/);
    build.release();
    await closed;
    open.splice(open.indexOf(first), 1);
    expect(existsSync(join(dir, 'ann-snapshot.json'))).toBe(true);
    expect(warnings.map((w) => w.code)).not.toContain('TIDAL_ANN_BUILD_RESUMABLE');

    // Saved: the next open maps it and builds nothing.
    const again: TidalWarning[] = [];
    const second = await openDb(again, dir);
    expect(again.map((w) => w.code)).not.toContain('TIDAL_ANN_BUILDING');
    expect(second.stats().annBuild.state).toBe('idle');
    expect((await second.search({ vector: vector(mulberry32(8)), limit: 3 })).explain.vectorSearch).toBe('ann');
  });

  it('past ann.closeWaitMs, close() saves what the build has added and the next open adds only the rest', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tidal-annbg-'));
    dirs.push(dir);
    // One window of 8 192 rows and 300 more.
    const all = makeItems(0, 8_192 + 300, 21);
    const warnings: TidalWarning[] = [];
    const first = await openDb(warnings, dir, 1, (b) => b.ann({ backgroundRows: 0, closeWaitMs: 0 }));
    const build = internalsOf(first).annBuild;
    build.holdAfterWindow();
    await first.upsertItems(all);
    await first.warm();
    // The build posts its progress after each window, then waits (the test hook).
    await vi.waitFor(() => expect(first.stats().annBuild.rowsDone).toBe(8_192), { timeout: 60_000, interval: 10 });
    await first.close();
    open.splice(open.indexOf(first), 1);
    const codes = warnings.map((w) => w.code);
    expect(codes).toContain('TIDAL_ANN_CLOSE_WAIT');
    expect(warnings.find((w) => w.code === 'TIDAL_ANN_BUILD_RESUMABLE')!.message).toMatch(/saved at 8192 rows added with 300 left/);
    const saved = JSON.parse(readFileSync(join(dir, 'ann-snapshot.json'), 'utf8')) as { count: number };
    expect(saved.count).toBe(8_192);

    // The next open resumes from it: its build adds the 300 rows left, not 8 492.
    const again: TidalWarning[] = [];
    const second = await openDb(again, dir);
    expect(again.map((w) => w.code)).toContain('TIDAL_ANN_BUILDING');
    await second.warm({ waitForAnn: true });
    const resumed = second.stats().annBuild;
    expect(resumed.state).toBe('done');
    expect(resumed.rowsDone).toBe(300);
    expect(resumed.vectors).toBe(8_192 + 300);
    const q = vector(mulberry32(22));
    const r = await second.search({ vector: q, limit: 10 });
    expect(r.explain.vectorSearch).toBe('ann');
    expectExactTopK(
      all,
      q,
      r.hits.map((h) => h.id),
      10,
    );
  });

  it('a failed build is reported, searches stay exact, waitForAnn rejects, and the next warm tries again', async () => {
    const warnings: TidalWarning[] = [];
    const db = await openDb(warnings);
    const build = internalsOf(db).annBuild;
    build.failNext();
    await db.upsertItems(makeItems(0, 120, 7));
    const err = await db.warm({ waitForAnn: true }).catch((e: unknown) => e);
    expect(InternalError.is(err)).toBe(true);
    expect(String((err as Error).message)).toMatch(/injected ANN build failure/);
    expect(warnings.map((w) => w.code)).toContain('TIDAL_ANN_BUILD_FAILED');
    expect(db.stats().annBuild).toMatchObject({ state: 'failed', builds: 1 });
    expect((await db.search({ vector: vector(mulberry32(1)), limit: 3 })).explain.vectorSearch).toBe('exact');
    await db.warm({ waitForAnn: true });
    expect(db.stats().annBuild).toMatchObject({ state: 'done', builds: 2, vectors: 120 });
  });

  it('a worker that replaces a crashed one searches exactly while the build runs, and maps the saved index after it', async () => {
    const db = await openDb([], undefined, 1);
    const { annBuild, pool } = internalsOf(db);
    annBuild.hold();
    const items = makeItems(0, 120, 11);
    await db.upsertItems(items);
    await db.warm();
    await expect(pool.run({ op: 'fault', mode: 'exit' })).rejects.toThrow();
    // The replacement's first task is this query: no warm elected it, and it builds nothing.
    const during = await db.search({ vector: items[5]!.embedding as number[], limit: 1 });
    expect(during.explain.vectorSearch).toBe('exact');
    expect(during.hits[0]!.id).toBe('b5');
    annBuild.release();
    await db.warm({ waitForAnn: true });
    await expect(pool.run({ op: 'fault', mode: 'exit' })).rejects.toThrow();
    const after = await db.search({ vector: items[9]!.embedding as number[], limit: 1 });
    expect(after.explain.vectorSearch).toBe('ann');
    expect(after.hits[0]!.id).toBe('b9');
    expect((await db.warm())[0]!.annSource).toBe('snapshot');
  });

  it('items without embeddings start no build', async () => {
    const warnings: TidalWarning[] = [];
    const db = await openDb(warnings);
    await db.upsertItems(Array.from({ length: 50 }, (_, i) => ({ id: `t${i}`, text: 'plain words' })));
    expect((await db.warm()).map((w) => w.annSource)).toEqual(['none', 'none']);
    expect(warnings.map((w) => w.code)).not.toContain('TIDAL_ANN_BUILDING');
    expect(db.stats().annBuild.builds).toBe(0);
  });

  it('refuses bad options naming them', async () => {
    const b = () => TidalDb.builder().ephemeral().schema(SCHEMA).workers(1);
    for (const [ann, field] of [
      [{ backgroundRows: -1 }, 'ann.backgroundRows'],
      [{ backgroundRows: 1.5 }, 'ann.backgroundRows'],
      [{ backgroundRows: Number.NaN }, 'ann.backgroundRows'],
      [{ backgroundRow: 5 }, 'ann.backgroundRow'],
      [{ closeWaitMs: -1 }, 'ann.closeWaitMs'],
      [{ closeWaitMs: 2.5 }, 'ann.closeWaitMs'],
    ] as const) {
      const err = await b()
        .ann(ann as never)
        .open()
        .catch((e: unknown) => e);
      expect(InvalidInputError.is(err), JSON.stringify(ann)).toBe(true);
      expect((err as InvalidInputError).field).toBe(field);
    }
    const db = await b().ann({ backgroundRows: Number.POSITIVE_INFINITY }).open();
    open.push(db);
    for (const [opts, field] of [
      [{ waitForAnn: 'yes' }, 'options.waitForAnn'],
      [{ wait: true }, 'options.wait'],
      [5, 'options'],
    ] as const) {
      const err = await db.warm(opts as never).catch((e: unknown) => e);
      expect(InvalidInputError.is(err), JSON.stringify(opts)).toBe(true);
      expect((err as InvalidInputError).field).toBe(field);
    }
    // Infinity: a warm always builds the index itself.
    await db.upsertItems(makeItems(0, 50, 2));
    expect((await db.warm())[0]!.annSource).toBe('built');
  });
});
