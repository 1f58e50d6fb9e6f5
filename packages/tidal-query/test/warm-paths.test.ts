/**
 * The worker's warm runs each query path once so V8 compiles it before a real query: here, which
 * searches it runs. A text search of one term and one of several take different loops (the
 * one-list scan and MaxScore), so the warm runs both.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { openStorage } from 'tidal-wal/storage';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import type { RetrieveExecutor } from '../src/retrieve.js';
import type { SearchExecutor } from '../src/search.js';
import { SignalStore } from '../src/signals/store.js';
import { TextIndex } from '../src/text/text-index.js';
import { tokenize } from '../src/text/tokenizer.js';
import type { SearchTask } from '../src/types.js';
import { exercisePaths } from '../src/warm-paths.js';

const NOW = Date.UTC(2025, 0, 6, 12, 0, 0);
const TEXTS = ['jazz piano night', 'jazz river', 'jazz piano', 'stone', 'piano garden'];

function context(): QueryContext {
  const db = new Database(':memory:');
  openStorage(db, ':memory:');
  const items = new ItemsWriter(db);
  db.transaction(() => {
    TEXTS.forEach((text, o) =>
      items.upsert({ ordinal: o, id: `i${o}`, text, metadata: {}, createdAt: NOW - o, embedding: null }, o + 1, false),
    );
  })();
  const schema = { kinds: [], metadata: {}, embeddingDims: 0 };
  const catalog = new Catalog(db, schema);
  catalog.refresh();
  const store = SignalStore.create({ kinds: [], maxOrdinals: 16, maxSlots: 16 });
  return { schema, catalog, store, ann: null, db };
}

describe('the warm of query paths', () => {
  it('searches the commonest term alone and the two commonest together', () => {
    const searched: SearchTask[] = [];
    const retrieve = { run: () => ({}) } as unknown as RetrieveExecutor;
    const search = { run: (task: SearchTask) => (searched.push(task), {}) } as unknown as SearchExecutor;
    const ran = exercisePaths(retrieve, search, context(), NOW);
    const texts = searched.map((t) => t.text);
    expect(texts).toEqual(['jazz', 'jazz piano']);
    expect(tokenize(texts[1]!)).toHaveLength(2);
    expect(ran).toBeGreaterThan(searched.length);
  });

  it('commonestTerms gives the longest postings lists first, ties in first-seen order', () => {
    const index = new TextIndex();
    TEXTS.forEach((text, o) => index.set(o, text));
    expect(index.commonestTerms(1)).toEqual(['jazz']);
    expect(index.commonestTerms(3)).toEqual(['jazz', 'piano', 'night']);
    expect(index.commonestTerms(10)).toHaveLength(6);
    index.set(0, null);
    index.set(1, null);
    // piano is in 2 documents now, jazz and garden in 1 each (jazz seen first).
    expect(index.commonestTerms(2)).toEqual(['piano', 'jazz']);
    expect(new TextIndex().commonestTerms(2)).toEqual([]);
  });
});
