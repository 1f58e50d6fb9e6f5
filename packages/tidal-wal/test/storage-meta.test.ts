import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { META, Meta, STORAGE_VERSION, openStorage } from '../src/storage/index.js';

describe('tidal_meta keys', () => {
  it('store each value as the text every version of the format has written', () => {
    const db = new Database(':memory:');
    expect(openStorage(db, ':memory:')).toBe(0);
    expect(db.pragma('user_version', { simple: true })).toBe(STORAGE_VERSION);
    const meta = new Meta(db);
    meta.set(META.embeddingDims, 384);
    meta.set(META.kinds, ['view', 'like']);
    meta.set(META.cursorSecret, 'ab01');
    meta.set(META.lastSeq, 12_345_678_901);
    meta.set(META.checkpointSeq, 7);
    meta.set(META.checkpointChunkBytes, 65_536);
    meta.set(META.checkpointSlotLayout, 2);
    const raw = Object.fromEntries(db.prepare('SELECT key, value FROM tidal_meta ORDER BY key').raw().all() as [string, string][]);
    expect(raw).toEqual({
      embeddingDims: '384',
      kinds: '["view","like"]',
      cursor_secret: 'ab01',
      last_seq: '12345678901',
      checkpoint_seq: '7',
      checkpoint_chunk_bytes: '65536',
      checkpoint_slot_layout: '2',
    });
    db.close();
  });

  it('read what an older file holds, and undefined for a key never set', () => {
    const db = new Database(':memory:');
    openStorage(db, ':memory:');
    const meta = new Meta(db);
    expect(meta.get(META.lastSeq)).toBeUndefined();
    db.prepare("INSERT INTO tidal_meta VALUES ('last_seq', '41'), ('kinds', '[\"a\"]'), ('cursor_secret', 'ff')").run();
    expect(meta.get(META.lastSeq)).toBe(41);
    expect(meta.get(META.kinds)).toEqual(['a']);
    expect(meta.get(META.cursorSecret)).toBe('ff');
    db.close();
  });
});
