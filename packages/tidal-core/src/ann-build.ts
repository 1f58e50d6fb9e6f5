/**
 * The ANN index build on a thread of its own, seen from the database thread: started when a warm's
 * workers say the index is `building` (more rows to add than a warm waits for), reporting its
 * progress in `stats().annBuild`, and ending in a snapshot the next warm makes every worker adopt.
 * Vector searches are exact meanwhile (tidal-query's ExactVectors). Closing the database
 * ({@link AnnBuild.finish}) waits for it up to `ann.closeWaitMs`, then has it save what it has
 * built, which the next open's build resumes from; an ephemeral database's close stops it
 * ({@link AnnBuild.stop}), its directory being deleted anyway.
 */
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import type { WarningSink } from 'tidal-load';
import { ANN_BUILDER_FILENAME, AnnGate, processNativeGate, type AnnBuilderInit, type AnnBuilderMessage } from 'tidal-query';

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
  /**
   * The last finished build was stopped early by `close()` and saved what it had built: the rows
   * newer than its snapshot (`rowsLeft`) are what the next open's build adds.
   */
  partial: boolean;
  /** Rows newer than the last finished build's snapshot when it ended (0 before one finished). */
  rowsLeft: number;
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
  /** Int32 0: tidal-query's `AnnGate` value the builder obeys. */
  readonly #gate = new SharedArrayBuffer(4);
  #worker: Worker | null = null;
  #settled: Promise<void> = Promise.resolve();
  #started = 0;
  #finished = 0;
  #stats: AnnBuildStats = {
    state: 'idle',
    rowsDone: 0,
    rowsTotal: 0,
    elapsedMs: 0,
    vectors: 0,
    builds: 0,
    error: null,
    partial: false,
    rowsLeft: 0,
  };
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
      nativeGate: processNativeGate(),
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
          const rowsTotal = o.partial ? o.rowsDone + o.rowsLeft : o.rowsDone;
          this.#stats = {
            ...this.#stats,
            state: 'done',
            rowsDone: o.rowsDone,
            rowsTotal,
            vectors: o.vectors,
            partial: o.partial,
            rowsLeft: o.rowsLeft,
          };
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
    this.#setGate(AnnGate.HOLD);
  }

  /** Tests: a build started from now waits after its first window of rows, until {@link release}. */
  holdAfterWindow(): void {
    this.#setGate(AnnGate.HOLD_AFTER_WINDOW);
  }

  /** Tests: the next build to start fails at once, as one that cannot save its index would. */
  failNext(): void {
    this.#setGate(AnnGate.FAIL);
  }

  release(): void {
    this.#setGate(AnnGate.RUN);
  }

  /**
   * Stops any later start and lets a running build end within `waitMs`: past it the build saves
   * what it has at the end of the window of rows it is adding (the next open's build resumes from
   * that snapshot) and ends. Tells `onWarning` once (`TIDAL_ANN_CLOSE_WAIT`) when there is a build
   * to wait for, and again (`TIDAL_ANN_BUILD_RESUMABLE`) when it was cut short.
   */
  async finish(waitMs: number): Promise<void> {
    this.#stopped = true;
    if (!this.#worker) return;
    const { rowsDone, rowsTotal } = this.#stats;
    const progress = rowsTotal === 0 ? 'no rows added yet' : `${rowsDone} of ${rowsTotal} rows added`;
    this.#o.onWarning({
      code: 'TIDAL_ANN_CLOSE_WAIT',
      message: `close() waits up to ${waitMs} ms for the ANN index build of ${this.#o.dir} (${progress}); past that it saves what it has built and the next open resumes from there.`,
    });
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, waitMs);
    });
    await Promise.race([this.#settled, waited]);
    clearTimeout(timer);
    // A build still running, or held by a test: save at the end of the window being added.
    this.#setGate(AnnGate.SAVE);
    await this.#settled;
    const end = this.#stats;
    if (end.state === 'done' && end.partial && end.rowsDone > 0)
      this.#o.onWarning({
        code: 'TIDAL_ANN_BUILD_RESUMABLE',
        message: `The ANN index build of ${this.#o.dir} was saved at ${end.rowsDone} rows added with ${end.rowsLeft} left; the next open adds the rest on a thread of its own (vector searches are exact until then).`,
      });
  }

  /** Stops a running build (nothing of it is saved) and any later start: an ephemeral database's close. */
  async stop(): Promise<void> {
    this.#stopped = true;
    // A held build wakes to END and ends without reading anything; a running one is terminated.
    this.#setGate(AnnGate.END);
    const w = this.#worker;
    if (w) await w.terminate();
    await this.#settled;
  }

  #setGate(value: number): void {
    const gate = new Int32Array(this.#gate);
    Atomics.store(gate, 0, value);
    Atomics.notify(gate, 0);
  }
}
