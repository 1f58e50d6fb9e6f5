/**
 * The ANN index build on a thread of its own, seen from the database thread: started when a warm's
 * workers say the index is `building` (more rows to add than a warm waits for), reporting its
 * progress in `stats().annBuild`, and ending in a snapshot the next warm makes every worker adopt.
 * Vector searches are exact meanwhile (tidal-query's ExactVectors). Closing the database stops it:
 * nothing half-built is saved, and the next open starts again from the last snapshot.
 */
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import type { WarningSink } from 'tidal-load';
import { ANN_BUILDER_FILENAME, type AnnBuilderInit, type AnnBuilderMessage } from 'tidal-query';

/** What `stats().annBuild` reports. */
export interface AnnBuildStats {
  /**
   * `idle`: no build has run since open (the index came from a snapshot or a warm built it);
   * `building`: one runs now (vector searches are exact); `done`: the last one finished (its
   * snapshot is adopted by the warm that follows it); `failed`: the last one failed (searches stay
   * exact until a warm starts another).
   */
  state: 'idle' | 'building' | 'done' | 'failed';
  /** Item rows read into the index by the current (or last) build. */
  rowsDone: number;
  /** Rows it has to read, as known now (grows when writes arrive during the build). */
  rowsTotal: number;
  /** Milliseconds the current (or last) build has taken; 0 before any. */
  elapsedMs: number;
  /** Vectors in the snapshot the last finished build saved (0 before one finished). */
  vectors: number;
  /** Builds started since open. */
  builds: number;
  /** Why the last build failed, when `state` is `failed`. */
  error: string | null;
}

export interface AnnBuildOptions {
  file: string;
  dir: string;
  dims: number;
  /** The query workers' nice value; the build runs 10 above it (at most 19). */
  workerNice: number;
  onWarning: WarningSink;
}

export class AnnBuild {
  readonly #o: AnnBuildOptions;
  /**
   * Int32 0: 1 holds a starting build before it reads anything, 2 makes it fail (tests only; see
   * {@link hold}), 3 ends it there (close).
   */
  readonly #gate = new SharedArrayBuffer(4);
  #worker: Worker | null = null;
  #settled: Promise<void> = Promise.resolve();
  #started = 0;
  #finished = 0;
  #stats: AnnBuildStats = { state: 'idle', rowsDone: 0, rowsTotal: 0, elapsedMs: 0, vectors: 0, builds: 0, error: null };
  #stopped = false;
  /** Called once a build saved its snapshot (the database then warms, so the workers adopt it). */
  onDone: () => void = () => {};

  constructor(options: AnnBuildOptions) {
    this.#o = options;
  }

  /** Whether a build runs now. */
  get running(): boolean {
    return this.#worker !== null;
  }

  /** Starts a build unless one runs (or the database is closing). */
  start(): void {
    if (this.#worker || this.#stopped) return;
    const init: AnnBuilderInit = {
      file: this.#o.file,
      dir: this.#o.dir,
      dims: this.#o.dims,
      nice: Math.min(19, this.#o.workerNice + 10),
      gate: this.#gate,
    };
    const worker = new Worker(new URL(ANN_BUILDER_FILENAME), { workerData: init });
    this.#worker = worker;
    this.#started = performance.now();
    this.#finished = 0;
    this.#stats = { ...this.#stats, state: 'building', rowsDone: 0, rowsTotal: 0, builds: this.#stats.builds + 1, error: null };
    this.#o.onWarning({
      code: 'TIDAL_ANN_BUILDING',
      message: `The ANN index of ${this.#o.dir} is being built on a thread of its own; vector searches are exact (and slower) until it is ready (stats().annBuild shows the progress).`,
    });
    this.#settled = new Promise<void>((resolve) => {
      let outcome: AnnBuilderMessage | null = null;
      worker.on('message', (m: AnnBuilderMessage) => {
        if (m.op === 'progress') this.#stats = { ...this.#stats, rowsDone: m.rowsDone, rowsTotal: m.rowsTotal };
        else outcome = m;
      });
      worker.on('error', (err) => {
        outcome ??= { op: 'failed', message: err.message };
      });
      worker.on('exit', () => {
        this.#worker = null;
        this.#finished = performance.now();
        const o = outcome ?? { op: 'failed' as const, message: this.#stopped ? 'stopped by close()' : 'the build thread exited' };
        if (o.op === 'done') {
          this.#stats = { ...this.#stats, state: 'done', rowsDone: o.rowsDone, rowsTotal: o.rowsDone, vectors: o.vectors };
        } else {
          const message = o.op === 'failed' ? o.message : 'no outcome';
          this.#stats = { ...this.#stats, state: 'failed', error: message };
          if (!this.#stopped)
            this.#o.onWarning({
              code: 'TIDAL_ANN_BUILD_FAILED',
              message: `The ANN index build of ${this.#o.dir} failed: ${message}; vector searches stay exact, the next warm() tries again.`,
            });
        }
        resolve();
        if (o.op === 'done' && !this.#stopped) this.onDone();
      });
    });
  }

  /** Resolves when the current build (if any) has ended, however it ended. */
  settled(): Promise<void> {
    return this.#settled;
  }

  stats(): AnnBuildStats {
    const end = this.#worker ? performance.now() : this.#finished;
    return { ...this.#stats, elapsedMs: this.#started === 0 ? 0 : Math.max(0, end - this.#started) };
  }

  /** Tests: a build started from now waits before reading anything, until {@link release}. */
  hold(): void {
    Atomics.store(new Int32Array(this.#gate), 0, 1);
  }

  /** Tests: the next build to start fails at once, as one that cannot save its index would. */
  failNext(): void {
    Atomics.store(new Int32Array(this.#gate), 0, 2);
  }

  release(): void {
    const gate = new Int32Array(this.#gate);
    Atomics.store(gate, 0, 0);
    Atomics.notify(gate, 0);
  }

  /** Stops a running build (nothing of it is saved) and any later start. */
  async stop(): Promise<void> {
    this.#stopped = true;
    // A held build wakes to 3 and ends without reading anything; a running one is terminated.
    const gate = new Int32Array(this.#gate);
    Atomics.store(gate, 0, 3);
    Atomics.notify(gate, 0);
    const w = this.#worker;
    if (w) await w.terminate();
    await this.#settled;
  }
}
