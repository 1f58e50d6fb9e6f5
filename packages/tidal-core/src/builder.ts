import type { RateLimiterConfig, ReplicationLink } from 'tidal-load';
import { TidalDb } from './db.js';
import { attachEmbedder, checkEmbedder, type TextEmbedder } from './embedding.js';
import { mergeSessionOptions, type AnnOptions, type TidalOptions } from './options.js';
import type { SchemaDefinition } from './schema.js';
import type { SessionOptions } from './session-options.js';
import type { WorkSharingOptions } from './sharing.js';
import type { CursorOptions } from './pinned-rankings.js';

/**
 * Fluent configuration; every setter validates in {@link TidalDbBuilder.open}. `S` is the schema's
 * type, inferred by {@link TidalDbBuilder.schema} from the object it is given: the database it opens
 * is a `TidalDb<S>`, whose signal kinds, metadata fields and filter keys are checked at compile time.
 */
export class TidalDbBuilder<S extends SchemaDefinition = SchemaDefinition> {
  readonly #o: TidalOptions = {};
  #embedder: unknown;

  /** Keep the database in this directory. */
  path(dir: string): this {
    this.#o.path = dir;
    return this;
  }

  /** A throwaway database in a temporary directory, deleted on close. */
  ephemeral(): this {
    this.#o.ephemeral = true;
    return this;
  }

  /**
   * What the database holds. Required at the first open of a directory (it is stored there);
   * left out later, the stored schema is used; given, it is compared with the stored one: additions
   * are applied with a `TIDAL_SCHEMA_CHANGED` warning, other changes need {@link migrate}.
   */
  schema<const T extends SchemaDefinition>(schema: T): TidalDbBuilder<T> {
    this.#o.schema = schema;
    // The same builder, its type now naming the schema.
    return this as unknown as TidalDbBuilder<T>;
  }

  /**
   * Consents to incompatible schema changes on this open, by kind: `{ allow: ['half-life-changed'] }`.
   * Each is applied and stored in one transaction (docs/api.md, "Schema changes", says what it does).
   */
  migrate(options: NonNullable<TidalOptions['migrate']>): this {
    this.#o.migrate = options;
    return this;
  }

  /** Number of query worker threads (default: the number of cores). */
  workers(n: number): this {
    this.#o.workers = n;
    return this;
  }

  /**
   * The query workers' nice value, 0 to 19 (default 0): above 0 they yield the CPU to the calling
   * thread when cores are short (see {@link TidalOptions.workerNice}).
   */
  workerNice(n: number): this {
    this.#o.workerNice = n;
    return this;
  }

  /**
   * Caps each query worker's young generation (V8's new space) at `mb` MiB, 1 to 1024 (default:
   * V8's own), see {@link TidalOptions.workerYoungGenerationMb}.
   */
  workerYoungGenerationMb(mb: number): this {
    this.#o.workerYoungGenerationMb = mb;
    return this;
  }

  /**
   * Fixes the process's malloc mmap threshold at `kb` KiB, 1 to 32 768, or 0 for glibc's own
   * (default 1024), see {@link TidalOptions.mmapThresholdKb}.
   */
  mmapThresholdKb(kb: number): this {
    this.#o.mmapThresholdKb = kb;
    return this;
  }

  /**
   * The items from which the query threads share one catalogue and text index (default 4096), see
   * {@link TidalOptions.sharedCatalogMinItems}.
   */
  sharedCatalogMinItems(n: number): this {
    this.#o.sharedCatalogMinItems = n;
    return this;
  }

  /**
   * A module every query worker loads and starts once warm, with a thread-local handle on the
   * database (see {@link TidalOptions.workerModule}): `tidal serve` runs its HTTP acceptors so.
   */
  workerModule(url: string | URL, data?: unknown): this {
    this.#o.workerModule = data === undefined ? { url: String(url) } : { url: String(url), data };
    return this;
  }

  /** Source of "now" in milliseconds (default Date.now). */
  clock(fn: () => number): this {
    this.#o.clock = fn;
    return this;
  }

  durability(d: NonNullable<TidalOptions['durability']>): this {
    this.#o.durability = d;
    return this;
  }

  groupCommit(options: NonNullable<TidalOptions['groupCommit']>): this {
    this.#o.groupCommit = options;
    return this;
  }

  capacity(options: NonNullable<TidalOptions['capacity']>): this {
    this.#o.capacity = options;
    return this;
  }

  /** In-flight counts at which queries degrade (see {@link TidalOptions.loadThresholds}). */
  loadThresholds(thresholds: NonNullable<TidalOptions['loadThresholds']>): this {
    this.#o.loadThresholds = thresholds;
    return this;
  }

  /** Hard cap on queries in flight: `'auto'`, `0` (off) or a whole number above the last threshold. */
  admissionLimit(limit: NonNullable<TidalOptions['admissionLimit']>): this {
    this.#o.admissionLimit = limit;
    return this;
  }

  /** `false`: no degradation and no admission cap (for comparisons). */
  loadManagement(enabled: boolean): this {
    this.#o.loadManagement = enabled;
    return this;
  }

  /** Export metrics into this prom-client registry. */
  metrics(registry: NonNullable<TidalOptions['metricsRegistry']>): this {
    this.#o.metricsRegistry = registry;
    return this;
  }

  checkpointEveryEvents(n: number): this {
    this.#o.checkpointEveryEvents = n;
    return this;
  }

  /** Write refusal under host memory pressure: `{ floorBytes: 'auto' | 0 | bytes, meminfoPath }`. */
  memoryGuard(options: NonNullable<TidalOptions['memoryGuard']>): this {
    this.#o.memoryGuard = options;
    return this;
  }

  /** Where warnings go (default: process.emitWarning). */
  onWarning(sink: NonNullable<TidalOptions['onWarning']>): this {
    this.#o.onWarning = sink;
    return this;
  }

  /**
   * Rate limit on session signals: `RateLimiterConfig.limited(ratePerSecond, burst)` per (agent,
   * session), or `RateLimiterConfig.unlimited()` (the default). Validated at `open()`.
   */
  rateLimiter(config: RateLimiterConfig): this {
    this.#o.rateLimiter = config;
    return this;
  }

  /** Session options: `{ defaultTtlMs, sweepIntervalMs, maxOpen, onExpired }` (see {@link SessionOptions}). */
  sessions(options: SessionOptions): this {
    this.#o.sessions = mergeSessionOptions(this.#o.sessions, options);
    return this;
  }

  /** How often the TTL sweeper runs, in milliseconds (default 60 000). */
  sweepIntervalMs(ms: number): this {
    return this.sessions({ sweepIntervalMs: ms });
  }

  /** Called with the summary of every session its TTL closes (see {@link SessionOptions.onExpired}). */
  onSessionExpired(callback: NonNullable<SessionOptions['onExpired']>): this {
    return this.sessions({ onExpired: callback });
  }

  /**
   * Work sharing between identical queries: `{ maxStalenessMs: { coarseAggregates, noDiversity },
   * maxEntries, maxBytes }` (see {@link WorkSharingOptions}). `maxStalenessMs` of 0 shares only
   * executions that have not started.
   */
  workSharing(options: WorkSharingOptions): this {
    this.#o.workSharing = options;
    return this;
  }

  /**
   * Cursor chains: `{ ttlMs, depth, maxRankings, maxBytes }` (see {@link CursorOptions}), how long
   * and how much of the rankings their pages are cut from is kept, and how many items a chain ranks.
   */
  cursors(options: CursorOptions): this {
    this.#o.cursors = options;
    return this;
  }

  /**
   * The ANN index's build: `{ backgroundRows, closeWaitMs }` (see {@link AnnOptions}): above how many
   * rows to add a warm leaves it to a thread of its own (vector searches are exact meanwhile), and
   * how long `close()` waits for such a build before it saves what it has for the next open.
   */
  ann(options: AnnOptions): this {
    this.#o.ann = options;
    return this;
  }

  /**
   * The embedder `search({ text, semantic: true })` turns text into a vector with (tidal-fleet's
   * `EmbedderClient` is one; see {@link TextEmbedder}).
   */
  embedder(embedder: TextEmbedder): this {
    this.#embedder = embedder;
    return this;
  }

  /**
   * Replicates the database's writes to other replicas and theirs to it through `link`
   * (tidal-fleet's `RedisStreamReplication`; see {@link TidalOptions.replication}).
   */
  replication(link: ReplicationLink): this {
    this.#o.replication = link;
    return this;
  }

  /** Validates the options and opens the database, with its workers warm. */
  async open(): Promise<TidalDb<S>> {
    const embedder = this.#embedder === undefined ? undefined : checkEmbedder(this.#embedder);
    const db = await TidalDb.open<S>(this.#o as TidalOptions<S>);
    if (embedder !== undefined) attachEmbedder(db, embedder);
    return db;
  }
}
