/**
 * The shared ANN index: built once per warm by one worker, saved in the database directory, mapped
 * by every worker, reused by the next open (with the rows changed after it applied), refreshed at
 * close, and rebuilt (with one warning) when the saved file is damaged.
 */
import {
  copyFileSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
  closeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TidalDb, type ItemInput, type SchemaDefinition, type WarmResult } from 'tidal-core';
import { HOUR, NOW, cosine, mulberry32 } from './helpers.js';

const SIDECAR = 'ann-snapshot.json';

function schema(dims: number): SchemaDefinition {
  return { signals: [{ name: 'view', halfLifeMs: HOUR }], embeddingDims: dims };
}

function randomVector(rand: () => number, dims: number): number[] {
  return Array.from({ length: dims }, () => rand() * 2 - 1);
}

function makeItems(n: number, dims: number, seed: number): ItemInput[] {
  const rand = mulberry32(seed);
  return Array.from({ length: n }, (_, i) => ({
    id: `it-${String(i).padStart(4, '0')}`,
    embedding: randomVector(rand, dims),
    createdAt: NOW - i,
  }));
}

/**
 * A search's hits are live items and its top hit is as close to `q` as the exact nearest one, give
 * or take what an approximate index may miss: HNSW graphs built on several threads differ from run
 * to run, and for a random query far from every item the exact winner can lose by a hair. Where the
 * top hit is further off than that, the exact nearest item must still be among the hits.
 */
function expectTop(live: Map<string, number[]>, q: number[], hits: readonly { id: string }[]): void {
  for (const h of hits) expect(live.get(h.id), `${h.id} is a live item`).toBeDefined();
  const exact = exactTop(live, q);
  const best = cosine(live.get(exact)!, q);
  if (cosine(live.get(hits[0]!.id)!, q) < best - 0.02)
    expect(
      hits.map((h) => h.id),
      'the exact nearest item is among the hits',
    ).toContain(exact);
}

/** The live item closest to `q` by exact cosine. */
function exactTop(live: Map<string, number[]>, q: number[]): string {
  let best = '';
  let bestSim = -Infinity;
  for (const [id, v] of live) {
    const sim = cosine(v, q);
    if (sim > bestSim) {
      bestSim = sim;
      best = id;
    }
  }
  return best;
}

interface Meta {
  file: string;
  version: number;
  dims: number;
  count: number;
}

function sidecar(dir: string): Meta {
  return JSON.parse(readFileSync(join(dir, SIDECAR), 'utf8')) as Meta;
}

let dirs: string[] = [];
let warnings: { code: string | undefined; message: string }[] = [];
const onWarning = (w: Error & { code?: string }): void => {
  warnings.push({ code: w.code, message: w.message });
};

beforeEach(() => {
  warnings = [];
  process.on('warning', onWarning);
});
afterEach(() => {
  process.off('warning', onWarning);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs = [];
});

function newDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tidal-ann-e2e-'));
  dirs.push(d);
  return d;
}

function open(dir: string, dims: number): Promise<TidalDb> {
  return TidalDb.builder()
    .path(dir)
    .workers(2)
    .clock(() => NOW)
    .schema(schema(dims))
    .open();
}

/** Warnings are delivered on a later tick. */
async function annWarnings(): Promise<string[]> {
  await new Promise((r) => setImmediate(r));
  return warnings.filter((w) => w.code?.startsWith('TIDAL_ANN_')).map((w) => w.code!);
}

/**
 * Runs the same vector search `times` times at once (so both workers serve some) and checks that
 * every answer is the same; returns it.
 */
async function searchEverywhere(db: TidalDb, vector: number[], limit: number, times = 8) {
  const all = await Promise.all(Array.from({ length: times }, () => db.search({ vector, limit })));
  const first = all[0]!;
  for (const r of all) {
    expect(r.hits.map((h) => [h.id, h.semantic])).toEqual(first.hits.map((h) => [h.id, h.semantic]));
    expect(r.explain.candidates).toBe(first.explain.candidates);
  }
  return first;
}

/**
 * Every worker reports the same origin and size; returns the first report. The embeddings each
 * read differ: only the first to sync writes the shared vectors (see sync-embeddings.test.ts).
 */
function sameEverywhere(warm: WarmResult[]): WarmResult {
  expect(warm).toHaveLength(2);
  expect(warm.filter((w) => w.annElected)).toHaveLength(1);
  expect(new Set(warm.map((w) => w.threadId)).size).toBe(2);
  const { annElected: _, threadId: _t, stepsMs: _s, refreshedEmbeddings: _e, ...first } = warm[0]!;
  for (const w of warm) {
    const { annElected: __, threadId: __t, stepsMs: __s, refreshedEmbeddings: __e, ...rest } = w;
    expect(rest).toEqual(first);
  }
  return warm[0]!;
}

const DIMS = 8;
const N = 300;

describe('ANN index built once and shared', () => {
  it('one worker builds it, every worker maps it, and all answer like exact cosine', async () => {
    const dir = newDir();
    const db = await open(dir, DIMS);
    try {
      const items = makeItems(N, DIMS, 1);
      await db.upsertItems(items);
      const w = sameEverywhere(await db.warm());
      expect(w).toMatchObject({ annSource: 'built', annSize: N, annSnapshotVersion: N, annRowsApplied: 0, threadItems: N });
      expect(sidecar(dir)).toMatchObject({ version: N, dims: DIMS, count: N });

      const live = new Map(items.map((it) => [it.id, it.embedding as number[]]));
      const rand = mulberry32(2);
      for (let q = 0; q < 25; q++) {
        const v = randomVector(rand, DIMS);
        const r = await searchEverywhere(db, v, 10);
        expectTop(live, v, r.hits);
        // The index holds int8 rows: similarities within 1e-2 of the exact cosine (docs/api.md).
        expect(Math.abs(r.hits[0]!.semantic! - cosine(live.get(r.hits[0]!.id)!, v))).toBeLessThan(1e-2);
      }
      expect(await annWarnings()).toEqual([]);
    } finally {
      await db.close();
    }
  });

  it('a second open maps the saved snapshot instead of rebuilding', async () => {
    const dir = newDir();
    const items = makeItems(N, DIMS, 3);
    let db = await open(dir, DIMS);
    await db.upsertItems(items);
    expect(sameEverywhere(await db.warm()).annSource).toBe('built');
    const saved = sidecar(dir);
    const mtime = statSync(join(dir, saved.file)).mtimeMs;
    await db.close();
    // Nothing changed since the snapshot: close leaves it alone.
    expect(sidecar(dir)).toEqual(saved);

    db = await open(dir, DIMS);
    try {
      // A later warm reports how the workers' index was made by open's warm.
      const w = sameEverywhere(await db.warm());
      expect(w).toMatchObject({ annSource: 'snapshot', annSnapshotVersion: N, annRowsApplied: 0, annSize: N });
      expect(sidecar(dir)).toEqual(saved);
      expect(statSync(join(dir, saved.file)).mtimeMs).toBe(mtime);
      // Each item's own embedding finds it first. An HNSW graph can leave a node hard to reach
      // (about one self-query in ten runs missed on this 300-item index), so the check is over 20
      // items: a mapped snapshot that answered wrongly would miss most of them.
      let found = 0;
      for (let i = 0; i < 20; i++) {
        const item = items[i * 15]!;
        const r = await searchEverywhere(db, item.embedding as number[], 5);
        if (r.hits[0]!.id === item.id) found++;
      }
      expect(found).toBeGreaterThanOrEqual(18);
      expect(await annWarnings()).toEqual([]);
    } finally {
      await db.close();
    }
  });

  it('rows upserted and deleted after the snapshot are applied on reopen', async () => {
    const dir = newDir();
    const items = makeItems(N, DIMS, 4);
    let db = await open(dir, DIMS);
    await db.upsertItems(items);
    await db.warm();
    const old = sidecar(dir);
    const keep = { sidecar: readFileSync(join(dir, SIDECAR)), index: readFileSync(join(dir, old.file)) };

    const rand = mulberry32(5);
    const moved = items[10]!;
    const movedTo = randomVector(rand, DIMS);
    const deleted = items[20]!;
    const added: ItemInput = { id: 'added', embedding: randomVector(rand, DIMS), createdAt: NOW };
    await db.upsert({ ...moved, embedding: movedTo });
    await db.delete(deleted.id);
    await db.upsert(added);
    await db.close();
    // close() saved a snapshot covering the three changes...
    expect(sidecar(dir).version).toBe(N + 3);
    // ...put the older one back, as a crash before close would have left it.
    for (const name of readdirSync(dir)) if (name.startsWith('ann-')) rmSync(join(dir, name));
    writeFileSync(join(dir, old.file), keep.index);
    writeFileSync(join(dir, SIDECAR), keep.sidecar);

    db = await open(dir, DIMS);
    try {
      const w = sameEverywhere(await db.warm());
      expect(w).toMatchObject({ annSource: 'snapshot', annSnapshotVersion: N, annRowsApplied: 3, annSize: N });

      const live = new Map(items.map((it) => [it.id, it.embedding as number[]]));
      live.set(moved.id, movedTo);
      live.delete(deleted.id);
      live.set(added.id, added.embedding as number[]);

      // The deleted item is not even an ANN candidate, even with every item asked for (HNSW may
      // miss a node or two at k = everything, so the count is only bounded).
      const nearDeleted = await searchEverywhere(db, deleted.embedding as number[], 1000);
      expect(nearDeleted.explain.candidates).toBeLessThanOrEqual(N);
      expect(nearDeleted.explain.candidates).toBe(nearDeleted.hits.length);
      expect(nearDeleted.hits.map((h) => h.id)).not.toContain(deleted.id);
      expectTop(live, deleted.embedding as number[], nearDeleted.hits);

      // The replaced embedding moved the item: first for its new vector, scored by it for its old one.
      const atNew = await searchEverywhere(db, movedTo, 3);
      expect(atNew.hits[0]!.id).toBe(moved.id);
      expect(atNew.hits[0]!.semantic).toBeCloseTo(1, 5);
      const atOld = await searchEverywhere(db, moved.embedding as number[], 1000);
      const hit = atOld.hits.find((h) => h.id === moved.id)!;
      expect(Math.abs(hit.semantic! - cosine(movedTo, moved.embedding as number[]))).toBeLessThan(1e-2);
      expectTop(live, moved.embedding as number[], atOld.hits);

      const atAdded = await searchEverywhere(db, added.embedding as number[], 3);
      expect(atAdded.hits[0]!.id).toBe(added.id);

      const rand2 = mulberry32(6);
      for (let q = 0; q < 15; q++) {
        const v = randomVector(rand2, DIMS);
        expectTop(live, v, (await searchEverywhere(db, v, 5)).hits);
      }
    } finally {
      await db.close();
    }
    // That close brought the snapshot up to date again; the next open applies nothing.
    expect(sidecar(dir)).toMatchObject({ version: N + 3, count: N });
    db = await open(dir, DIMS);
    try {
      expect(sameEverywhere(await db.warm())).toMatchObject({
        annSource: 'snapshot',
        annSnapshotVersion: N + 3,
        annRowsApplied: 0,
        annSize: N,
      });
      expect(await annWarnings()).toEqual([]);
    } finally {
      await db.close();
    }
  });

  it('close() saves the changes since the snapshot, so the next open applies none', async () => {
    const dir = newDir();
    const items = makeItems(N, DIMS, 7);
    let db = await open(dir, DIMS);
    await db.upsertItems(items.slice(0, 200));
    await db.warm();
    expect(sidecar(dir).version).toBe(200);
    await db.upsertItems(items.slice(200));
    await db.delete(items[0]!.id);
    // Served by the workers in between: they apply the rows themselves.
    expect((await searchEverywhere(db, items[250]!.embedding as number[], 1)).hits[0]!.id).toBe(items[250]!.id);
    await db.close();
    expect(sidecar(dir)).toMatchObject({ version: 301, count: N - 1 });
    expect(readdirSync(dir).filter((n) => n.endsWith('.usearch'))).toEqual([sidecar(dir).file]);

    db = await open(dir, DIMS);
    try {
      expect(sameEverywhere(await db.warm())).toMatchObject({
        annSource: 'snapshot',
        annSnapshotVersion: 301,
        annRowsApplied: 0,
        annSize: N - 1,
      });
      const r = await searchEverywhere(db, items[0]!.embedding as number[], 1000);
      expect(r.explain.candidates).toBe(r.hits.length);
      expect(r.hits.map((h) => h.id)).not.toContain(items[0]!.id);
    } finally {
      await db.close();
    }
  });

  it('a corrupted snapshot is rebuilt with one warning, and answers stay correct', async () => {
    const dir = newDir();
    const items = makeItems(N, DIMS, 8);
    let db = await open(dir, DIMS);
    await db.upsertItems(items);
    await db.warm();
    await db.close();
    const { file } = sidecar(dir);
    const path = join(dir, file);
    const fd = openSync(path, 'r+');
    writeSync(fd, Buffer.alloc(256, 0x5a), 0, 256, Math.floor(statSync(path).size / 3));
    closeSync(fd);

    db = await open(dir, DIMS);
    try {
      expect(await annWarnings()).toEqual(['TIDAL_ANN_SNAPSHOT_REBUILT']);
      expect(warnings.find((w) => w.code === 'TIDAL_ANN_SNAPSHOT_REBUILT')!.message).toMatch(/checksum/);
      expect(sameEverywhere(await db.warm())).toMatchObject({ annSource: 'built', annSize: N, annRowsApplied: 0 });
      expect(sidecar(dir).file).not.toBe(file);
      const live = new Map(items.map((it) => [it.id, it.embedding as number[]]));
      const rand = mulberry32(9);
      for (let q = 0; q < 15; q++) {
        const v = randomVector(rand, DIMS);
        expectTop(live, v, (await searchEverywhere(db, v, 5)).hits);
      }
    } finally {
      await db.close();
    }
    // The rebuilt snapshot is sound: no warning the next time.
    warnings = [];
    db = await open(dir, DIMS);
    try {
      expect(sameEverywhere(await db.warm()).annSource).toBe('snapshot');
      expect(await annWarnings()).toEqual([]);
    } finally {
      await db.close();
    }
  });

  it('a garbled sidecar is rebuilt with one warning', async () => {
    const dir = newDir();
    const items = makeItems(50, DIMS, 10);
    let db = await open(dir, DIMS);
    await db.upsertItems(items);
    await db.warm();
    await db.close();
    writeFileSync(join(dir, SIDECAR), '{"format": 1, "file": ');
    db = await open(dir, DIMS);
    try {
      expect(await annWarnings()).toEqual(['TIDAL_ANN_SNAPSHOT_REBUILT']);
      expect(sameEverywhere(await db.warm())).toMatchObject({ annSource: 'built', annSize: 50 });
      expect((await searchEverywhere(db, items[7]!.embedding as number[], 1)).hits[0]!.id).toBe(items[7]!.id);
    } finally {
      await db.close();
    }
  });

  it('a snapshot of other dimensions is ignored', async () => {
    // A snapshot of 16-dimensional vectors...
    const other = newDir();
    let db = await open(other, 16);
    await db.upsertItems(makeItems(400, 16, 11));
    await db.warm();
    await db.close();
    const foreign = sidecar(other);
    // ...dropped into an 8-dimensional database's directory.
    const dir = newDir();
    const items = makeItems(120, DIMS, 12);
    db = await open(dir, DIMS);
    await db.upsertItems(items);
    await db.warm();
    await db.close();
    for (const name of readdirSync(dir)) if (name.startsWith('ann-')) rmSync(join(dir, name));
    copyFileSync(join(other, foreign.file), join(dir, foreign.file));
    copyFileSync(join(other, SIDECAR), join(dir, SIDECAR));

    db = await open(dir, DIMS);
    try {
      expect(await annWarnings()).toEqual([]);
      expect(sameEverywhere(await db.warm())).toMatchObject({ annSource: 'built', annSize: 120 });
      expect(sidecar(dir)).toMatchObject({ dims: DIMS, count: 120 });
      expect(readdirSync(dir)).not.toContain(foreign.file);
      const live = new Map(items.map((it) => [it.id, it.embedding as number[]]));
      const rand = mulberry32(13);
      for (let q = 0; q < 10; q++) {
        const v = randomVector(rand, DIMS);
        expectTop(live, v, (await searchEverywhere(db, v, 3)).hits);
      }
    } finally {
      await db.close();
    }
  });

  it('without embeddings there is no index and no snapshot; deleting every embedded item drops the snapshot', async () => {
    const dir = newDir();
    let db = await open(dir, DIMS);
    try {
      await db.upsertItems([{ id: 'plain', text: 'no vector here', createdAt: NOW }]);
      expect(sameEverywhere(await db.warm())).toMatchObject({ annSource: 'none', annSize: 0 });
      expect(readdirSync(dir).filter((n) => n.startsWith('ann-'))).toEqual([]);
      const items = makeItems(20, DIMS, 14);
      await db.upsertItems(items);
      expect(sameEverywhere(await db.warm())).toMatchObject({ annSource: 'built', annSize: 20 });
      for (const it of items) await db.delete(it.id);
    } finally {
      await db.close();
    }
    expect(readdirSync(dir).filter((n) => n.startsWith('ann-'))).toEqual([]);
    db = await open(dir, DIMS);
    try {
      expect(sameEverywhere(await db.warm())).toMatchObject({ annSource: 'none', annSize: 0 });
      const r = await db.search({ vector: randomVector(mulberry32(15), DIMS), limit: 5 });
      expect(r.hits).toEqual([]);
    } finally {
      await db.close();
    }
  });
});
