import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SignalLog } from '../src/index.js';
import { openTestDb } from './db.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function setup() {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-log-'));
  dirs.push(dir);
  const file = join(dir, 'db.sqlite');
  const db = openTestDb(file);
  const log = new SignalLog(db);
  db.transaction(() => {
    for (let seq = 1; seq <= 100; seq++) log.appendAt(seq, { ordinal: seq, kind: 0, weight: 1, at: seq, session: null });
    log.setLastSeq(100);
  })();
  return { db, log, file };
}

const total = (db: ReturnType<typeof setup>['db']) => db.prepare('SELECT COUNT(*) FROM signal_log').pluck().get() as number;

describe('SignalLog reclaim', () => {
  it('replays only after the checkpoint at once, and deletes the covered rows a slice at a time', () => {
    const { db, log } = setup();
    db.transaction(() => log.checkpointThrough(60))();
    expect(log.checkpointSeq()).toBe(60);
    expect([...log.replay(log.checkpointSeq())].map((r) => r.seq)).toEqual(Array.from({ length: 40 }, (_, i) => 61 + i));
    expect(total(db)).toBe(100); // nothing deleted yet
    expect(db.transaction(() => log.reclaim(25))()).toBe(25);
    expect(db.transaction(() => log.reclaim(25))()).toBe(25);
    expect(db.transaction(() => log.reclaim(25))()).toBe(10); // never past the checkpoint
    expect(db.transaction(() => log.reclaim(25))()).toBe(0);
    expect(total(db)).toBe(40);
    expect(log.lastSeq()).toBe(100);
    db.close();
  });

  it('picks up an unfinished reclaim after a reopen', () => {
    const { db, log, file } = setup();
    db.transaction(() => {
      log.checkpointThrough(50);
      log.reclaim(10);
    })();
    db.close();
    const again = openTestDb(file);
    const log2 = new SignalLog(again);
    expect(again.transaction(() => log2.reclaim(1000))()).toBe(40);
    expect(total(again)).toBe(50);
    again.close();
  });
});
