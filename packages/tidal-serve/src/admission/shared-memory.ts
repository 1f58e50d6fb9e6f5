/**
 * The admission chain's state in shared memory, so that chains built in several threads of one
 * process over the same state decide as one server, each decision taken where the request is,
 * without a message to another thread.
 *
 * Layout: one `SharedArrayBuffer`, its offsets computed from the options alone, so every thread
 * that builds a chain from the same options finds the same cells:
 *
 * - header (Int32): magic, options fingerprint; then the clock origin (BigInt64);
 * - per stage, Int32 counter cells changed with `Atomics.add` / `compareExchange` (in flight,
 *   admitted, rejected, the adaptive limit and its window), and a drain meter (mean hold in µs);
 * - the tenant buckets and the period counters: open-addressed tables of `slots` entries plus one
 *   overflow entry, each entry an Int32 part (state, hash, fingerprint, spinlock, count) and a
 *   Float64 part (tokens, times) that is only read and written while the entry's spinlock is held.
 *   `Atomics` cannot operate on Float64, but the lock's acquire (compareExchange) and release
 *   (store) order the plain accesses between them, so the bucket runs the same arithmetic as the
 *   single-thread one, exactly.
 *
 * Times kept in Int32 cells (window starts, the first admission) are whole milliseconds since the
 * origin, which the first chain built over the state sets from its clock; differences are taken
 * modulo 2³², right for any span under 24.8 days.
 */
import { InvalidInputError } from 'tidal-core';
import type { AdmissionOptions } from './types.js';

/** What {@link createSharedAdmissionState} makes: structured-cloneable (one SAB and numbers), for `workerData`. */
export interface SharedAdmissionState {
  readonly buffer: SharedArrayBuffer;
  /** A hash of the options the state was made for: a chain built from other options refuses it. */
  readonly fingerprint: number;
}

const MAGIC = 0x7a1da1;
const UNSET_ORIGIN = -(2n ** 63n);
/** An Int32 time cell not yet written. */
export const UNSET_TIME = -0x80000000;

/** Cells of a drain meter: the mean hold in µs (−1 before a sample) and the first admission's time. */
export const DRAIN_CELLS = 2;
/** Int32 cells of a table entry: state (0 empty, 1 used), hash, fingerprint, spinlock, count. */
export const SLOT_INTS = 5;
export const SLOT = Object.freeze({ state: 0, hash: 1, fp: 2, lock: 3, count: 4 });
/** Float64 cells of a table entry. */
export const SLOT_FLOATS = 4;
/** Header cells of a table: its insert lock, then its counters. */
export const TABLE = Object.freeze({ lock: 0, size: 1, tiered: 2, overflowed: 3, inFlight: 4, admitted: 5, rejected: 6, overflowReady: 7 });
const TABLE_HEADER = 8;

/** Where each stage's cells are, in Int32 (and, for tables, Float64) indices of the buffer. */
export interface SharedLayout {
  readonly bytes: number;
  readonly origin: number; // BigInt64 index
  readonly inflight: number;
  readonly adaptive: number;
  readonly permits: number; // PERMIT_CELLS per route, in the options' order
  readonly tenants: TableLayout | null;
  readonly period: TableLayout | null;
}

export interface TableLayout {
  /** Int32 index of the header; the entries' Int32 parts follow it. */
  readonly header: number;
  readonly ints: number;
  /** Float64 index of the entries' Float64 parts. */
  readonly floats: number;
  /** Entries, a power of two; the overflow entry is at index `slots`. */
  readonly slots: number;
}

/** The in-flight stage's cells; its rate bound's ({@link RATE_CELLS}) follow the drain meter. */
export const INFLIGHT_CELLS = Object.freeze({ inFlight: 0, admitted: 1, rejected: 2, drain: 3, rate: 3 + DRAIN_CELLS });
/** The rate bound's cells (rate-bound.ts): its in-flight count and bound, its window, its rate. */
export const RATE_CELLS = Object.freeze({ inFlight: 0, limit: 1, windowStart: 2, completions: 3, rateMicro: 4, size: 5 });
export const ADAPTIVE_CELLS = Object.freeze({
  inFlight: 0,
  admitted: 1,
  rejected: 2,
  increases: 3,
  decreases: 4,
  epoch: 5,
  windowStart: 6,
  samples: 7,
  slow: 8,
  latencySum: 9,
  /** The limit × 1000, so cuts and rises compose in whole numbers. */
  limitMilli: 10,
  whole: 11,
  drain: 12,
});
export const PERMIT_CELLS = Object.freeze({ inFlight: 0, admitted: 1, rejected: 2, drain: 3, size: 3 + DRAIN_CELLS });
/** The largest cap a shared adaptive limit takes: its limit × 1000 is an Int32. */
export const SHARED_MAX_CAP = 2_000_000;

/** Entries for `keys` keys: at least twice as many, so a probe stays short. */
function tableSlots(keys: number): number {
  let n = 16;
  while (n < keys * 2) n *= 2;
  return n;
}

/** Computes the layout from the (checked) options. */
export function sharedLayout(options: AdmissionOptions): SharedLayout {
  let ints = 4; // magic, fingerprint, then the origin (BigInt64 at Int32 index 2)
  const inflight = ints;
  ints += 3 + DRAIN_CELLS + RATE_CELLS.size;
  const adaptive = ints;
  ints += 12 + DRAIN_CELLS;
  const permits = ints;
  ints += Object.keys(options.permits).length * PERMIT_CELLS.size;
  const tables: { ints: number; slots: number }[] = [];
  const table = (keys: number): { header: number; slots: number } => {
    const slots = tableSlots(keys);
    const header = ints;
    ints += TABLE_HEADER + (slots + 1) * SLOT_INTS;
    tables.push({ ints: header, slots });
    return { header, slots };
  };
  const t = options.tenants === false ? null : table(options.tenants.maxTenants + Object.keys(options.tenants.overrides ?? {}).length);
  const p = options.period === false ? null : table(options.period.maxKeys ?? 100_000);
  // Float64 parts after every Int32 cell, 8-byte aligned.
  let floatBytes = Math.ceil((ints * 4) / 8) * 8;
  const floats = (x: { header: number; slots: number } | null): TableLayout | null => {
    if (x === null) return null;
    const at = floatBytes / 8;
    floatBytes += (x.slots + 1) * SLOT_FLOATS * 8;
    return { header: x.header, ints: x.header + TABLE_HEADER, floats: at, slots: x.slots };
  };
  const tenants = floats(t);
  const period = floats(p);
  return { bytes: floatBytes, origin: 1, inflight, adaptive, permits, tenants, period };
}

/** FNV-1a over a string's UTF-16 units, 32 bits. */
function fnv(text: string, h: number): number {
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h;
}

function fingerprintOf(options: AdmissionOptions): number {
  return fnv(JSON.stringify(options), 0x811c9dc5) | 0;
}

/**
 * A key's two 32-bit hashes: the first picks its entry, the second tells it from another key with
 * the same first (a table entry keeps both, so two keys share an entry only if all 64 bits agree).
 * `route` is hashed before `key`, with a separator, so (`a`, `bc`) and (`ab`, `c`) differ.
 */
export function keyHashes(route: string, key: string, out: Int32Array): void {
  let h = 0x811c9dc5;
  let g = 0x2c1b3c6d;
  for (let i = 0; i < route.length; i++) {
    const u = route.charCodeAt(i);
    h = Math.imul(h ^ u, 0x01000193);
    g = Math.imul(g ^ u, 0x297a2d39);
  }
  h = Math.imul(h ^ 0xffff, 0x01000193);
  g = Math.imul(g ^ 0xffff, 0x297a2d39);
  for (let i = 0; i < key.length; i++) {
    const u = key.charCodeAt(i);
    h = Math.imul(h ^ u, 0x01000193);
    g = Math.imul(g ^ u, 0x297a2d39);
  }
  out[0] = h;
  // Mixed, so the fingerprint is not a near copy of the entry's hash.
  out[1] = Math.imul(g ^ (g >>> 15), 0x5bd1e995) ^ h;
}

/** Takes the spinlock at `i`. The section it guards is a few arithmetic operations. */
export function lock(cells: Int32Array, i: number): void {
  while (Atomics.compareExchange(cells, i, 0, 1) !== 0) {
    // Spin: the holder is a few instructions from its release.
  }
}

export function unlock(cells: Int32Array, i: number): void {
  Atomics.store(cells, i, 0);
}

/**
 * Makes the chain's shared state for `options`, once, on the thread that starts the others; pass
 * it to each (e.g. in `workerData`) and build every chain with `createAdmissionChain(options,
 * clock, { shared })` and the same options.
 *
 * @throws {@link InvalidInputError} for the options' own faults (as `createAdmissionChain`), and
 *   for a cap above {@link SHARED_MAX_CAP} with the adaptive limit on.
 */
export function makeSharedState(options: AdmissionOptions, check: (o: AdmissionOptions) => void): SharedAdmissionState {
  check(options);
  const layout = sharedLayout(options);
  const buffer = new SharedArrayBuffer(layout.bytes);
  const cells = new Int32Array(buffer);
  cells[0] = MAGIC;
  cells[1] = fingerprintOf(options);
  new BigInt64Array(buffer, 0, 2)[layout.origin] = UNSET_ORIGIN;
  const drain = (at: number): void => {
    cells[at] = -1;
    cells[at + 1] = UNSET_TIME;
  };
  drain(layout.inflight + INFLIGHT_CELLS.drain);
  if (options.rateBound !== undefined && options.rateBound !== false) {
    // The rate bound's cells (rate-bound.ts): the bound starts at the floor, no window, no rate yet.
    const at = layout.inflight + INFLIGHT_CELLS.rate;
    cells[at + RATE_CELLS.limit] = options.rateBound.floor;
    cells[at + RATE_CELLS.windowStart] = UNSET_TIME;
    cells[at + RATE_CELLS.rateMicro] = -1;
  }
  const a = options.adaptive;
  if (a !== false) {
    if (options.inFlightCap > SHARED_MAX_CAP)
      throw new InvalidInputError(
        'options.inFlightCap',
        `a whole number up to ${SHARED_MAX_CAP} for a shared adaptive limit`,
        options.inFlightCap,
      );
    const initial = a.initial ?? options.inFlightCap;
    cells[layout.adaptive + ADAPTIVE_CELLS.limitMilli] = initial * 1000;
    cells[layout.adaptive + ADAPTIVE_CELLS.whole] = initial;
  }
  drain(layout.adaptive + ADAPTIVE_CELLS.drain);
  const routes = Object.keys(options.permits).length;
  for (let r = 0; r < routes; r++) drain(layout.permits + r * PERMIT_CELLS.size + PERMIT_CELLS.drain);
  return Object.freeze({ buffer, fingerprint: cells[1] });
}

/** A thread's view of a shared state: its cells, its layout and the clock origin. */
export interface SharedView {
  readonly cells: Int32Array;
  readonly floats: Float64Array;
  readonly layout: SharedLayout;
  /** The origin of the Int32 times, in the clock's milliseconds. */
  readonly originMs: number;
}

/**
 * Opens `state` for a chain built from `options` on a thread whose clock is `clock`.
 * @throws {@link InvalidInputError} when the state is not one, or was made for other options.
 */
export function openSharedState(state: SharedAdmissionState, options: AdmissionOptions, clock: () => number): SharedView {
  if (typeof state !== 'object' || state === null || !(state.buffer instanceof SharedArrayBuffer)) {
    throw new InvalidInputError('shared', 'a state made by createSharedAdmissionState', state);
  }
  const cells = new Int32Array(state.buffer);
  if (cells[0] !== MAGIC) throw new InvalidInputError('shared', 'a state made by createSharedAdmissionState', state);
  if (cells[1] !== fingerprintOf(options) || state.fingerprint !== cells[1]) {
    throw new InvalidInputError(
      'shared',
      'a state made by createSharedAdmissionState from the same options as this chain',
      state.fingerprint,
    );
  }
  const layout = sharedLayout(options);
  const big = new BigInt64Array(state.buffer, 0, 2);
  Atomics.compareExchange(big, layout.origin, UNSET_ORIGIN, BigInt(Math.floor(clock())));
  const originMs = Number(Atomics.load(big, layout.origin));
  return { cells, floats: new Float64Array(state.buffer), layout, originMs };
}

/** `nowMs` as an Int32 time of `view` (whole milliseconds since its origin, modulo 2³²). */
export function relMs(view: SharedView, nowMs: number): number {
  return Math.floor(nowMs - view.originMs) | 0;
}

/** Weight of a new sample, as the single-thread meter: about the last 16 responses count. */
const ALPHA_SHIFT = 16;
const MAX_US = 0x7fffffff;

/** The shared twin of `DrainMeter`: the mean hold in whole µs, updated with compareExchange. */
export class SharedDrainMeter {
  readonly #view: SharedView;
  readonly #cells: Int32Array;
  readonly #at: number;

  constructor(view: SharedView, at: number) {
    this.#view = view;
    this.#cells = view.cells;
    this.#at = at;
  }

  admitted(nowMs: number): void {
    if (Atomics.load(this.#cells, this.#at + 1) === UNSET_TIME)
      Atomics.compareExchange(this.#cells, this.#at + 1, UNSET_TIME, relMs(this.#view, nowMs));
  }

  record(latencyMs: number): void {
    if (!(latencyMs >= 0)) return;
    const us = latencyMs * 1000 >= MAX_US ? MAX_US : Math.round(latencyMs * 1000);
    const c = this.#cells;
    for (;;) {
      const old = Atomics.load(c, this.#at);
      const next = old < 0 ? us : old + Math.trunc((us - old) / ALPHA_SHIFT);
      if (Atomics.compareExchange(c, this.#at, old, next) === old) return;
    }
  }

  get meanMs(): number | null {
    const m = Atomics.load(this.#cells, this.#at);
    return m < 0 ? null : m / 1000;
  }

  holdMs(nowMs: number): number {
    const m = Atomics.load(this.#cells, this.#at);
    if (m >= 0) return m / 1000;
    const first = Atomics.load(this.#cells, this.#at + 1);
    return first === UNSET_TIME ? 0 : (relMs(this.#view, nowMs) - first) | 0;
  }

  retryAfterMs(excess: number, inFlight: number, nowMs: number): number {
    return (excess * this.holdMs(nowMs)) / (inFlight > 1 ? inFlight : 1);
  }
}
