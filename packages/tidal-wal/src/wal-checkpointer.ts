import { Worker } from 'node:worker_threads';
import type Database from 'better-sqlite3';
import type { WarningSink } from 'tidal-load';

/** How often the checkpoint worker looks at the WAL. At full ingest rate that is ~2 MB per look. */
export const WAL_CHECKPOINT_POLL_MS = 200;

/**
 * Frames in the WAL past which the worker checkpoints every millisecond until the WAL starts over
 * (see wal-checkpoint-worker.ts): 32 MiB of 4 KiB pages, ≈ 1 s of single-event writes naming a
 * user at full rate.
 */
export const WAL_RESTART_FRAMES = 8192;

/** SQLite's own trigger (pages), restored on the writer if the worker is gone. */
const AUTOCHECKPOINT_PAGES = 1000;

/**
 * Moves SQLite's WAL checkpoints (copying committed pages from `-wal` into the database file) off
 * the main thread, onto a worker thread with its own connection.
 *
 * Why: with SQLite's automatic checkpoint, every ~1000 pages one commit on the main thread also
 * copies and fsyncs ~4 MB. Measured at full ingest rate: batch commits take ~1 ms at the median
 * but 16 of 400 took 10–37 ms, every one an autocheckpoint, and those were the event-loop stalls.
 * A PASSIVE checkpoint from another connection runs concurrently with the writer and the readers
 * (WAL mode is built for it), so the writer only ever appends.
 *
 * If the worker fails, the writer gets its automatic checkpoint back (and a warning), so the WAL
 * can never grow without bound.
 */
export class WalCheckpointer {
  readonly #writer: Database.Database;
  readonly #worker: Worker;
  readonly #exited: Promise<void>;
  #closed = false;

  private constructor(writer: Database.Database, file: string, pollMs: number, restartFrames: number, warn: WarningSink) {
    this.#writer = writer;
    this.#worker = new Worker(new URL('./wal-checkpoint-worker.js', import.meta.url), {
      workerData: { file, pollMs, restartFrames },
    });
    // An open database must not keep the process alive by itself; close() ends the worker anyway.
    this.#worker.unref();
    this.#exited = new Promise<void>((resolve) => this.#worker.once('exit', () => resolve()));
    this.#worker.once('error', (err) => {
      if (this.#closed) return;
      this.#restoreAutocheckpoint();
      warn({
        code: 'TIDAL_WAL_CHECKPOINTER_FAILED',
        message: `the WAL checkpoint worker failed (${err.message}); SQLite's automatic checkpoint on the main thread is back on`,
      });
    });
    writer.pragma('wal_autocheckpoint = 0');
  }

  /** Starts the worker for the database `file`, whose writer connection is `writer`. */
  static start(
    writer: Database.Database,
    file: string,
    warn: WarningSink,
    pollMs = WAL_CHECKPOINT_POLL_MS,
    restartFrames = WAL_RESTART_FRAMES,
  ): WalCheckpointer {
    return new WalCheckpointer(writer, file, pollMs, restartFrames, warn);
  }

  /** Stops the worker and gives the writer its automatic checkpoint back. Idempotent. */
  async close(): Promise<void> {
    if (!this.#closed) {
      this.#closed = true;
      this.#restoreAutocheckpoint();
      // Referenced again so the process waits for the worker's exit that close() promises.
      this.#worker.ref();
      this.#worker.postMessage({ t: 'close' });
    }
    await this.#exited;
  }

  #restoreAutocheckpoint(): void {
    if (this.#writer.open) this.#writer.pragma(`wal_autocheckpoint = ${AUTOCHECKPOINT_PAGES}`);
  }
}
