import { InvalidInputError } from 'tidal-load';
import type { OrderArena } from './order.js';

/*
 * The signal store's vocabulary: the kinds it is created for, the windows it counts, what one read
 * returns, and the shared memory it lives in.
 */

/** A counting window a signal kind can declare. `'all'` is the all-time count. */
export type WindowName = '1h' | '24h' | '7d' | 'all';

/** A window velocity can be computed over (events per second). */
export type VelocityWindow = Exclude<WindowName, 'all'>;

/** What the store needs to know about one signal kind of the schema. */
export interface SignalKindSpec {
  /** The kind's name in the schema. */
  name: string;
  /** Half-life of the decayed score, in milliseconds (`Infinity` disables decay). */
  halfLifeMs: number;
  /** Windows the schema declares for this kind; `read` reports exactly these. */
  windows: readonly WindowName[];
  /** Whether the schema asks for velocities over the declared windows. */
  velocity: boolean;
}

/** One consistent reading of a slot, as returned by {@link SignalStore.read}. */
export interface SignalValues {
  /** Decayed score at the reading time. */
  score: number;
  /** All-time event count. */
  count: number;
  /** Event counts for the requested windows. */
  windows: Partial<Record<WindowName, number>>;
  /** Events per second over the requested windows; present only when velocity was asked for. */
  velocity?: Partial<Record<VelocityWindow, number>>;
}

/**
 * The shared memory behind a store: plain SharedArrayBuffers and numbers, so it can be posted to a
 * worker (structured clone shares the buffers, it does not copy them) and passed to
 * {@link SignalStore.attach}. `index` and `slots` are growable buffers reserved up to
 * `maxOrdinals * kinds * 4` and `maxSlots * SLOT_BYTES` bytes (or fixed buffers of exactly that
 * size where the platform cannot reserve that much growable memory); growth is visible to every
 * thread holding the arena, because it is the same memory.
 */
export interface SignalArena {
  readonly control: SharedArrayBuffer;
  readonly index: SharedArrayBuffer;
  readonly slots: SharedArrayBuffer;
  /** Number of signal kinds; the `index` row width. */
  readonly kinds: number;
  readonly maxOrdinals: number;
  readonly maxSlots: number;
  /**
   * The slot orders (by decay key and by newest event) that let `popular` and `trending` skip the
   * scan; see `order.ts`. Derived from the slots, never checkpointed.
   */
  readonly order: OrderArena;
}

/** Options of {@link SignalStore.create}. */
export interface SignalStoreOptions {
  /** The schema's signal kinds; a kind's index in this array is its `kind` number. */
  kinds: readonly SignalKindSpec[];
  /** Ordinals are `0..maxOrdinals-1`. */
  maxOrdinals: number;
  /** Maximum number of (ordinal, kind) pairs with state: the reservation the slots grow into. */
  maxSlots: number;
  /**
   * `'grow'` reserves address space for the maximum and commits memory as slots are taken;
   * `'fixed'` allocates the maximum up front, which counts in full against the host's overcommit
   * limit (kept to compare the two).
   * @default 'grow'
   */
  reservation?: 'grow' | 'fixed';
}

/** The decay rate λ = ln 2 / half-life of each kind, per millisecond, after checking the specs. */
export function checkKinds(kinds: readonly SignalKindSpec[]): Float64Array {
  // Checked through an `unknown` so that `kinds` keeps its element type (Array.isArray narrows to any[]).
  const list: unknown = kinds;
  if (!Array.isArray(list)) throw new InvalidInputError('kinds', 'an array of signal kind specs', kinds);
  const lambdas = new Float64Array(kinds.length);
  for (let k = 0; k < kinds.length; k++) {
    const spec = kinds[k];
    const halfLife = spec?.halfLifeMs;
    if (typeof halfLife !== 'number' || !(halfLife > 0)) {
      throw new InvalidInputError(`kinds[${k}].halfLifeMs`, 'a positive number of milliseconds', halfLife);
    }
    lambdas[k] = Math.LN2 / halfLife;
  }
  return lambdas;
}

export function checkCount(field: string, value: number): void {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new InvalidInputError(field, 'a positive integer', value);
  }
}
