import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ClosedError, InvalidInputError } from 'tidal-load';
import { GroupCommit, SignalLog } from '../src/index.js';
import type { LogRecord } from '../src/signal-log.js';
import { openTestDb } from './db.js';

const dirs: string[] = [];
function tempDb() {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-wal-'));
  dirs.push(dir);
  return openTestDb(join(dir, 'db.sqlite'));
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

type Ev = Omit<LogRecord, 'seq'>;
const ev = (ordinal: number): Ev => ({ ordinal, kind: 0, weight: 1, at: 1000 + ordinal, session: null });

function setup(maxBatch: number, maxDelayMs = 5) {
  const db = tempDb();
  const log = new SignalLog(db);
  const batches: number[] = [];
  const applied: number[] = [];
  const gc = new GroupCommit<Ev>(
    db,
    {
      commit(events, firstSeq) {
        batches.push(events.length);
        events.forEach((e, i) => log.appendAt(firstSeq + i, e));
        log.setLastSeq(firstSeq + events.length - 1);
      },
      afterCommit(events) {
        for (const e of events) applied.push(e.ordinal);
      },
    },
    log.lastSeq(),
    { maxBatch, maxDelayMs },
  );
  return { db, log, gc, batches, applied };
}

describe('GroupCommit', () => {
  it('closes a batch at maxBatch events and numbers events in order', async () => {
    const { gc, batches, log } = setup(4, 1000);
    const seqs = await Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map((i) => gc.enqueue([ev(i)])));
    expect(seqs).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(batches).toEqual([4, 4]);
    expect([...log.replay(0)].map((r) => r.ordinal)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    gc.close();
  });

  it('closes a partial batch after maxDelayMs', async () => {
    const { gc, batches } = setup(100, 1);
    const seq = await gc.enqueue([ev(1), ev(2)]);
    expect(seq).toBe(1);
    expect(batches).toEqual([2]);
    gc.close();
  });

  it('commits a call that brings a quarter of a batch or more without waiting for the delay', async () => {
    // A 10 s delay: if the write waited for it, the setImmediate below would win the race.
    const { gc, batches } = setup(8, 10_000);
    const order: string[] = [];
    const big = gc.enqueue([ev(1), ev(2)]).then(() => order.push('committed'));
    await new Promise((r) => setImmediate(r));
    await big;
    order.push('after one turn');
    expect(order).toEqual(['committed', 'after one turn']);
    expect(batches).toEqual([2]);
    gc.close();
  });

  it('applies to hot state before the promise resolves', async () => {
    const { gc, applied } = setup(2, 1);
    await gc.enqueue([ev(9)]);
    expect(applied).toEqual([9]);
    gc.close();
  });

  it('never splits a multi-event write across batches, and a failed batch refuses it whole', async () => {
    const db = tempDb();
    const log = new SignalLog(db);
    const gc = new GroupCommit<Ev>(
      db,
      {
        commit(events, firstSeq) {
          events.forEach((e, i) => {
            if (e.weight < 0) throw new Error('refused row');
            log.appendAt(firstSeq + i, e);
          });
        },
      },
      0,
      { maxBatch: 2, maxDelayMs: 1 },
    );
    const big = gc.enqueue([ev(1), ev(2), ev(3)]);
    await expect(big).resolves.toBe(1);
    const bad = gc.enqueue([ev(4), { ...ev(5), weight: -1 }]);
    await expect(bad).rejects.toThrow(/refused row/);
    expect([...log.replay(0)].map((r) => r.ordinal)).toEqual([1, 2, 3]);
    // The refused batch consumed no sequence numbers.
    await expect(gc.enqueue([ev(6)])).resolves.toBe(4);
    gc.close();
  });

  it('flushes on close and refuses writes after it', async () => {
    const { gc, log } = setup(1000, 10_000);
    const p = gc.enqueue([ev(1)]);
    gc.close();
    await expect(p).resolves.toBe(1);
    await expect(gc.enqueue([ev(2)])).rejects.toBeInstanceOf(ClosedError);
    expect([...log.replay(0)].length).toBe(1);
  });

  it('keeps sequence numbers monotonic across a reopen and after truncation', async () => {
    const { db, gc, log } = setup(10, 1);
    await gc.enqueue([ev(1), ev(2), ev(3)]);
    gc.close();
    // What a checkpoint does: mark the rows covered, then delete them.
    db.transaction(() => {
      log.checkpointThrough(3);
      log.reclaim(3);
    })();
    expect([...log.replay(0)].length).toBe(0);
    expect(log.lastSeq()).toBe(3);
    expect(log.checkpointSeq()).toBe(3);
    const again = new GroupCommit<Ev>(db, { commit() {} }, log.lastSeq(), { maxBatch: 10, maxDelayMs: 1 });
    await expect(again.enqueue([ev(4)])).resolves.toBe(4);
    again.close();
  });

  it('refuses invalid options with the option named', () => {
    const db = tempDb();
    expect(() => new GroupCommit(db, { commit() {} }, 0, { maxBatch: 0 })).toThrow(InvalidInputError);
    expect(() => new GroupCommit(db, { commit() {} }, 0, { maxBatch: 1.5 })).toThrow(/options.maxBatch/);
    expect(() => new GroupCommit(db, { commit() {} }, 0, { maxDelayMs: -1 })).toThrow(/options.maxDelayMs/);
  });
});
