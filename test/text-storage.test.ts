/** The text index needs no FTS5 table: none is written, an older file's is dropped, scores are the live counts'. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { TidalDb, type ItemInput, type SearchHit } from 'tidal-core';
import { NOW, SCHEMA, TestClock } from './helpers.js';

const root = mkdtempSync(join(tmpdir(), 'tidal-text-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const open = (dir: string): Promise<TidalDb> => TidalDb.builder().path(dir).schema(SCHEMA).workers(1).clock(new TestClock().read).open();

const ITEMS: ItemInput[] = [
  { id: 'a', text: 'Jazz piano trio at the Café', createdAt: NOW },
  { id: 'b', text: 'jazz guitar and piano, late night jazz', createdAt: NOW },
  { id: 'c', text: 'rock guitar école', createdAt: NOW },
  { id: 'd', text: 'piano sonata', createdAt: NOW },
  { id: 'e', text: 'ambient drone, no words worth searching', createdAt: NOW },
];
const QUERIES = ['jazz', 'piano guitar', 'cafe', 'ecole rock', 'drone'];

async function scores(db: TidalDb): Promise<{ id: string; bm25: number | undefined }[][]> {
  const out: { id: string; bm25: number | undefined }[][] = [];
  for (const text of QUERIES) {
    const r = await db.search({ text, limit: 10 });
    out.push(r.hits.map((h: SearchHit) => ({ id: h.id, bm25: h.bm25 })));
  }
  return out;
}

function ftsTables(file: string): string[] {
  const raw = new Database(file, { readonly: true });
  try {
    return raw
      .prepare("SELECT name FROM sqlite_master WHERE name LIKE 'items_fts%' OR sql LIKE '%fts5%' ORDER BY name")
      .pluck()
      .all() as string[];
  } finally {
    raw.close();
  }
}

describe('text search storage', () => {
  it('item writes create and write no FTS5 table', async () => {
    const dir = join(root, 'new');
    const db = await open(dir);
    await db.upsertItems(ITEMS);
    await db.upsertItems([{ id: 'a', text: 'Jazz piano trio', createdAt: NOW }]);
    await db.delete('c');
    expect((await db.search({ text: 'jazz', limit: 10 })).hits.map((h) => h.id)).toEqual(['b', 'a']);
    await db.close();
    expect(ftsTables(join(dir, 'tidal.db'))).toEqual([]);
  });

  it('rewriting an item leaves every other score as it was (N and avgdl are the live documents)', async () => {
    const once = await open(join(root, 'once'));
    await once.upsertItems(ITEMS);
    const want = await scores(once);
    await once.close();
    const rewritten = await open(join(root, 'rewritten'));
    await rewritten.upsertItems(ITEMS);
    expect(await scores(rewritten)).toEqual(want);
    // Rewrites of the same text, and a delete then a re-insert, each seen by the worker (a search
    // syncs it): a contentless_delete FTS5 table would count every one of them in N and avgdl.
    for (let i = 0; i < 5; i++) {
      await rewritten.upsertItems([ITEMS[4]!]);
      await rewritten.search({ text: 'drone', limit: 1 });
    }
    await rewritten.delete('d');
    await rewritten.search({ text: 'drone', limit: 1 });
    await rewritten.upsertItems([ITEMS[3]!]);
    expect(await scores(rewritten)).toEqual(want);
    await rewritten.close();
  });

  it('opens a format-3 file with its items_fts table: the table goes, search ranks as before', async () => {
    const dir = join(root, 'v3');
    const file = join(dir, 'tidal.db');
    const first = await open(dir);
    await first.upsertItems(ITEMS);
    const want = await scores(first);
    await first.close();
    // Turn the file back into format 3: the contentless_delete FTS5 table it kept beside the items,
    // with a stale row besides.
    const raw = new Database(file);
    raw.exec("CREATE VIRTUAL TABLE items_fts USING fts5(text, content='', contentless_delete=1)");
    raw.exec('INSERT INTO items_fts (rowid, text) SELECT ordinal, text FROM items WHERE text IS NOT NULL');
    raw.exec("INSERT INTO items_fts (rowid, text) VALUES (999, 'jazz jazz jazz')");
    raw.pragma('user_version = 3');
    raw.close();
    expect(ftsTables(file).length).toBeGreaterThan(1);

    const again = await open(dir);
    expect(await scores(again)).toEqual(want);
    await again.close();
    expect(ftsTables(file)).toEqual([]);
    const check = new Database(file, { readonly: true });
    expect(check.pragma('user_version', { simple: true })).toBeGreaterThanOrEqual(4);
    check.close();
  });
});
