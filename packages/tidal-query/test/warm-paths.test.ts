/**
 * The worker's warm runs each query path once so V8 compiles it before a real query: here, which
 * searches it runs. A text search of one term and one of several take different loops (the
 * one-list scan and MaxScore), and terms whose bounds differ take MaxScore's block skips, so the
 * warm runs each.
 */
import Database from 'better-sqlite3';
import { DegradationLevel } from 'tidal-load';
import { describe, expect, it } from 'vitest';
import { openStorage } from 'tidal-wal/storage';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import type { RetrieveMessage, SearchMessage } from '../src/protocol.js';
import { SignalStore } from '../src/signals/store.js';
import { TextIndex } from '../src/text/text-index.js';
import { tokenize } from '../src/text/tokenizer.js';
import type { RetrieveTask, SearchTask } from '../src/types.js';
import { exercisePaths, RETRIEVE_TASK_KEYS, SEARCH_TASK_KEYS } from '../src/warm-paths.js';

const NOW = Date.UTC(2025, 0, 6, 12, 0, 0);
const ENV = { level: DegradationLevel.NoDiversity, nowMs: NOW, itemsVersion: 5 };
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
  it('searches the commonest term alone, with the next, with a rarer one, and three terms', () => {
    const searched: SearchTask[] = [];
    const run = (m: RetrieveMessage | SearchMessage) => (m.op === 'search' && searched.push(m.task), {});
    const ran = exercisePaths(run, context(), ENV);
    const texts = searched.map((t) => t.text);
    // The commonest 64 (6 here): jazz and piano, then night, river, stone and garden once each.
    expect(texts).toEqual(['jazz', 'jazz piano', 'jazz garden', 'jazz river garden']);
    expect(texts.map((t) => tokenize(t!).length)).toEqual([1, 2, 2, 3]);
    expect(ran).toBeGreaterThan(searched.length);
  });

  it('runs for_you in each window on a catalogue without embeddings (no preference, no ANN source)', () => {
    const ran: RetrieveTask[] = [];
    exercisePaths((m) => (m.op === 'retrieve' && ran.push(m.task), {}), context(), ENV);
    const forYou = ran.filter((t) => t.profile === 'for_you');
    expect(forYou.map((t) => t.window)).toEqual(['1h', '24h', '7d']);
    expect(forYou.every((t) => t.user?.preference === null)).toBe(true);
    expect(ran.some((t) => t.context !== null)).toBe(false);
  });

  it('sends each query as a posted one arrives: a message at Full, cloned, its task with every key in the order of a real task', () => {
    const msgs: (RetrieveMessage | SearchMessage)[] = [];
    const objects = new Set<unknown>();
    exercisePaths((m) => (msgs.push(m), objects.add(m.env), objects.add(m.task), {}), context(), ENV);
    expect(msgs.length).toBeGreaterThan(10);
    // A fresh copy each: nothing is shared between two messages, as between two posted ones.
    expect(objects.size).toBe(2 * msgs.length);
    for (const m of msgs) {
      expect(m.env).toEqual({ level: DegradationLevel.Full, nowMs: NOW, itemsVersion: 5 });
      expect(Object.keys(m.env)).toEqual(['level', 'nowMs', 'itemsVersion']);
      expect(m.cell).toBe(-1);
      expect(Object.keys(m.task)).toEqual(m.op === 'retrieve' ? RETRIEVE_TASK_KEYS : SEARCH_TASK_KEYS);
    }
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
