import { availableParallelism } from 'node:os';
import { InvalidInputError } from 'tidal-load';
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
  return {
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
