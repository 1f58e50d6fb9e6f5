import type { Registry } from 'prom-client';
import { Counter, Gauge, Histogram } from 'prom-client';
import { levelName, type DegradationLevel } from 'tidal-load';

export interface MetricsSource {
  inFlight(): number;
  level(): DegradationLevel;
  rejected(): number;
}

/**
 * Prometheus metrics in the caller's prom-client registry. Gauges are read when the registry is
 * scraped (no work per query); counters and the histogram are updated per query.
 */
export class Metrics {
  readonly #queries: Counter<'level' | 'op'>;
  readonly #duration: Histogram<'op'>;
  readonly #failed: Counter;

  constructor(registry: Registry, source: MetricsSource, prefix = 'tidal_') {
    const registers = [registry];
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
    this.#queries = new Counter({ name: `${prefix}queries_total`, help: 'Queries served, by level and operation', labelNames: ['level', 'op'], registers });
    this.#failed = new Counter({ name: `${prefix}queries_failed_total`, help: 'Queries that failed in a worker', registers });
    this.#duration = new Histogram({
      name: `${prefix}query_duration_seconds`,
      help: 'End-to-end query latency, queueing included',
      labelNames: ['op'],
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
