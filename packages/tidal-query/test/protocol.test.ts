import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { DegradationLevel } from 'tidal-load';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { openStorage } from 'tidal-wal/storage';
import { CELL_CANCELLED, runTask, type TaskPool, type TaskRunOptions, type WorkerTask } from '../src/protocol.js';
import { SignalStore, type SignalKindSpec } from '../src/signals/store.js';
import type { QuerySchema, TaskEnvelope } from '../src/types.js';

// The worker entry reads its init from workerData; here it runs on the test's own thread.
const init = vi.hoisted(() => ({}));
vi.mock('node:worker_threads', async (importOriginal) => ({
  ...(await importOriginal<typeof import('node:worker_threads')>()),
  workerData: init,
}));

const KINDS: SignalKindSpec[] = [{ name: 'view', halfLifeMs: 3_600_000, windows: ['all'], velocity: false }];
const SCHEMA: QuerySchema = { kinds: KINDS, metadata: {}, embeddingDims: 0 };
const ENV: TaskEnvelope = { level: DegradationLevel.Full, nowMs: 1_000_000, itemsVersion: 3 };
const cancel = new SharedArrayBuffer(4 * 8);

describe('runTask', () => {
  it('hands the task and options to the pool and resolves with what the pool resolved', async () => {
    const calls: [WorkerTask, TaskRunOptions | undefined][] = [];
    const answer = { savedVersion: 7, reason: 'saved' as const, catalogSavedVersion: null };
    const pool: TaskPool = {
      run: async (task, options) => {
        calls.push([task, options]);
        return answer;
      },
    };
    const signal = new AbortController().signal;
    const r = await runTask(pool, { op: 'persist-ann', env: ENV, budgetMs: 5 }, { signal });
    expect(r).toBe(answer);
    expect(calls).toEqual([[{ op: 'persist-ann', env: ENV, budgetMs: 5 }, { signal }]]);
  });
});

describe('worker dispatch', () => {
  let dir: string;
  let run: (msg: WorkerTask) => unknown;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tidal-protocol-'));
    const file = join(dir, 'db.sqlite');
    const db = new Database(file);
    openStorage(db, file);
    const insert = db.prepare('INSERT INTO items (ordinal, id, present, metadata, created_at, version) VALUES (?, ?, 1, ?, ?, ?)');
    for (let o = 0; o < 3; o++) insert.run(o, `i${o}`, '{}', 100 + o, o + 1);
    db.close();
    Object.assign(init, { file, schema: SCHEMA, arena: SignalStore.create({ kinds: KINDS, maxOrdinals: 8, maxSlots: 8 }).arena, cancel });
    run = (await import('../src/worker.js')).default;
  });

  afterAll(() => {
    vi.restoreAllMocks();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers each op with its own result', () => {
    const warm = run({ op: 'warm', env: ENV, barrier: new SharedArrayBuffer(16), annBuild: { backgroundRows: 20_000, running: false } });
    expect(warm).toMatchObject({ threadItems: 3, refreshedRows: 3, annSource: 'none', annElected: true });
    const retrieve = run({
      op: 'retrieve',
      env: ENV,
      task: { profile: 'new', context: null, filter: null, diversity: null, limit: 2, window: '1h', exclude: null },
      cell: -1,
    });
    expect(retrieve).toMatchObject({
      items: [
        { id: 'i2', rank: 1 },
        { id: 'i1', rank: 2 },
      ],
      warnings: [],
    });
    expect(run({ op: 'persist-ann', env: ENV, budgetMs: 1000 })).toEqual({
      savedVersion: null,
      reason: 'no-index',
      // The warmed worker saves its catalog (at the items' version 3).
      catalogSavedVersion: 3,
    });
  });

  it('skips a query whose cancel cell is set, and runs one whose cell is clear', () => {
    const task = { profile: 'new', context: null, filter: null, diversity: null, limit: 2, window: '1h', exclude: null } as const;
    const cells = new Int32Array(cancel);
    cells[3] = CELL_CANCELLED;
    expect(run({ op: 'retrieve', env: ENV, task, cell: 3 })).toEqual({ skipped: true });
    expect(
      run({ op: 'search', env: ENV, task: { text: 'x', vector: null, filter: null, diversity: null, limit: 2, boost: 0 }, cell: 3 }),
    ).toEqual({
      skipped: true,
    });
    cells[3] = 0;
    expect(run({ op: 'retrieve', env: ENV, task, cell: 3 })).toMatchObject({ items: [{ id: 'i2' }, { id: 'i1' }] });
  });

  it("fails a 'fault' task by throwing, or ends the thread with exit code 1", () => {
    expect(() => run({ op: 'fault', mode: 'throw' })).toThrow('injected query worker fault');
    const exit = vi.spyOn(process, 'exit').mockImplementation((code) => {
      throw new Error(`exit ${String(code)}`);
    });
    expect(() => run({ op: 'fault', mode: 'exit' })).toThrow('exit 1');
    expect(exit).toHaveBeenCalledWith(1);
  });
});
