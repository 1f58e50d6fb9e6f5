/**
 * Calls into usearch's addon kept out of a thread that is being terminated. When the process
 * exits (`process.exit()`, an uncaught exception, the event loop running dry), Node terminates
 * every worker thread, whatever it runs. A thread inside a usearch call then makes its answer's
 * arrays in an environment that refuses them; the addon (node-addon-api with C++ exceptions,
 * 2.25.3) throws from its error handler and the C++ runtime aborts the process: SIGABRT, exit
 * status 134 instead of the one asked for (2 of 6 `process.exit(0)` calls made while 16 vector
 * searches ran, before this gate).
 *
 * One gate per process, two Int32 cells in shared memory that every thread of the process reads:
 * how many threads are inside a call, and whether the process is exiting. The main thread's
 * `'exit'` listener, which runs before any worker is terminated, marks the gate closed and waits
 * (at most {@link EXIT_WAIT_MS}) for the count to reach 0; a thread enters by counting itself in
 * and then reading the mark, so either the exit sees it inside and waits, or it sees the mark and
 * does not call (throws). Two atomic adds a call, against calls of 30 µs and more.
 */
import { isMainThread } from 'node:worker_threads';
import { InternalError } from 'tidal-load';

const INSIDE = 0;
const EXITING = 1;

/**
 * How long an exit waits for the calls in flight: a search or a lookup takes well under a
 * millisecond at 100 000 items, an index's save or load longer; the bound keeps a long or stuck
 * call from holding the exit (the thread is then terminated inside it, as without the gate).
 */
const EXIT_WAIT_MS = 1000;

let gate: Int32Array | null = null;
let shared: SharedArrayBuffer | null = null;

/**
 * The process's gate, made by the first database opened in the main thread, which also adds the
 * exit listener; every thread the database starts is given it ({@link adoptNativeGate}). Null in a
 * worker thread, which is terminated rather than exited: a database opened there has no gate.
 */
export function processNativeGate(): SharedArrayBuffer | null {
  if (!isMainThread) return null;
  if (shared === null) {
    shared = new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT);
    gate = new Int32Array(shared);
    const cells = gate;
    process.once('exit', () => closeGate(cells, EXIT_WAIT_MS));
  }
  return shared;
}

/** Marks `cells` closed and waits, at most `waitMs`, until no thread is inside a call. Returns the threads still inside. */
export function closeGate(cells: Int32Array, waitMs: number): number {
  Atomics.store(cells, EXITING, 1);
  const until = performance.now() + waitMs;
  for (;;) {
    const inside = Atomics.load(cells, INSIDE);
    const left = until - performance.now();
    if (inside === 0 || left <= 0) return inside;
    Atomics.wait(cells, INSIDE, inside, left);
  }
}

/** Makes this thread's calls go through the process's gate (from the thread's start data; absent: ungated). */
export function adoptNativeGate(buffer: SharedArrayBuffer | null | undefined): void {
  gate = buffer ? new Int32Array(buffer) : null;
}

/** The gate of this thread, for tests: null when it has none. */
export function nativeGateCells(): Int32Array | null {
  return gate;
}

/**
 * Counts this thread in before a call into the addon; pair with {@link leaveNative} in a `finally`.
 * @throws {InternalError} when the process is exiting: the thread is about to be terminated.
 */
export function enterNative(): void {
  const g = gate;
  if (g === null) return;
  Atomics.add(g, INSIDE, 1);
  if (Atomics.load(g, EXITING) !== 0) {
    leaveNative();
    throw new InternalError('the process is exiting: no more vector searches in this thread');
  }
}

/** Counts this thread out after a call; wakes an exit waiting for it. */
export function leaveNative(): void {
  const g = gate;
  if (g === null) return;
  if (Atomics.sub(g, INSIDE, 1) === 1) Atomics.notify(g, INSIDE);
}
