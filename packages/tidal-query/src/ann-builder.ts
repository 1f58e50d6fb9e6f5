/**
 * The ANN index build on a thread of its own (a worker_threads entry, started by the main thread
 * after a warm that found no snapshot it could use as it is): the query workers answer vector
 * searches by an exact search meanwhile (see ExactVectors), and adopt the snapshot this thread
 * saves at their next warm.
 *
 * It opens its own read-only connection, starts from the stored snapshot when there is a sound one
 * (a copy is loaded and the rows after it added) or from nothing, adds the rows with every core in
 * batches of `BUILD_CHUNK` (posting progress after each), then adds what was written meanwhile,
 * until at most `CATCH_UP_ROWS` are left for the workers to apply themselves, and saves the result
 * as the snapshot (ann-snapshot.ts: a crash at any point leaves the previous snapshot or the new one).
 *
 * Asked to stop early (the database is closing and will not wait longer: the gate's
 * `AnnGate.SAVE`), it ends the window it is adding and saves what it has as the snapshot, its
 * version the last row added: a window is a range of versions, so the rows after it are exactly
 * those the next open's build adds to it (it starts from a sound snapshot), and no row added is
 * added again.
 */
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { AnnIndex } from './ann.js';
import { AnnGate } from './ann-build-gate.js';
import { CATCH_UP_ROWS } from './ann-election.js';
import { BUILD_CHUNK, annRowsStatement, applyAnnRows, type AnnHolder } from './ann-rows.js';
import { discardSnapshot, readSnapshot, writeSnapshot } from './ann-snapshot.js';
import { adoptNativeGate } from './native-gate.js';
import { applyNice } from './nice.js';

/** What the builder thread is started with. */
export interface AnnBuilderInit {
  /** The database file. */
  file: string;
  /** The database directory, where the snapshot is saved. */
  dir: string;
  dims: number;
  /** The thread's nice value (usearch's threads inherit it). */
  nice: number;
  /** Int32 0: one of {@link AnnGate}'s values, written by the database thread. */
  gate: SharedArrayBuffer;
  /** The process's native gate (native-gate.ts); null: ungated. */
  nativeGate: SharedArrayBuffer | null;
}

/** What the builder thread posts. */
export type AnnBuilderMessage =
  | { op: 'progress'; rowsDone: number; rowsTotal: number }
  | {
      op: 'done';
      version: number;
      vectors: number;
      rowsDone: number;
      rebuiltReason: string | null;
      /** Stopped early (`AnnGate.SAVE`): the snapshot holds the rows up to `version`, rows after it are left. */
      partial: boolean;
      /** Rows newer than the snapshot when it ended: what the next build adds. */
      rowsLeft: number;
    }
  | { op: 'failed'; message: string };

/** Rounds of adding what was written during the previous one, before saving regardless. */
const CATCH_UP_ROUNDS = 4;

function build(init: AnnBuilderInit, post: (m: AnnBuilderMessage) => void): void {
  applyNice(init.nice);
  adoptNativeGate(init.nativeGate);
  const gate = new Int32Array(init.gate);
  while (Atomics.load(gate, 0) === AnnGate.HOLD) Atomics.wait(gate, 0, AnnGate.HOLD, 1000);
  if (Atomics.compareExchange(gate, 0, AnnGate.FAIL, AnnGate.RUN) === AnnGate.FAIL) throw new Error('injected ANN build failure');
  if (Atomics.load(gate, 0) === AnnGate.END) return;
  const db = new Database(init.file, { readonly: true, fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    const maxVersion = db.prepare('SELECT COALESCE(MAX(version), 0) FROM items').pluck();
    const pending = db.prepare('SELECT COUNT(*) FROM items WHERE version > ?').pluck();
    const rows = annRowsStatement(db);
    const found = readSnapshot(init.dir, init.dims, maxVersion.get() as number, true);
    const holder: AnnHolder = { index: null };
    let from = 0;
    let rebuiltReason: string | null = null;
    if (found.kind === 'ok') {
      try {
        holder.index = AnnIndex.load(init.dims, found.path);
        from = found.meta.version;
      } catch (err) {
        rebuiltReason = (err as Error).message;
      }
    } else if (found.kind === 'unusable') {
      rebuiltReason = found.reason;
    }
    const saveNow = (): boolean => Atomics.load(gate, 0) === AnnGate.SAVE;
    let partial = saveNow();
    let done = 0;
    let total = pending.get(from) as number;
    post({ op: 'progress', rowsDone: 0, rowsTotal: total });
    // In windows of BUILD_CHUNK rows, each its own read: a read held for the whole build would keep
    // SQLite from checkpointing its WAL past it while writes go on.
    const nth = db.prepare('SELECT version FROM items WHERE version > ? AND version <= ? ORDER BY version LIMIT 1 OFFSET ?').pluck();
    for (let round = 0; round < CATCH_UP_ROUNDS && !partial; round++) {
      const to = maxVersion.get() as number;
      while (from < to) {
        const upTo = (nth.get(from, to, BUILD_CHUNK - 1) as number | undefined) ?? to;
        done += applyAnnRows(rows, holder, init.dims, from, upTo, 0, Number.POSITIVE_INFINITY);
        from = upTo;
        post({ op: 'progress', rowsDone: done, rowsTotal: Math.max(total, done) });
        while (Atomics.load(gate, 0) === AnnGate.HOLD_AFTER_WINDOW) Atomics.wait(gate, 0, AnnGate.HOLD_AFTER_WINDOW, 1000);
        if (saveNow() && from < to) {
          partial = true;
          break;
        }
      }
      const left = pending.get(from) as number;
      if (left <= CATCH_UP_ROWS) break;
      total = done + left;
    }
    const rowsLeft = pending.get(from) as number;
    const end = { op: 'done' as const, rebuiltReason, partial, rowsLeft };
    if (!holder.index || holder.index.size === 0 || (partial && done === 0)) {
      // Stopped before a row was added: the snapshot there is (if any) is still the one to resume from.
      if (!partial) discardSnapshot(init.dir);
      post({ ...end, version: from, vectors: holder.index?.size ?? 0, rowsDone: done });
      return;
    }
    const meta = writeSnapshot(init.dir, holder.index, from);
    post({ ...end, version: meta.version, vectors: meta.count, rowsDone: done });
  } finally {
    db.close();
  }
}

if (parentPort) {
  const port = parentPort;
  try {
    build(workerData as AnnBuilderInit, (m) => port.postMessage(m));
  } catch (err) {
    port.postMessage({ op: 'failed', message: (err as Error).message } satisfies AnnBuilderMessage);
  }
}
