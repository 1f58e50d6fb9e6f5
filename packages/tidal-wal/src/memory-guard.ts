import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { InvalidInputError, MemoryPressureError, type WarningSink } from 'tidal-load';

export interface MemoryGuardOptions {
  /**
   * Writes are refused while the host's MemAvailable + SwapFree is under this many bytes. `'auto'`
   * is max(32 MiB, 2 % of MemTotal): low on purpose, so it fires only when the kernel is about to
   * run out, never as a standing false alarm on a busy but healthy host. `0` turns the guard off.
   * @default 'auto'
   */
  floorBytes?: number | 'auto';
  /**
   * Where the host's memory figures are read from (Linux `/proc/meminfo` format); tests point it at
   * a file they write.
   * @default '/proc/meminfo'
   */
  meminfoPath?: string;
}

export interface FilledMemoryGuardOptions {
  floorBytes: number | 'auto';
  meminfoPath: string;
}

export const MEMORY_GUARD_DEFAULTS: Readonly<FilledMemoryGuardOptions> = Object.freeze({
  floorBytes: 'auto',
  meminfoPath: '/proc/meminfo',
});

/** The smallest automatic floor: below 32 MiB a host is already swapping itself to death. */
export const AUTO_FLOOR_MIN_BYTES = 32 * 1024 * 1024;
/** The automatic floor as a share of MemTotal (2 %). */
export const AUTO_FLOOR_SHARE = 0.02;
/** A sample is reused for this long; the first writer after that reads a new one. */
export const MEMORY_SAMPLE_INTERVAL_MS = 1_000;

/**
 * Validates the options without touching the file system: a floor that is not `'auto'` or a whole
 * number of bytes refuses to open (a safety knob never falls back silently).
 */
export function resolveMemoryGuardOptions(options: MemoryGuardOptions = {}, field = 'memoryGuard'): FilledMemoryGuardOptions {
  if (typeof options !== 'object' || options === null) throw new InvalidInputError(field, 'an options object', options);
  const floorBytes = options.floorBytes === undefined ? MEMORY_GUARD_DEFAULTS.floorBytes : options.floorBytes;
  if (floorBytes !== 'auto' && !(typeof floorBytes === 'number' && Number.isSafeInteger(floorBytes) && floorBytes >= 0)) {
    throw new InvalidInputError(`${field}.floorBytes`, "'auto', 0 (off) or a whole number of bytes", floorBytes);
  }
  const meminfoPath = options.meminfoPath === undefined ? MEMORY_GUARD_DEFAULTS.meminfoPath : options.meminfoPath;
  if (typeof meminfoPath !== 'string' || meminfoPath.length === 0) {
    throw new InvalidInputError(`${field}.meminfoPath`, 'a non-empty file path', meminfoPath);
  }
  return { floorBytes, meminfoPath };
}

/** The figures the guard uses from a meminfo file, in bytes. */
export interface MemInfo {
  totalBytes: number;
  /** MemAvailable + SwapFree: what the kernel can still hand out before it must kill something. */
  availableBytes: number;
}

/**
 * Parses the `MemTotal`, `MemAvailable` and `SwapFree` lines (in kB) of a `/proc/meminfo` text.
 * Returns undefined if one of them is missing or not a number.
 */
export function parseMeminfo(text: string): MemInfo | undefined {
  const kb = (name: string): number | undefined => {
    const m = new RegExp(`^${name}:\\s+(\\d+) kB$`, 'm').exec(text);
    return m ? Number(m[1]) * 1024 : undefined;
  };
  const total = kb('MemTotal');
  const available = kb('MemAvailable');
  const swapFree = kb('SwapFree');
  if (total === undefined || available === undefined || swapFree === undefined) return undefined;
  return { totalBytes: total, availableBytes: available + swapFree };
}

/**
 * Refuses writes when the host is about to run out of memory, instead of accepting them until the
 * kernel's OOM killer takes the process. It measures MemAvailable + SwapFree, not MemAvailable
 * alone: memory a database holds as non-reclaimable cache can keep MemAvailable low at rest, while
 * free swap is still memory the kernel can hand out.
 *
 * Cost on the write path: one clock read and one compare. The file is read at most once per
 * {@link MEMORY_SAMPLE_INTERVAL_MS}, synchronously, by the first writer that finds the sample stale;
 * everyone else uses the previous sample. No timer, no lock, and no stampede (JavaScript runs one
 * writer at a time, so exactly one call refreshes). Reads never consult it.
 */
export class MemoryGuard {
  readonly #floorBytes: number;
  readonly #path: string;
  readonly #nowMs: () => number;
  readonly #warn: WarningSink;
  #availableBytes: number;
  #sampledAt: number;
  #readFailed = false;

  private constructor(floorBytes: number, path: string, first: MemInfo, nowMs: () => number, warn: WarningSink) {
    this.#floorBytes = floorBytes;
    this.#path = path;
    this.#nowMs = nowMs;
    this.#warn = warn;
    this.#availableBytes = first.availableBytes;
    this.#sampledAt = nowMs();
  }

  /**
   * Reads the meminfo file once (for MemTotal and the first sample) and returns the guard, or
   * `null` when it is off: a floor of `0`, or `'auto'` on a host without the file (not Linux), which
   * emits the `TIDAL_MEMORY_GUARD_UNAVAILABLE` warning.
   *
   * @throws InvalidInputError when an explicit floor is given and the file cannot be read, or when
   *   the file exists but lacks MemTotal, MemAvailable or SwapFree: a guard that was asked for and
   *   cannot work refuses to open rather than run unguarded.
   */
  static create(
    options: FilledMemoryGuardOptions,
    warn: WarningSink,
    nowMs: () => number = () => performance.now(),
    field = 'memoryGuard',
  ): MemoryGuard | null {
    if (options.floorBytes === 0) return null;
    let text: string;
    try {
      text = readFileSync(options.meminfoPath, 'latin1');
    } catch (err) {
      if (options.floorBytes === 'auto' && (err as NodeJS.ErrnoException).code === 'ENOENT') {
        warn({
          code: 'TIDAL_MEMORY_GUARD_UNAVAILABLE',
          message: `memory guard off: ${options.meminfoPath} does not exist on this host, so there is no MemAvailable + SwapFree to watch`,
        });
        return null;
      }
      throw new InvalidInputError(`${field}.meminfoPath`, `a readable meminfo file (${(err as Error).message})`, options.meminfoPath);
    }
    const info = parseMeminfo(text);
    if (info === undefined) {
      throw new InvalidInputError(
        `${field}.meminfoPath`,
        'a meminfo file with MemTotal, MemAvailable and SwapFree lines in kB',
        options.meminfoPath,
      );
    }
    const floor = options.floorBytes === 'auto' ? autoFloorBytes(info.totalBytes) : options.floorBytes;
    return new MemoryGuard(floor, options.meminfoPath, info, nowMs, warn);
  }

  /** The floor in bytes. */
  get floorBytes(): number {
    return this.#floorBytes;
  }

  /** The last sample of MemAvailable + SwapFree, in bytes. */
  get availableBytes(): number {
    return this.#availableBytes;
  }

  /**
   * Throws {@link MemoryPressureError} if the host's available memory is under the floor, refreshing
   * the sample first if it is older than {@link MEMORY_SAMPLE_INTERVAL_MS}.
   */
  admit(): void {
    const now = this.#nowMs();
    if (now - this.#sampledAt >= MEMORY_SAMPLE_INTERVAL_MS) this.#refresh(now);
    if (this.#availableBytes < this.#floorBytes) throw new MemoryPressureError(this.#availableBytes, this.#floorBytes);
  }

  #refresh(now: number): void {
    // Stamped before reading, so a failing read is retried once per interval, not on every write.
    this.#sampledAt = now;
    let info: MemInfo | undefined;
    try {
      info = parseMeminfo(readFileSync(this.#path, 'latin1'));
    } catch {
      info = undefined;
    }
    if (info === undefined) {
      // Keep the last good sample: a transient read failure must not flip writes on or off.
      if (!this.#readFailed) {
        this.#readFailed = true;
        this.#warn({
          code: 'TIDAL_MEMORY_GUARD_STALE',
          message: `memory guard could not re-read ${this.#path}; it keeps its last sample until a read succeeds`,
        });
      }
      return;
    }
    this.#readFailed = false;
    this.#availableBytes = info.availableBytes;
  }
}

/** max(32 MiB, 2 % of MemTotal), in whole bytes. */
export function autoFloorBytes(totalBytes: number): number {
  return Math.max(AUTO_FLOOR_MIN_BYTES, Math.floor(totalBytes * AUTO_FLOOR_SHARE));
}
