/**
 * Native memory the process freed, given back to the kernel. glibc's malloc keeps what a thread
 * frees in that thread's arena (one per thread that allocated, up to eight a core) for its next
 * allocation; a warm leaves much of it behind (the query threads' reads of the catalogue, the ANN
 * build and its snapshot's load, buffers V8 collected), and none of it is reused by the steady
 * state. `malloc_trim(0)` returns the free pages of every arena. Measured at 100 000 items and
 * 10 000 users with two workers after `warm({ waitForAnn: true })`: RSS 605 → 531 MiB
 * (docs/BENCHMARKS.md, memory).
 *
 * The call goes through koffi (an optional dependency, a prebuilt FFI addon). Where it cannot be
 * made (not Linux, a C library without `malloc_trim` such as musl, koffi not installed) nothing
 * is trimmed and {@link NativeHeapStats.available} says so; the database works the same.
 */

export interface NativeHeapStats {
  /** Whether `malloc_trim` can be called in this process (false until it was looked up, at the open). */
  available: boolean;
  /** Trims made (one after each warm round of the query workers). */
  trims: number;
  /** Resident bytes given back, summed over the trims (RSS before less after; 0 when it grew meanwhile). */
  releasedBytes: number;
  /** Milliseconds the last trim took (it runs on the database's thread). */
  lastMs: number;
}

type Trim = (pad: number) => number;

let loading: Promise<Trim | null> | null = null;

async function loadTrim(): Promise<Trim | null> {
  if (process.platform !== 'linux') return null;
  try {
    const koffi = (await import('koffi')).default;
    const libc = koffi.load('libc.so.6');
    return libc.func('int malloc_trim(size_t pad)') as Trim;
  } catch {
    return null;
  }
}

/** The process's `malloc_trim`, looked up once (null where there is none). */
function trimFunction(): Promise<Trim | null> {
  return (loading ??= loadTrim());
}

/** Trims the process's native heap and counts what came back; one per database. */
export class NativeHeap {
  readonly #stats: NativeHeapStats = { available: false, trims: 0, releasedBytes: 0, lastMs: 0 };

  constructor() {
    void trimFunction().then((fn) => {
      this.#stats.available = fn !== null;
    });
  }

  /** Gives the arenas' free pages back to the kernel; resolves once done (no-op where unavailable). */
  async trim(): Promise<void> {
    const fn = await trimFunction();
    if (fn === null) return;
    const s = this.#stats;
    const before = process.memoryUsage.rss();
    const t0 = performance.now();
    try {
      fn(0);
    } catch {
      // Giving memory back is never worth failing a warm for: this trim is skipped.
      return;
    }
    s.lastMs = performance.now() - t0;
    s.trims++;
    s.releasedBytes += Math.max(0, before - process.memoryUsage.rss());
  }

  stats(): NativeHeapStats {
    return { ...this.#stats };
  }
}
