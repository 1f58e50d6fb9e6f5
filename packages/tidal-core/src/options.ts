import { availableParallelism } from 'node:os';
import type { Registry } from 'prom-client';
import { InvalidInputError, resolveThresholds, type Thresholds } from 'tidal-load';
import { assertDurability, resolveGroupCommitOptions, type Durability, type GroupCommitOptions } from 'tidal-wal';
import type { QuerySchema } from 'tidal-query';
import { resolveSchema, type SchemaDefinition } from './schema.js';

export interface CapacityOptions {
  /**
   * Distinct item ids (items and ids seen only in signals) the database can hold. Preallocated as
   * virtual memory only: 4 bytes × signal kinds per id, resident only once touched.
   * @default 4_194_304
   */
  items?: number;
  /**
   * (item, signal kind) pairs with signal state. 1 KiB each of virtual memory, resident only when used.
   * @default 2_097_152
   */
  signalSlots?: number;
}

export interface TidalOptions {
  /** Directory holding the database; created if missing. Exactly one of `path` and `ephemeral`. */
  path?: string;
  /** A database in a temporary directory, deleted on close. */
  ephemeral?: boolean;
  schema: SchemaDefinition;
  /**
   * Query worker threads.
   * @default the number of cores (os.availableParallelism())
   */
  workers?: number;
  /**
   * Milliseconds since the epoch; injected by tests to control time.
   * @default Date.now
   */
  clock?: () => number;
  /**
   * What an acknowledged write survives: `'process'` (kill -9) or `'power'` (power loss, fsync per batch).
   * @default 'process' ('none' for ephemeral databases)
   */
  durability?: Durability;
  groupCommit?: GroupCommitOptions;
  capacity?: CapacityOptions;
  /**
   * After this many logged signal events, the signal state is checkpointed and the log truncated.
   * @default 1_000_000
   */
  checkpointEveryEvents?: number;
  /**
   * In-flight query counts at which queries degrade to ReducedCandidates, CoarseAggregates and
   * NoDiversity: positive whole numbers, strictly increasing.
   * @default { reducedCandidates: 32, coarseAggregates: 64, noDiversity: 128 } (measured for 2 cores, see docs/overload.md)
   */
  loadThresholds?: Partial<Thresholds>;
  /**
   * Hard cap on queries in flight: past it a query is refused at once with OverloadedError. `0`
   * disables the cap; a number must be a whole number above `loadThresholds.noDiversity`.
   * @default 'auto' = max(2 × noDiversity, 500 × workers)
   */
  admissionLimit?: number | 'auto';
  /**
   * `false` switches degradation and the admission cap off: every query runs at Full however many
   * are in flight. For comparisons; not for production.
   * @default true
   */
  loadManagement?: boolean;
  /** A prom-client registry to export tidal's metrics into. */
  metricsRegistry?: Registry;
}

export interface FilledOptions {
  dir: string | null;
  schema: QuerySchema;
  workers: number;
  clock: () => number;
  durability: Durability;
  groupCommit: Required<GroupCommitOptions>;
  capacity: Required<CapacityOptions>;
  checkpointEveryEvents: number;
  loadThresholds: Thresholds;
  admissionLimit: number;
  metricsRegistry: Registry | null;
}

export const DEFAULTS = Object.freeze({
  capacity: Object.freeze({ items: 4_194_304, signalSlots: 2_097_152 }),
  // A checkpoint copies the used signal slots (1 KiB each); at a million events the log replay on
  // open (~1 s) and the checkpoint (tens of ms) stay small.
  checkpointEveryEvents: 1_000_000,
  maxWorkers: 64,
});

function wholeInRange(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidInputError(field, `a whole number from ${min} to ${max}`, value);
  }
  return value;
}

/** The one resolve step: after it, internal code sees only filled-in, valid values. */
export function resolveOptions(o: TidalOptions): FilledOptions {
  const hasPath = o.path !== undefined;
  if (hasPath === Boolean(o.ephemeral)) {
    throw new InvalidInputError('builder', 'given exactly one of .path(dir) and .ephemeral()', hasPath ? 'both' : 'neither');
  }
  if (hasPath && (typeof o.path !== 'string' || o.path.length === 0)) {
    throw new InvalidInputError('path', 'a non-empty directory path', o.path);
  }
  if (o.schema === undefined) throw new InvalidInputError('schema', 'given with .schema({...}) before open()', o.schema);
  const schema = resolveSchema(o.schema);
  const workers = o.workers === undefined ? Math.max(1, availableParallelism()) : wholeInRange('workers', o.workers, 1, DEFAULTS.maxWorkers);
  if (o.clock !== undefined && typeof o.clock !== 'function') throw new InvalidInputError('clock', 'a function returning milliseconds', o.clock);
  const durability = o.durability === undefined ? (hasPath ? 'process' : 'none') : assertDurability(o.durability, 'durability');
  const capacity = {
    items: wholeInRange('capacity.items', o.capacity?.items ?? DEFAULTS.capacity.items, 1, 2 ** 28),
    signalSlots: wholeInRange('capacity.signalSlots', o.capacity?.signalSlots ?? DEFAULTS.capacity.signalSlots, 1, 2 ** 24),
  };
  if (capacity.items * schema.kinds.length > 2 ** 30) {
    throw new InvalidInputError('capacity.items', `at most ${Math.floor(2 ** 30 / schema.kinds.length)} with ${schema.kinds.length} signal kinds`, capacity.items);
  }
  const load = resolveLoad(o, workers);
  return {
    ...load,
    dir: hasPath ? o.path! : null,
    schema,
    workers,
    clock: o.clock ?? Date.now,
    durability,
    groupCommit: resolveGroupCommitOptions(o.groupCommit),
    capacity,
    checkpointEveryEvents: wholeInRange('checkpointEveryEvents', o.checkpointEveryEvents ?? DEFAULTS.checkpointEveryEvents, 1, 2 ** 40),
  };
}

/** Thresholds that no in-flight count reaches: every query runs at Full. */
const NEVER: Thresholds = Object.freeze({ reducedCandidates: 2 ** 30 - 2, coarseAggregates: 2 ** 30 - 1, noDiversity: 2 ** 30 });

/**
 * The admission cap's default. Past the last threshold every query runs at the cheapest level; the
 * cap bounds the queue of those: at ≈ 0.5 ms of worker time each (measured, docs/overload.md),
 * 500 × workers queries in flight are ≈ 250 ms of queue, half the 500 ms p99 budget for admitted
 * queries at 10× overload. It stays at least twice the last threshold so the cheapest level has room.
 */
export function autoAdmissionLimit(thresholds: Thresholds, workers: number): number {
  return Math.max(2 * thresholds.noDiversity, 500 * workers);
}

function resolveLoad(o: TidalOptions, workers: number): Pick<FilledOptions, 'loadThresholds' | 'admissionLimit' | 'metricsRegistry'> {
  const enabled = o.loadManagement ?? true;
  if (typeof enabled !== 'boolean') throw new InvalidInputError('loadManagement', 'a boolean', enabled);
  const thresholds = resolveThresholds(o.loadThresholds);
  const raw = o.admissionLimit ?? 'auto';
  let admissionLimit: number;
  if (raw === 'auto') admissionLimit = autoAdmissionLimit(thresholds, workers);
  else if (typeof raw !== 'number' || !Number.isInteger(raw) || raw < 0 || raw > 2 ** 30) {
    throw new InvalidInputError('admissionLimit', "'auto', 0 (disabled) or a whole number above loadThresholds.noDiversity", raw);
  } else if (raw !== 0 && raw <= thresholds.noDiversity) {
    throw new InvalidInputError('admissionLimit', `above loadThresholds.noDiversity (${thresholds.noDiversity}), or 0 to disable it`, raw);
  } else admissionLimit = raw;
  const registry = o.metricsRegistry ?? null;
  if (registry !== null && (typeof registry !== 'object' || typeof (registry as Registry).registerMetric !== 'function')) {
    throw new InvalidInputError('metricsRegistry', 'a prom-client Registry', registry);
  }
  return enabled
    ? { loadThresholds: thresholds, admissionLimit, metricsRegistry: registry }
    : { loadThresholds: NEVER, admissionLimit: 0, metricsRegistry: registry };
}
