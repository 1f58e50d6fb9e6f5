import { InvalidInputError, levelName, type DegradationLevel } from 'tidal-load';
import type { AnnBuildStats } from './ann-build.js';
import type { ReplicaStats } from './replica-stats.js';
import type { MemoryStats } from './memory-stats.js';

// prom-client is an optional peer dependency: it is loaded only when a registry is given, and no
// type of it appears in tidal's declarations (an application without it must still type-check).
type PromClient = typeof import('prom-client');

/**
 * The part of a prom-client `Registry` tidal uses. A structural type, so tidal's declarations name
 * no prom-client type; any prom-client `Registry` satisfies it.
 */
export interface MetricsRegistry {
  registerMetric(metric: object): void;
}

export interface MetricsSource {
  inFlight(): number;
  level(): DegradationLevel;
  rejected(): number;
}

const INSTALL_HINT =
  'a prom-client Registry, with the prom-client package installed where tidal-core can load it (npm install prom-client)';

function notInstalled(registry: unknown, err: unknown): InvalidInputError {
  return new InvalidInputError(
    'metricsRegistry',
    `${INSTALL_HINT}; loading prom-client failed: ${(err as Error)?.message ?? String(err)}`,
    registry,
    {
      cause: err,
    },
  );
}

let loaded: PromClient | undefined;

/**
 * Loads prom-client for {@link createMetrics}.
 * @throws {@link InvalidInputError} naming `metricsRegistry` when it cannot be loaded.
 */
async function importPromClient(registry: unknown): Promise<PromClient> {
  if (loaded) return loaded;
  try {
    const mod = (await import('prom-client')) as PromClient & { default?: PromClient };
    // prom-client is CommonJS: its exports are the namespace's members and its `default`.
    loaded = typeof mod.Counter === 'function' ? mod : mod.default!;
  } catch (err) {
    throw notInstalled(registry, err);
  }
  return loaded;
}

/**
 * Loads prom-client and creates tidal's metrics in `registry`: the way to build {@link Metrics}.
 * Nothing imports prom-client until this is called, so a database without `.metrics()` runs
 * without it installed.
 * @throws {@link InvalidInputError} naming `metricsRegistry` when prom-client is not installed.
 */
export async function createMetrics(registry: MetricsRegistry, source: MetricsSource, prefix = 'tidal_'): Promise<Metrics> {
  return new PromMetrics(await importPromClient(registry), registry, source, prefix);
}

/**
 * The replication gauges, read at each scrape from `read` (`stats().replication`):
 * `tidal_replication_unpublished` (own batches waiting for the log),
 * `tidal_replication_retained` (own batches held until every live replica applied them),
 * `tidal_replication_gaps` (origins with a missing batch this replica waits for),
 * `tidal_replication_lag_ms{origin}` (per other replica, how long after its commit there its last
 * batch applied here committed), `tidal_replication_behind_batches{origin}` and
 * `tidal_replication_behind_ms{origin}` (how many of its batches this replica has not applied, and
 * for how long it has been behind it; 0 when caught up).
 */
export async function exportReplicationMetrics(
  registry: MetricsRegistry,
  read: () => ReplicaStats | null,
  prefix = 'tidal_',
): Promise<void> {
  const { Gauge } = await importPromClient(registry);
  const registers = [registry as InstanceType<PromClient['Registry']>];
  new Gauge({
    name: `${prefix}replication_unpublished`,
    help: "This replica's committed batches not yet in the replication log",
    registers,
    collect() {
      this.set(read()?.unpublished ?? 0);
    },
  });
  new Gauge({
    name: `${prefix}replication_retained`,
    help: "This replica's batches held in its outbox until every live replica applied them",
    registers,
    collect() {
      this.set(read()?.retained ?? 0);
    },
  });
  new Gauge({
    name: `${prefix}replication_gaps`,
    help: 'Other replicas with a missing batch this replica waits for',
    registers,
    collect() {
      this.set(read()?.gaps.length ?? 0);
    },
  });
  new Gauge({
    name: `${prefix}replication_behind_batches`,
    help: 'Per other replica: its committed batches not yet applied here (0: caught up)',
    labelNames: ['origin'] as const,
    registers,
    collect() {
      this.reset();
      for (const o of read()?.origins ?? []) this.set({ origin: o.origin }, o.behind);
    },
  });
  new Gauge({
    name: `${prefix}replication_behind_ms`,
    help: 'Per other replica: milliseconds since this replica learned of a batch of it not yet applied here (0: caught up)',
    labelNames: ['origin'] as const,
    registers,
    collect() {
      this.reset();
      for (const o of read()?.origins ?? []) this.set({ origin: o.origin }, o.behindMs);
    },
  });
  new Gauge({
    name: `${prefix}replication_lag_ms`,
    help: 'Per other replica: milliseconds from its commit of the last batch applied here to the commit here',
    labelNames: ['origin'] as const,
    registers,
    collect() {
      this.reset();
      for (const o of read()?.origins ?? []) this.set({ origin: o.origin }, o.lagMs);
    },
  });
}

/**
 * The ANN index build on its own thread as gauges: `tidal_ann_building` (1 while a build runs and
 * vector searches are exact), `tidal_ann_build_rows_done` and `tidal_ann_build_rows_total`.
 */
export async function exportAnnBuildMetrics(registry: MetricsRegistry, read: () => AnnBuildStats, prefix = 'tidal_'): Promise<void> {
  const { Gauge } = await importPromClient(registry);
  const registers = [registry as InstanceType<PromClient['Registry']>];
  new Gauge({
    name: `${prefix}ann_building`,
    help: '1 while the ANN index is built on its own thread (vector searches are exact meanwhile), else 0',
    registers,
    collect() {
      this.set(read().state === 'building' ? 1 : 0);
    },
  });
  new Gauge({
    name: `${prefix}ann_build_rows_done`,
    help: 'Item rows the current (or last) ANN index build has read',
    registers,
    collect() {
      this.set(read().rowsDone);
    },
  });
  new Gauge({
    name: `${prefix}ann_build_rows_total`,
    help: 'Item rows the current (or last) ANN index build has to read, as known now',
    registers,
    collect() {
      this.set(read().rowsTotal);
    },
  });
}

/** The components of `tidal_memory_bytes{component}`, as `stats().memory` names them. */
export const MEMORY_COMPONENTS = ['signals', 'users', 'cursors', 'catalog', 'text', 'catalogImage', 'vectors'] as const;

/**
 * Memory as gauges, read at each scrape from `read` (`stats().memory`): `tidal_memory_bytes{component}`
 * (signals, users, cursors, catalog, text, catalogImage, vectors; catalog, text and vectors summed
 * over the query threads, catalogImage the shared images they read, once),
 * `tidal_memory_process_bytes{kind}` (rss, heap_used, heap_total, external, array_buffers) and
 * `tidal_memory_thread_bytes{thread,kind}` (per thread, `main` or a query thread's id: heap_used,
 * heap_total, catalog, text, vectors) and `tidal_memory_native_released_bytes` (native-heap.ts).
 */
export async function exportMemoryMetrics(registry: MetricsRegistry, read: () => MemoryStats, prefix = 'tidal_'): Promise<void> {
  const { Gauge } = await importPromClient(registry);
  const registers = [registry as InstanceType<PromClient['Registry']>];
  new Gauge({
    name: `${prefix}memory_bytes`,
    help: 'Bytes held per component (catalog, text and vectors summed over the query threads, catalogImage once; cursors estimated)',
    labelNames: ['component'] as const,
    registers,
    collect() {
      const m = read();
      for (const c of MEMORY_COMPONENTS) this.set({ component: c }, m[c].bytes);
    },
  });
  new Gauge({
    name: `${prefix}memory_process_bytes`,
    help: "The process's memory: resident set, the main thread's heap, external memory, ArrayBuffers",
    labelNames: ['kind'] as const,
    registers,
    collect() {
      const p = read().process;
      this.set({ kind: 'rss' }, p.rss);
      this.set({ kind: 'heap_used' }, p.heapUsed);
      this.set({ kind: 'heap_total' }, p.heapTotal);
      this.set({ kind: 'external' }, p.external);
      this.set({ kind: 'array_buffers' }, p.arrayBuffers);
    },
  });
  new Gauge({
    name: `${prefix}memory_native_released_bytes`,
    help: 'Freed native memory given back to the kernel after the warm rounds (malloc_trim; 0 where unavailable), summed',
    registers,
    collect() {
      this.set(read().nativeHeap.releasedBytes);
    },
  });
  new Gauge({
    name: `${prefix}memory_thread_bytes`,
    help: "Per thread (main, or a query thread's id): its heap, and the bytes of its catalog, text index and vectors",
    labelNames: ['thread', 'kind'] as const,
    registers,
    collect() {
      this.reset();
      for (const t of read().threads) {
        const thread = t.threadId === 0 ? 'main' : String(t.threadId);
        this.set({ thread, kind: 'heap_used' }, t.heapUsed);
        this.set({ thread, kind: 'heap_total' }, t.heapTotal);
        this.set({ thread, kind: 'catalog' }, t.catalogBytes);
        this.set({ thread, kind: 'text' }, t.textBytes);
        this.set({ thread, kind: 'vectors' }, t.vectorBytes);
      }
    },
  });
}

/** What the database reports per query; implemented over prom-client by {@link createMetrics}. */
export interface Metrics {
  served(op: 'retrieve' | 'search', level: DegradationLevel, latencyMs: number): void;
  failed(): void;
}

/**
 * Prometheus metrics in the caller's prom-client registry. Gauges are read when the registry is
 * scraped (no work per query); counters and the histogram are updated per query.
 */
class PromMetrics implements Metrics {
  readonly #queries;
  readonly #duration;
  readonly #failed;

  /** Built by {@link createMetrics}, which loads prom-client first. */
  constructor(prom: PromClient, registry: MetricsRegistry, source: MetricsSource, prefix = 'tidal_') {
    const { Counter, Gauge, Histogram } = prom;
    // prom-client types its registers as its own Registry; tidal accepts the structural subset.
    const registers = [registry as InstanceType<PromClient['Registry']>];
    new Gauge({
      name: `${prefix}queries_in_flight`,
      help: 'Queries in flight now',
      registers,
      collect() {
        this.set(source.inFlight());
      },
    });
    new Gauge({
      name: `${prefix}degradation_level`,
      help: 'Level a query entering now would get (0 Full, 1 ReducedCandidates, 2 CoarseAggregates, 3 NoDiversity)',
      registers,
      collect() {
        this.set(source.level());
      },
    });
    new Counter({
      name: `${prefix}queries_rejected_total`,
      help: 'Queries refused by the admission cap',
      registers,
      collect() {
        // A counter may only go up; the source is monotonic, so reset-and-set keeps it in step.
        this.reset();
        this.inc(source.rejected());
      },
    });
    this.#queries = new Counter({
      name: `${prefix}queries_total`,
      help: 'Queries served, by level and operation',
      labelNames: ['level', 'op'] as const,
      registers,
    });
    this.#failed = new Counter({ name: `${prefix}queries_failed_total`, help: 'Queries that failed in a worker', registers });
    this.#duration = new Histogram({
      name: `${prefix}query_duration_seconds`,
      help: 'End-to-end query latency, queueing included',
      labelNames: ['op'] as const,
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    });
  }

  served(op: 'retrieve' | 'search', level: DegradationLevel, latencyMs: number): void {
    this.#queries.inc({ level: levelName(level), op });
    this.#duration.observe({ op }, latencyMs / 1000);
  }

  failed(): void {
    this.#failed.inc();
  }
}
