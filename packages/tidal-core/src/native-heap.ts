/**
 * Native memory the process freed, given back to the kernel. glibc's malloc keeps what a thread
 * frees in that thread's arena (one per thread that allocated, up to eight a core) for its next
 * allocation; a warm leaves much of it behind (the query threads' reads of the catalogue, the ANN
 * build and its snapshot's load, buffers V8 collected), and none of it is reused by the steady
 * state. `malloc_trim(0)` returns the free pages of every arena. Measured at 100 000 items and
 * 10 000 users with two workers after `warm({ waitForAnn: true })`: RSS 605 → 531 MiB
 * (docs/BENCHMARKS.md, memory).
 *
 * A fixed mmap threshold keeps it from building up again. glibc serves an allocation from mmap
 * from 128 KiB on, but raises that threshold (up to 32 MiB) each time such a block is freed, so
 * after a warm the large buffers of the steady state are carved from the arenas, where what is
 * freed stays resident. `mallopt(M_MMAP_THRESHOLD)` fixes it (the database's `mmapThresholdKb`,
 * 1 MiB by default; per process): at the same point, a median of five readings 435 → 414 MiB.
 *
 * The calls go through koffi (an optional dependency, a prebuilt FFI addon). Where they cannot be
 * made (not Linux, a C library without them such as musl, koffi not installed) nothing is trimmed
 * or fixed and {@link NativeHeapStats.available} says so; the database works the same.
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
  /**
   * The mmap threshold this process's malloc runs with, in KiB, as fixed by a database's
   * `mmapThresholdKb`; null when none fixed it (0, not available, or `MALLOC_MMAP_THRESHOLD_` set in the
   * environment, which glibc applied at start and is left as it is).
   */
  mmapThresholdKb: number | null;
}

interface Libc {
  trim: (pad: number) => number;
  mallopt: (param: number, value: number) => number;
}

/** glibc's `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` (malloc.h). */
const M_MMAP_THRESHOLD = -3;
const M_TRIM_THRESHOLD = -1;

let loading: Promise<Libc | null> | null = null;
/** The threshold a database of this process fixed (process-wide: the last one holds). */
let fixedKb: number | null = null;

async function loadLibc(): Promise<Libc | null> {
  if (process.platform !== 'linux') return null;
  try {
    const koffi = (await import('koffi')).default;
    const libc = koffi.load('libc.so.6');
    return {
      trim: libc.func('int malloc_trim(size_t pad)') as Libc['trim'],
      mallopt: libc.func('int mallopt(int param, int value)') as Libc['mallopt'],
    };
  } catch {
    return null;
  }
}

/** The process's `malloc_trim` and `mallopt`, looked up once (null where there are none). */
function libcFunctions(): Promise<Libc | null> {
  return (loading ??= loadLibc());
}

/**
 * Fixes the process's mmap threshold at `kb` KiB (0: leaves glibc's own); called by an open before
 * it reads anything. Process-wide: the last database opened with a threshold sets it. Left alone
 * when the environment sets `MALLOC_MMAP_THRESHOLD_`.
 */
export async function fixMmapThreshold(kb: number): Promise<void> {
  const libc = await libcFunctions();
  if (libc === null || kb === 0 || process.env.MALLOC_MMAP_THRESHOLD_ !== undefined) return;
  try {
    if (libc.mallopt(M_MMAP_THRESHOLD, kb * 1024) !== 1) return;
    fixedKb = kb;
    // glibc's dynamic threshold keeps the trim threshold at twice the mmap threshold; fixing one
    // leaves the other at 128 KiB, and the top of the heap was then given back and taken again on
    // the write path (the main thread per write of the personal mix 206 → 248 µs; 223 with this).
    if (process.env.MALLOC_TRIM_THRESHOLD_ === undefined) libc.mallopt(M_TRIM_THRESHOLD, 2 * kb * 1024);
  } catch {
    // As with a trim: the database works the same without it.
  }
}

/** Trims the process's native heap and counts what came back; one per database. */
export class NativeHeap {
  readonly #stats: Omit<NativeHeapStats, 'mmapThresholdKb'> = { available: false, trims: 0, releasedBytes: 0, lastMs: 0 };

  constructor() {
    void libcFunctions().then((libc) => {
      this.#stats.available = libc !== null;
    });
  }

  /** Gives the arenas' free pages back to the kernel; resolves once done (no-op where unavailable). */
  async trim(): Promise<void> {
    const libc = await libcFunctions();
    if (libc === null) return;
    const fn = libc.trim;
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
    return { ...this.#stats, mmapThresholdKb: fixedKb };
  }
}
