import { DegradationLevel, levelName, type DegradationLevelName } from 'tidal-core';
import type { Clock, ServeSample } from './admission/types.js';

/** Settings of a {@link Recorder}; every field but the two sources is optional. */
export interface RecorderOptions {
  /** Requests in flight now (the server's count). */
  readonly inFlight: () => number;
  /** tidal's current degradation level name. */
  readonly level: () => string;
  /** @default Date.now */
  readonly clock?: Clock;
  /** Seconds of history kept. @default 300 */
  readonly historySeconds?: number;
  /** Seconds the latency percentiles are taken over. @default 60 */
  readonly windowSeconds?: number;
  /** Each acceptor thread's requests in flight now, by acceptor index (several acceptors only). */
  readonly acceptorsInFlight?: () => ReadonlyMap<number, number>;
}

// Latency histogram: bins 5 % wide from 10 µs up, so a percentile is within 2.5 % of the truth
// (the bin's geometric middle) and 332 bins reach 10 µs × 1.05^332 ≈ 110 s. A second's bins are
// 1.3 KiB; five minutes of them 400 KiB.
const BIN_BASE_MS = 0.01;
const BIN_GROWTH = 1.05;
const BINS = 332;
const LOG_GROWTH = Math.log(BIN_GROWTH);

// A level's name (as an answer carries it) to its number, the index of its count in a second.
// (DegradationLevel also maps each number back to its name, as an enum does: those entries are left out.)
const LEVEL_OF: ReadonlyMap<string, number> = new Map(
  Object.entries(DegradationLevel).filter((e): e is [string, DegradationLevel] => typeof e[1] === 'number'),
);
const LEVELS = LEVEL_OF.size;

function binOf(latencyMs: number): number {
  if (!(latencyMs > BIN_BASE_MS)) return 0;
  return Math.min(BINS - 1, Math.floor(Math.log(latencyMs / BIN_BASE_MS) / LOG_GROWTH));
}

function binValue(bin: number): number {
  return BIN_BASE_MS * BIN_GROWTH ** (bin + 0.5);
}

interface Second {
  /** Which second (clock / 1000, floored) the slot holds; -1 when unused. */
  sec: number;
  offered: number;
  good: number;
  /** 2xx query answers by the degradation level they ran at, indexed by the level's number. */
  levels: Uint32Array;
  refused: Map<string, number>;
  latency: Uint32Array;
  latencyCount: number;
  /** By acceptor index: offered, good, refused (answers another thread reported). */
  byAcceptor: Map<number, [number, number, number]>;
}

/**
 * Per-second counts of what the server answered, over the last few minutes: offered, goodput,
 * query answers by degradation level, refusals by reason, and a latency histogram. `record` is O(1) and allocates nothing on the common
 * path; `sample` reads the last complete second for the rates and the last `windowSeconds` for the
 * percentiles.
 */
export class Recorder {
  readonly #clock: Clock;
  readonly #seconds: Second[];
  readonly #window: number;
  readonly #inFlight: () => number;
  readonly #level: () => string;
  readonly #acceptorsInFlight: (() => ReadonlyMap<number, number>) | undefined;

  constructor(options: RecorderOptions) {
    this.#clock = options.clock ?? Date.now;
    const history = options.historySeconds ?? 300;
    this.#window = options.windowSeconds ?? 60;
    if (!Number.isInteger(history) || history < 2)
      throw new RangeError(`historySeconds must be a whole number of at least 2, got ${history}`);
    if (!Number.isInteger(this.#window) || this.#window < 1 || this.#window > history) {
      throw new RangeError(`windowSeconds must be a whole number from 1 to historySeconds (${history}), got ${this.#window}`);
    }
    this.#seconds = Array.from({ length: history }, () => ({
      sec: -1,
      offered: 0,
      good: 0,
      levels: new Uint32Array(LEVELS),
      refused: new Map<string, number>(),
      latency: new Uint32Array(BINS),
      latencyCount: 0,
      byAcceptor: new Map(),
    }));
    this.#acceptorsInFlight = options.acceptorsInFlight;
    this.#inFlight = options.inFlight;
    this.#level = options.level;
  }

  #slot(sec: number): Second {
    const slot = this.#seconds[sec % this.#seconds.length]!;
    if (slot.sec !== sec) {
      slot.sec = sec;
      slot.offered = 0;
      slot.good = 0;
      slot.levels.fill(0);
      slot.refused.clear();
      slot.latency.fill(0);
      slot.latencyCount = 0;
      slot.byAcceptor.clear();
    }
    return slot;
  }

  /**
   * Counts one answered request. A 429 or 503 is a refusal, counted under `code` (the chain's
   * reason or tidal's error code); its latency is left out of the percentiles, which describe the
   * requests that were served. `level` is the degradation level a query answer says it ran at
   * (`Full`, `ReducedCandidates`, ...); a 2xx answer with a level is counted under it.
   */
  record(_route: string, status: number, code: string | undefined, latencyMs: number, level?: string, acceptor?: number): void {
    const slot = this.#slot(Math.floor(this.#clock() / 1000));
    slot.offered++;
    if (acceptor !== undefined) {
      let a = slot.byAcceptor.get(acceptor);
      if (a === undefined) slot.byAcceptor.set(acceptor, (a = [0, 0, 0]));
      a[0]++;
      if (status >= 200 && status < 300) a[1]++;
      else if (status === 429 || status === 503) a[2]++;
    }
    if (status >= 200 && status < 300) {
      slot.good++;
      if (level !== undefined) {
        const i = LEVEL_OF.get(level);
        if (i !== undefined) slot.levels[i]!++;
      }
    }
    if (status === 429 || status === 503) {
      const key = code ?? String(status);
      slot.refused.set(key, (slot.refused.get(key) ?? 0) + 1);
      return;
    }
    slot.latency[binOf(latencyMs)]!++;
    slot.latencyCount++;
  }

  /** The per-acceptor part of a sample: present once acceptor threads report. */
  #acceptors(last: Second | undefined): Pick<ServeSample, 'acceptors'> {
    const inFlight = this.#acceptorsInFlight?.();
    if (inFlight === undefined || inFlight.size === 0) return {};
    return { acceptors: acceptorList(last, inFlight) };
  }

  /** The last complete second's rates and the last `windowSeconds`' percentiles. */
  sample(): ServeSample {
    const t = this.#clock();
    const now = Math.floor(t / 1000);
    const last = this.#seconds[(now - 1) % this.#seconds.length]!;
    const current = last.sec === now - 1;
    const merged = new Uint32Array(BINS);
    let count = 0;
    for (let s = now - this.#window + 1; s <= now; s++) {
      if (s < 0) continue;
      const slot = this.#seconds[s % this.#seconds.length]!;
      if (slot.sec !== s || slot.latencyCount === 0) continue;
      for (let b = 0; b < BINS; b++) merged[b]! += slot.latency[b]!;
      count += slot.latencyCount;
    }
    return {
      t,
      inFlight: this.#inFlight(),
      level: this.#level(),
      offeredPerSec: current ? last.offered : 0,
      goodputPerSec: current ? last.good : 0,
      refusedPerSec: current ? Object.fromEntries(last.refused) : {},
      levelsPerSec: levelCounts(current ? last.levels : undefined),
      ...this.#acceptors(current ? last : undefined),
      p50Ms: percentile(merged, count, 0.5),
      p99Ms: percentile(merged, count, 0.99),
      windowSeconds: this.#window,
    };
  }
}

function acceptorList(last: Second | undefined, inFlight: ReadonlyMap<number, number>): NonNullable<ServeSample['acceptors']> {
  const ids = new Set<number>(inFlight.keys());
  if (last) for (const id of last.byAcceptor.keys()) ids.add(id);
  return [...ids]
    .sort((a, b) => a - b)
    .map((id) => {
      const c = last?.byAcceptor.get(id);
      return { id, offeredPerSec: c?.[0] ?? 0, goodputPerSec: c?.[1] ?? 0, refusedPerSec: c?.[2] ?? 0, inFlight: inFlight.get(id) ?? 0 };
    });
}

function levelCounts(levels: Uint32Array | undefined): Record<DegradationLevelName, number> {
  const out = {} as Record<DegradationLevelName, number>;
  for (let i = 0; i < LEVELS; i++) out[levelName(i as DegradationLevel)] = levels?.[i] ?? 0;
  return out;
}

function percentile(bins: Uint32Array, count: number, p: number): number {
  if (count === 0) return 0;
  const rank = Math.ceil(p * count);
  let seen = 0;
  for (let b = 0; b < BINS; b++) {
    seen += bins[b]!;
    if (seen >= rank) return Math.round(binValue(b) * 1000) / 1000;
  }
  return binValue(BINS - 1);
}
