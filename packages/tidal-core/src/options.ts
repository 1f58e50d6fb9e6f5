import { availableParallelism } from 'node:os';
import { isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';
import { InvalidInputError, emitProcessWarning, type Thresholds, type WarningSink } from 'tidal-load';
import {
  assertDurability,
  resolveGroupCommitOptions,
  resolveMemoryGuardOptions,
  type Durability,
  type FilledMemoryGuardOptions,
  type GroupCommitOptions,
  type MemoryGuardOptions,
} from 'tidal-wal';
import { MAX_EVENT_MS, SHARE_MIN_ROWS, type QuerySchema } from 'tidal-query';
import type { MetricsRegistry } from './metrics.js';
import { checkPath } from './paths.js';
import { resolveSchema, type MigrateOptions, type SchemaDefinition } from './schema.js';
import { resolveMigrate } from './schema-store.js';
import type { IncompatibleSchemaChange } from 'tidal-load';
import { checkWhole, isPlainObject } from './validate.js';
import { resolveRateLimiterConfig, type RateLimit, type RateLimiterConfig, type ReplicationLink } from 'tidal-load';
import { resolveSessionOptions, type FilledSessionOptions, type SessionOptions } from './session-options.js';
import { resolveCursorOptions, type CursorOptions, type FilledCursorOptions } from './pinned-rankings.js';
import { resolveWorkSharing, type FilledWorkSharing, type WorkSharingOptions } from './sharing.js';
import { resolveLoad } from './load-options.js';

export interface CapacityOptions {
  /**
   * Distinct item ids (items and ids seen only in signals) the database can hold: the maximum the
   * signal index grows to (4 bytes × signal kinds per id, committed as ids get signal state).
   * @default 4_194_304
   */
  items?: number;
  /**
   * (item, signal kind) pairs with signal state: the maximum the signal state grows to, 1 KiB per
   * pair, committed as pairs get state. The reservation is address space only (not charged
   * against the host's overcommit limit, so it does not stop the process from forking); up to
   * 4 GiB (4_194_304 slots) it is growable, above that Node 20 needs a fixed buffer that is charged
   * in full.
   * @default 4_194_304
   */
  signalSlots?: number;
}

/** The options of `TidalDb.open`; `S`, the schema's type, is inferred from `schema` (see `TidalDb<S>`). */
export interface TidalOptions<S extends SchemaDefinition = SchemaDefinition> {
  /** Directory holding the database; created if missing. Exactly one of `path` and `ephemeral`. */
  path?: string;
  /** A database in a temporary directory, deleted on close. */
  ephemeral?: boolean;
  /**
   * What the database holds. Required at the first open of a directory, where it is stored; left
   * out, a later open uses the stored one. Given again, it is compared with the stored one
   * (see {@link TidalOptions.migrate}).
   */
  schema?: S;
  /**
   * The incompatible schema changes this open may apply (a removed signal kind, a changed
   * half-life...): without them such a change is refused with `SchemaChangeError`.
   */
  migrate?: MigrateOptions;
  /**
   * Query worker threads.
   * @default the number of cores (os.availableParallelism())
   */
  workers?: number;
  /**
   * The query worker threads' nice value, 0 to 19 (Linux): above 0 the thread that calls tidal
   * (its event loop, and the HTTP work of `tidal serve`) gets a core before the workers when the
   * machine is short of CPU, so answers, refusals and timers are not delayed by queries queued
   * behind them. The workers still take every core left idle. A platform where a thread cannot
   * change its own nice value runs them at the process's, with one `TIDAL_WORKER_NICE_UNSET`
   * warning. On one core, the workers get only what the caller leaves.
   * @default 0 (the process's own)
   */
  workerNice?: number;
  /**
   * The query worker threads' young generation (V8's new space), in MiB: a whole number from 1 to
   * 1024, or 0 for V8's own limit. A worker's young generation grows with its allocation rate and
   * is committed memory of its own (V8's own limit let it reach 32 MiB a worker after a warm); a
   * cap trades resident memory for more frequent minor collections (docs/BENCHMARKS.md, memory).
   * @default 16
   */
  workerYoungGenerationMb?: number;
  /**
   * The size, in KiB, from which glibc's malloc serves an allocation by mmap (and gives it back to
   * the kernel when freed), fixed for the process at the open: a whole number from 1 to 32 768, or 0
   * for glibc's own threshold, which rises with every large block freed (to 32 MiB) so that after a
   * warm the large buffers come from the arenas, where what is freed stays resident. Process-wide:
   * the last database opened sets it; `MALLOC_MMAP_THRESHOLD_` in the environment is left as it is.
   * No effect where glibc's `mallopt` cannot be called (see `stats().memory.nativeHeap`).
   * @default 1024
   */
  mmapThresholdKb?: number;
  /**
   * Items from which the query threads share one catalogue and text index: one thread reads the
   * items and writes both into shared memory, the others read that and keep only the rows changed
   * after it (docs/architecture.md, "The catalog image"). Below it, each thread keeps its own, as
   * a small database costs little either way. A whole number from 1; a number above the items
   * there will be turns the sharing off.
   * @default 4096
   */
  sharedCatalogMinItems?: number;
  /**
   * A module every query worker loads once it has warmed, to run code beside the executors, in
   * the worker's own thread (`tidal serve` loads its HTTP acceptor this way). The module exports
   * `start(db: ThreadDb, data): void | Promise<void>`: `db` runs reads in that thread and sends
   * writes to the database's thread; `data` is `workerModule.data`, structured-cloned
   * (SharedArrayBuffers in it are shared). `open()` resolves once every worker's `start` has;
   * one that throws fails the open. An optional `stop()` runs when the database closes. Such a
   * thread reads the wall clock (`Date.now`), whatever `clock` is.
   * @default none
   */
  workerModule?: WorkerModule;
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
  /**
   * Write batching and backpressure: `maxBatch` (events per transaction), `maxDelayMs` (how long a
   * partial batch waits), `maxQueueEvents` (queue depth at which writes get BackpressureError).
   * @default { maxBatch: 1024, maxDelayMs: 2, maxQueueEvents: 16_384 }
   */
  groupCommit?: GroupCommitOptions;
  capacity?: CapacityOptions;
  /**
   * After this many logged signal events, the signal slots changed since the last checkpoint are
   * written and the log up to that point is marked covered (its rows are then deleted a slice per
   * batch). Runs on the main thread: ~10 µs per changed 1 KiB slot.
   * @default 1_000_000
   */
  checkpointEveryEvents?: number;
  /**
   * Refuses writes with MemoryPressureError while the host's MemAvailable + SwapFree is under a
   * floor (reads are always served). `floorBytes`: `'auto'` = max(32 MiB, 2 % of MemTotal), `0` off.
   * @default { floorBytes: 'auto', meminfoPath: '/proc/meminfo' }
   */
  memoryGuard?: MemoryGuardOptions;
  /**
   * Receives warnings: conditions recovered from without failing a call (a cut-off WAL tail on open,
   * a memory guard that cannot run on this host).
   * @default process.emitWarning with type 'TidalWarning' and the warning's code
   */
  onWarning?: WarningSink;
  /**
   * In-flight query counts at which queries degrade to ReducedCandidates, CoarseAggregates and
   * NoDiversity: positive whole numbers, strictly increasing.
   * @default { reducedCandidates: 32, coarseAggregates: 64, noDiversity: 128 } (measured for 2 cores, see docs/overload.md)
   */
  loadThresholds?: Partial<Thresholds>;
  /**
   * Hard cap on queries in flight: past it a query is refused at once with OverloadedError. `0`
   * disables the cap; a number must be a whole number above `loadThresholds.noDiversity`.
   * @default 'auto' = noDiversity + 192 × workers (512 with the default thresholds and 2 workers)
   */
  admissionLimit?: number | 'auto';
  /**
   * `false` switches degradation and the admission cap off: every query runs at Full however many
   * are in flight. For comparisons; not for production.
   * @default true
   */
  loadManagement?: boolean;
  /** A prom-client registry to export tidal's metrics into. */
  metricsRegistry?: MetricsRegistry;
  /**
   * Token-bucket rate limit on session signals, per (agent, session); plain `signal()` is never
   * limited. Validated at `open()`.
   * @default RateLimiterConfig.unlimited()
   */
  rateLimiter?: RateLimiterConfig;
  /** Agent sessions: default TTL, sweeper interval, how many may be open, expiry callback. */
  sessions?: SessionOptions;
  /**
   * Identical queries share one execution; at CoarseAggregates and NoDiversity one may be answered
   * by a result at most `maxStalenessMs` old (see {@link WorkSharingOptions}).
   * @default { maxStalenessMs: { coarseAggregates: 250, noDiversity: 1000 }, maxEntries: 1024, maxBytes: 16 MiB }
   */
  workSharing?: WorkSharingOptions;
  /**
   * Cursor chains (`paginate: true`): how long and how much of their pinned rankings is kept, and
   * how deep a chain ranks (see {@link CursorOptions}).
   * @default { ttlMs: 600_000, depth: 200, maxRankings: 10_000, maxBytes: 64 MiB }
   */
  cursors?: CursorOptions;
  /** The ANN index's build (see {@link AnnOptions}). @default { backgroundRows: 20_000, closeWaitMs: 10_000 } */
  ann?: AnnOptions;
  /**
   * Replicates this database's writes to other replicas and theirs to it through a log
   * (tidal-fleet's `RedisStreamReplication`; see docs/scale-out.md#replication). The database
   * starts it once open and closes it before it closes.
   */
  replication?: ReplicationLink;
}

/** See {@link TidalOptions.ann}. */
export interface AnnOptions {
  /**
   * A warm that would add more rows than this to the ANN index (no usable snapshot, or more rows
   * written since it) leaves the build to a thread of its own and returns; vector searches are exact
   * until the index is ready (`TIDAL_ANN_BUILDING`, `stats().annBuild`, `warm({ waitForAnn })`).
   * A build of 100 000 rows took 32.7 s on two cores (bench:open), so the default waits a few seconds at most. `0`: always in the background;
   * `Infinity`: a warm always builds it before it returns.
   * @default 20_000
   */
  backgroundRows?: number;
  /**
   * How long `close()` waits for an ANN build running on its own thread to finish and save the
   * index. Past it the build saves what it has built (the rows added so far, as the snapshot) at the
   * end of the window of 8 192 rows it is adding, and the next open's build adds only the rest: no
   * build work is lost either way, the wait only spares the next open that rest. Ten seconds is a
   * build's last stretch (100 000 rows took 32.7 s on two cores) and keeps a close within the
   * 30 s a process manager commonly grants a stopping service, with the save after it. `0`: save at
   * once.
   * @default 10_000
   */
  closeWaitMs?: number;
}

/** What `db.warm()` takes. */
export interface WarmOptions {
  /**
   * Return only once every worker uses the ANN index, when it is being built on its own thread
   * (see {@link AnnOptions.backgroundRows}).
   * @default false
   */
  waitForAnn?: boolean;
}

/** See {@link TidalOptions.workerModule}. */
export interface WorkerModule {
  /** The module's URL (`file:` or an absolute path). */
  readonly url: string;
  /** Given to the module's `start`; structured-cloned into each worker. @default undefined */
  readonly data?: unknown;
}

export interface FilledOptions {
  dir: string | null;
  schema: QuerySchema;
  workers: number;
  workerNice: number;
  /** null: V8's own. */
  workerYoungGenerationMb: number | null;
  mmapThresholdKb: number;
  sharedCatalogMinItems: number;
  workerModule: { url: string; data: unknown } | null;
  clock: () => number;
  durability: Durability;
  groupCommit: Required<GroupCommitOptions>;
  capacity: Required<CapacityOptions>;
  checkpointEveryEvents: number;
  memoryGuard: FilledMemoryGuardOptions;
  onWarning: WarningSink;
  loadThresholds: Thresholds;
  admissionLimit: number;
  metricsRegistry: MetricsRegistry | null;
  /** `null`: unlimited. */
  rateLimit: RateLimit | null;
  sessions: FilledSessionOptions;
  /** `false`: no degradation by load or deadline, no admission cap. */
  loadManagement: boolean;
  workSharing: FilledWorkSharing;
  cursors: FilledCursorOptions;
  annBackgroundRows: number;
  /** See {@link AnnOptions.closeWaitMs}. */
  annCloseWaitMs: number;
  replication: ReplicationLink | null;
}

export const DEFAULTS = Object.freeze({
  // A 1 M-item corpus with every item active in 3 kinds takes 3 M slots (3 GiB) and 3 M index
  // entries (12 MiB); 2^22 slots is the largest growable reservation Node 20 allows (4 GiB), so
  // it fits with a third to spare, or 4 kinds exactly. 2^22 ids leave room for ids seen only in
  // signals. Reserving costs no memory and no overcommit (`npm run bench:store`): only the slots
  // in use are committed and resident.
  capacity: Object.freeze({ items: 4_194_304, signalSlots: 4_194_304 }),
  // A checkpoint writes the signal slots changed since the last one (~10 µs per 1 KiB slot on the
  // main thread, `npm run bench:write`); the log behind it is replayed on open. A million events
  // replay in ~2 s (measured, 2 cores), and at the measured ~250 k signals/s a checkpoint comes at
  // most every ~4 s, so its stall (bounded by the slots touched in between) is rare.
  checkpointEveryEvents: 1_000_000,
  maxWorkers: 64,
  // A query worker's young generation, MiB (0: V8's own, which reached 32 MiB committed a worker
  // after a warm at 100 000 items); docs/BENCHMARKS.md, memory, has what the cap costs (8: the
  // mix at NoDiversity 1.12–1.18× CPU per call, for 13 MiB a worker).
  workerYoungGenerationMb: 16,
  // A fixed mmap threshold: RSS after a warm at 100 000 items and 10 000 users, median of five,
  // 435 → 414 MiB (docs/BENCHMARKS.md, memory). At 128 KiB (glibc's initial one) the per-query buffers were mmapped
  // and unmapped on every query: 5–10 % more CPU per call; at 1 MiB none measurable, for reads or writes.
  mmapThresholdKb: 1024,
});

/** No option takes `null`: refused rather than read as "the default" by some options and not others. */
const NOT_NULL = 'a value (no option takes null; leave it out for the default)';

/** Every key of {@link TidalOptions}: any other key is refused, never ignored. */
const OPTION_KEYS: readonly (keyof TidalOptions)[] = [
  'path',
  'ephemeral',
  'schema',
  'migrate',
  'workers',
  'workerNice',
  'workerYoungGenerationMb',
  'mmapThresholdKb',
  'sharedCatalogMinItems',
  'workerModule',
  'clock',
  'durability',
  'groupCommit',
  'capacity',
  'checkpointEveryEvents',
  'memoryGuard',
  'onWarning',
  'loadThresholds',
  'admissionLimit',
  'loadManagement',
  'metricsRegistry',
  'rateLimiter',
  'sessions',
  'workSharing',
  'cursors',
  'ann',
  'replication',
];

/** The keys each object-valued option takes; a new key of one of them must be added here. */
const NESTED_KEYS = {
  groupCommit: ['maxBatch', 'maxDelayMs', 'maxQueueEvents'],
  capacity: ['items', 'signalSlots'],
  memoryGuard: ['floorBytes', 'meminfoPath'],
  loadThresholds: ['reducedCandidates', 'coarseAggregates', 'noDiversity'],
  sessions: ['defaultTtlMs', 'sweepIntervalMs', 'maxOpen', 'onExpired'],
  workSharing: ['maxStalenessMs', 'maxEntries', 'maxBytes'],
  cursors: ['ttlMs', 'depth', 'maxRankings', 'maxBytes'],
  ann: ['backgroundRows', 'closeWaitMs'],
} as const satisfies Partial<Record<keyof TidalOptions, readonly string[]>>;

/**
 * Refuses an object option that is not a plain object (`null`, a number, a string, an array, a class
 * instance) or that holds a key the option does not take (a misspelt key would otherwise be
 * silently ignored). `undefined` means "the default".
 */
export function checkOptionObject(field: string, value: unknown, keys: readonly string[]): void {
  if (value === undefined) return;
  if (!isPlainObject(value)) throw new InvalidInputError(field, `an object with ${keys.join(', ')}`, value);
  for (const k of Object.keys(value)) {
    if (!keys.includes(k)) throw new InvalidInputError(`${field}.${k}`, `absent: ${field} takes ${keys.join(', ')}`, value[k]);
    if (value[k] === null) throw new InvalidInputError(`${field}.${k}`, NOT_NULL, null);
  }
}

/**
 * The merge the builder's `.sessions()` does (it is called by `.sweepIntervalMs()` and
 * `.onSessionExpired()` too). A value that is not an object is kept as is, so `open()` refuses it
 * instead of a spread silently turning it into `{}`.
 */
export function mergeSessionOptions(prev: SessionOptions | undefined, next: SessionOptions): SessionOptions {
  if (prev !== undefined && !isPlainObject(prev)) return prev;
  if (!isPlainObject(next)) return next;
  return { ...prev, ...next };
}

/**
 * Calls the clock once, at open: a clock that throws or returns anything but a timestamp in the
 * range signals can hold would otherwise stamp every write that has no `at` with it.
 */
function checkClock(clock: unknown): () => number {
  if (clock === undefined) return Date.now;
  if (typeof clock !== 'function') throw new InvalidInputError('clock', 'a function returning milliseconds', clock);
  let now: unknown;
  try {
    now = (clock as () => unknown)();
  } catch (err) {
    throw new InvalidInputError('clock', `a function returning milliseconds (it threw: ${(err as Error)?.message ?? String(err)})`, clock);
  }
  if (typeof now !== 'number' || !(now >= 0 && now < MAX_EVENT_MS)) {
    throw new InvalidInputError(
      'clock',
      `a function returning a timestamp in milliseconds from 0 to below ${MAX_EVENT_MS} (it is called once at open)`,
      now,
    );
  }
  return clock as () => number;
}

/**
 * The options before the open decides the schema from the stored one and the given one (`schema`,
 * null when left out; see schema-store.ts) and checks `capacity` against it ({@link checkKindCapacity}).
 */
export interface ResolvedOptions extends Omit<FilledOptions, 'schema'> {
  schema: QuerySchema | null;
  migrate: ReadonlySet<IncompatibleSchemaChange>;
}

/** Refuses more (item, kind) index entries than 2^30: `capacity.items` × the schema's kinds. */
export function checkKindCapacity(items: number, kinds: number): void {
  if (items * kinds > 2 ** 30) {
    throw new InvalidInputError('capacity.items', `at most ${Math.floor(2 ** 30 / kinds)} with ${kinds} signal kinds`, items);
  }
}

/** The one resolve step: after it, internal code sees only filled-in, valid values. */
export function resolveOptions(options: TidalOptions): ResolvedOptions {
  const given: unknown = options;
  if (!isPlainObject(given)) throw new InvalidInputError('options', 'an object of database options', given);
  for (const k of Object.keys(given)) {
    if (!(OPTION_KEYS as readonly string[]).includes(k)) {
      throw new InvalidInputError(k, `one of the options ${OPTION_KEYS.join(', ')}`, given[k]);
    }
    if (given[k] === null) throw new InvalidInputError(k, NOT_NULL, null);
  }
  const o = options;
  for (const [key, keys] of Object.entries(NESTED_KEYS)) checkOptionObject(key, given[key], keys);
  if (o.ephemeral !== undefined && typeof o.ephemeral !== 'boolean') throw new InvalidInputError('ephemeral', 'a boolean', o.ephemeral);
  const hasPath = o.path !== undefined;
  if (hasPath === Boolean(o.ephemeral)) {
    throw new InvalidInputError('builder', 'given exactly one of .path(dir) and .ephemeral()', hasPath ? 'both' : 'neither');
  }
  if (hasPath) checkPath(o.path);
  const schema = o.schema === undefined ? null : resolveSchema(o.schema);
  const migrate = resolveMigrate(o.migrate);
  const workers = o.workers === undefined ? Math.max(1, availableParallelism()) : checkWhole('workers', o.workers, 1, DEFAULTS.maxWorkers);
  const workerNice = o.workerNice === undefined ? 0 : checkWhole('workerNice', o.workerNice, 0, 19);
  const youngMb = checkWhole('workerYoungGenerationMb', o.workerYoungGenerationMb ?? DEFAULTS.workerYoungGenerationMb, 0, 1024);
  const workerYoungGenerationMb = youngMb === 0 ? null : youngMb;
  const mmapThresholdKb = checkWhole('mmapThresholdKb', o.mmapThresholdKb ?? DEFAULTS.mmapThresholdKb, 0, 32_768);
  const sharedCatalogMinItems =
    o.sharedCatalogMinItems === undefined ? SHARE_MIN_ROWS : checkWhole('sharedCatalogMinItems', o.sharedCatalogMinItems, 1, 2 ** 31 - 1);
  const clock = checkClock(o.clock);
  const workerModule = resolveWorkerModule(o.workerModule);
  const durability = o.durability === undefined ? (hasPath ? 'process' : 'none') : assertDurability(o.durability, 'durability');
  const capacity = {
    items: checkWhole('capacity.items', o.capacity?.items ?? DEFAULTS.capacity.items, 1, 2 ** 28),
    signalSlots: checkWhole('capacity.signalSlots', o.capacity?.signalSlots ?? DEFAULTS.capacity.signalSlots, 1, 2 ** 24),
  };
  if (schema !== null) checkKindCapacity(capacity.items, schema.kinds.length);
  const load = resolveLoad(o, workers);
  return {
    ...load,
    dir: hasPath ? o.path! : null,
    schema,
    migrate,
    workers,
    workerNice,
    workerYoungGenerationMb,
    mmapThresholdKb,
    sharedCatalogMinItems,
    workerModule,
    clock,
    durability,
    groupCommit: resolveGroupCommitOptions(o.groupCommit, 'groupCommit'),
    capacity,
    checkpointEveryEvents: checkWhole('checkpointEveryEvents', o.checkpointEveryEvents ?? DEFAULTS.checkpointEveryEvents, 1, 2 ** 40),
    memoryGuard: resolveMemoryGuardOptions(o.memoryGuard, 'memoryGuard'),
    onWarning: resolveWarningSink(o.onWarning),
    rateLimit: resolveRateLimiterConfig(o.rateLimiter, 'rateLimiter'),
    sessions: resolveSessionOptions(o.sessions),
    workSharing: resolveWorkSharing(o.workSharing),
    cursors: resolveCursorOptions(o.cursors),
    annBackgroundRows: checkBackgroundRows(o.ann?.backgroundRows),
    annCloseWaitMs: checkWhole('ann.closeWaitMs', o.ann?.closeWaitMs ?? DEFAULT_ANN_CLOSE_WAIT_MS, 0, 2_147_483_647),
    replication: checkReplication(o.replication),
  };
}

function checkBackgroundRows(rows: unknown): number {
  if (rows === undefined) return DEFAULT_ANN_BACKGROUND_ROWS;
  if (rows === Number.POSITIVE_INFINITY || (typeof rows === 'number' && Number.isSafeInteger(rows) && rows >= 0)) return rows;
  throw new InvalidInputError('ann.backgroundRows', 'a whole number ≥ 0, or Infinity', rows);
}

/** See {@link AnnOptions.backgroundRows}. */
export const DEFAULT_ANN_BACKGROUND_ROWS = 20_000;

/** See {@link AnnOptions.closeWaitMs}. */
export const DEFAULT_ANN_CLOSE_WAIT_MS = 10_000;

function checkReplication(link: unknown): ReplicationLink | null {
  if (link === undefined) return null;
  const l = (typeof link === 'object' && link !== null ? link : {}) as Record<string, unknown>;
  if (typeof l.start !== 'function' || typeof l.close !== 'function' || typeof l.stats !== 'function') {
    throw new InvalidInputError('replication', 'a replication link with start, stats and close (e.g. RedisStreamReplication)', link);
  }
  return link as ReplicationLink;
}

function resolveWorkerModule(m: unknown): FilledOptions['workerModule'] {
  if (m === undefined) return null;
  if (typeof m !== 'object' || m === null || Array.isArray(m)) throw new InvalidInputError('workerModule', 'an object { url, data? }', m);
  const { url, data } = m as { url?: unknown; data?: unknown };
  for (const k of Object.keys(m)) {
    if (k !== 'url' && k !== 'data')
      throw new InvalidInputError(`workerModule.${k}`, 'absent: workerModule takes url and data', (m as Record<string, unknown>)[k]);
  }
  if (typeof url !== 'string' || url.length === 0)
    throw new InvalidInputError('workerModule.url', "a module's file: URL or absolute path", url);
  let href: string;
  if (url.startsWith('file:')) href = url;
  else if (isAbsolute(url)) href = pathToFileURL(url).href;
  else
    throw new InvalidInputError(
      'workerModule.url',
      "a module's file: URL or absolute path (a relative path would be read from the worker's directory)",
      url,
    );
  try {
    structuredClone(data);
  } catch (err) {
    throw new InvalidInputError('workerModule.data', `a value the structured clone can copy (${(err as Error).message})`, data);
  }
  return { url: href, data };
}

function resolveWarningSink(sink: unknown): WarningSink {
  if (sink === undefined) return emitProcessWarning;
  if (typeof sink !== 'function') throw new InvalidInputError('onWarning', 'a function taking a warning', sink);
  return sink as WarningSink;
}
