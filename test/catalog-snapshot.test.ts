/**
 * The catalog snapshot, through the public API: close saves it, a reopen's workers load it and
 * read only the rows written after it, and every answer is the one a reopen that reads every row
 * gives; a damaged snapshot or one newer than the items table is reported once and not used.
 */
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { TidalDb, type ItemInput, type SchemaDefinition, type TidalWarning } from 'tidal-core';
import { internalsOf } from 'tidal-core/internal';
import { HOUR, NOW, mulberry32 } from './helpers.js';

const DIMS = 4;
const SCHEMA: SchemaDefinition = {
  signals: [{ name: 'view', halfLifeMs: HOUR }],
  embeddingDims: DIMS,
  metadata: { creator: 'string', n: 'number' },
  creatorField: 'creator',
};
const WORDS = ['jazz', 'piano', 'blue', 'note', 'tokyo', 'night', 'café', 'rain'];
const FILE = 'catalog-snapshot.bin';

function makeItems(from: number, n: number, seed: number): ItemInput[] {
  const rand = mulberry32(seed);
  return Array.from({ length: n }, (_, i) => ({
    id: `c${from + i}`,
    text: Array.from({ length: 2 + Math.floor(rand() * 5) }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(' '),
    embedding: Array.from({ length: DIMS }, () => rand() * 2 - 1),
    createdAt: NOW - Math.floor(rand() * 100) * 1000,
    metadata: { creator: `u${Math.floor(rand() * 5)}`, n: Math.floor(rand() * 10) },
  }));
}

const dirs: string[] = [];
const opened: TidalDb[] = [];
afterEach(async () => {
  for (const db of opened.splice(0)) await db.close().catch(() => {});
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tidal-catalog-'));
  dirs.push(d);
  return d;
}

async function openDb(dir: string, warnings: TidalWarning[] = []): Promise<TidalDb> {
  const db = await TidalDb.builder()
    .path(dir)
    .schema(SCHEMA)
    .workers(2)
    .clock(() => NOW)
    .onWarning((w) => warnings.push(w))
    .open();
  opened.push(db);
  return db;
}

async function closeDb(db: TidalDb): Promise<void> {
  opened.splice(opened.indexOf(db), 1);
  await db.close();
}

/** Answers that read every part of a worker's catalog: BM25 scores, filters, the created order, vectors. */
async function answers(db: TidalDb): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const text of ['jazz', 'piano night', 'café rain blue', 'tokyo']) {
    out.push((await db.search({ text, limit: 50 })).hits.map((h) => [h.id, h.score]));
  }
  out.push((await db.search({ text: 'jazz', limit: 50, filter: { creator: 'u1', n: { gte: 3 } } })).hits.map((h) => [h.id, h.score]));
  out.push((await db.search({ vector: [1, 0.5, -0.2, 0.1], limit: 20 })).hits.map((h) => h.id));
  out.push((await db.retrieve({ profile: 'new', limit: 100 })).items.map((i) => i.id));
  out.push((await db.retrieve({ profile: 'new', limit: 100, filter: { creator: { in: ['u0', 'u3'] } } })).items.map((i) => i.id));
  return out;
}

/** Reopens `dir`: what every worker's first sync took from the snapshot, the answers, and the warnings. */
async function reopen(dir: string): Promise<{ versions: number[]; rows: number[]; answers: unknown[]; warnings: TidalWarning[] }> {
  const warnings: TidalWarning[] = [];
  const db = await openDb(dir, warnings);
  const warm = internalsOf(db).lastWarm();
  const got = {
    versions: warm.map((r) => r.catalogSnapshotVersion),
    rows: warm.map((r) => r.refreshedRows),
    answers: await answers(db),
    warnings,
  };
  await closeDb(db);
  return got;
}

/** `dir`'s answers when every worker reads every row (the snapshot removed first; close saves it again). */
async function fullRead(dir: string): Promise<unknown[]> {
  rmSync(join(dir, FILE));
  const r = await reopen(dir);
  expect(r.versions).toEqual([0, 0]);
  return r.answers;
}

describe('the catalog snapshot', () => {
  it('is saved at close and loaded by a reopen, which reads only the rows written after it and answers as a full read does', async () => {
    const dir = tempDir();
    let db = await openDb(dir);
    await db.upsertItems(makeItems(0, 80, 1));
    await closeDb(db);
    expect(existsSync(join(dir, FILE))).toBe(true);
    const older = join(dir, 'older.bin');
    copyFileSync(join(dir, FILE), older);

    // Writes after that snapshot: new items, replaced texts and metadata, deletions.
    db = await openDb(dir);
    await db.upsertItems(makeItems(80, 15, 2));
    await db.upsertItems(makeItems(10, 10, 3));
    for (const id of ['c3', 'c44', 'c85']) await db.delete(id);
    await closeDb(db);
    const want = await fullRead(dir);

    // The close saved a snapshot of everything: a reopen reads no row.
    const fresh = await reopen(dir);
    expect(fresh.versions.every((v) => v > 0)).toBe(true);
    expect(fresh.rows).toEqual([0, 0]);
    expect(fresh.answers).toEqual(want);

    // The older snapshot back in place: the rows changed after it are read (15 new, 10 replaced, 2
    // deleted; c85 is both new and deleted: 27 rows).
    copyFileSync(older, join(dir, FILE));
    const behind = await reopen(dir);
    expect(behind.versions[0]).toBeGreaterThan(0);
    expect(behind.versions[0]).toBeLessThan(fresh.versions[0]!);
    expect(behind.rows).toEqual([27, 27]);
    expect(behind.answers).toEqual(want);
    expect(behind.warnings).toEqual([]);
  });

  it('damaged: reported once, not used, the answers right, and the close saves a sound one', async () => {
    const dir = tempDir();
    const db = await openDb(dir);
    await db.upsertItems(makeItems(0, 60, 4));
    await closeDb(db);
    const bytes = readFileSync(join(dir, FILE));
    const damaged = Buffer.from(bytes);
    damaged[Math.floor(bytes.length / 2)] = damaged[Math.floor(bytes.length / 2)]! ^ 0xff;
    writeFileSync(join(dir, FILE), damaged);

    const r = await reopen(dir);
    expect(r.versions).toEqual([0, 0]);
    expect(r.warnings.map((w) => w.code)).toEqual(['TIDAL_CATALOG_SNAPSHOT_UNUSABLE']);
    expect(r.warnings[0]!.message).toMatch(/checksum/);
    const again = await reopen(dir);
    expect(again.warnings).toEqual([]);
    expect(again.versions.every((v) => v > 0)).toBe(true);
    expect(again.answers).toEqual(r.answers);
    expect(r.answers).toEqual(await fullRead(dir));
  });

  it("newer than the items table (another database's): reported once, not used, the answers right", async () => {
    const big = tempDir();
    let db = await openDb(big);
    await db.upsertItems(makeItems(0, 50, 5));
    await closeDb(db);
    const small = tempDir();
    db = await openDb(small);
    await db.upsertItems(makeItems(0, 20, 6));
    await closeDb(db);
    const want = await fullRead(small);
    copyFileSync(join(big, FILE), join(small, FILE));

    const r = await reopen(small);
    expect(r.versions).toEqual([0, 0]);
    expect(r.warnings.map((w) => w.code)).toEqual(['TIDAL_CATALOG_SNAPSHOT_UNUSABLE']);
    expect(r.warnings[0]!.message).toMatch(/items table ends at/);
    expect(r.answers).toEqual(want);
  });
});
