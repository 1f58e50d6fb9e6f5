import { Counter, Gauge, type Registry } from 'prom-client';
import { isSharedStats } from './admission/shared-limits.js';
import type { AdmissionChain, StageStats } from './admission/types.js';

/** Where the metrics read their gauges when the registry is scraped. */
export interface ServeMetricsSource {
  stages(): StageStats[];
  inFlight(): number;
}

/** What the server reports per response. */
export interface ServeMetrics {
  /** One refusal, by the chain's reason or tidal's error code. */
  refused(reason: string): void;
  /** One answered request, by route name and status. */
  response(route: string, status: number): void;
}

/**
 * The server's metrics beside tidal-core's (`builder.metrics(registry)`): per chain stage its limit,
 * in flight, admitted and rejected (read from the stage counters at scrape time, no work per
 * request), requests in flight, refusals by reason and responses by route and status.
 */
export function createServeMetrics(registry: Registry, source: ServeMetricsSource, prefix = 'tidal_serve_'): ServeMetrics {
  const registers = [registry];
  new Gauge({
    name: `${prefix}requests_in_flight`,
    help: 'HTTP requests admitted and not yet answered',
    registers,
    collect() {
      this.set(source.inFlight());
    },
  });
  new Gauge({
    name: `${prefix}stage_limit`,
    help: "An admission stage's current limit (in flight, permits, rate); absent when the stage has none",
    labelNames: ['stage'],
    registers,
    collect() {
      this.reset();
      for (const s of source.stages()) if (s.limit !== null) this.set({ stage: s.name }, s.limit);
    },
  });
  new Gauge({
    name: `${prefix}stage_in_flight`,
    help: 'Requests holding a ticket of the admission stage',
    labelNames: ['stage'],
    registers,
    collect() {
      this.reset();
      for (const s of source.stages()) this.set({ stage: s.name }, s.inFlight);
    },
  });
  // The stages count for themselves; at scrape time the counters take the difference since the
  // last scrape, so they stay monotonic counters to Prometheus.
  const seen = new Map<string, number>();
  const stageCounter = (field: 'admitted' | 'rejected', help: string) =>
    new Counter({
      name: `${prefix}stage_${field}_total`,
      help,
      labelNames: ['stage'],
      registers,
      collect() {
        for (const s of source.stages()) {
          const key = `${field}:${s.name}`;
          const delta = s[field] - (seen.get(key) ?? 0);
          if (delta > 0) this.inc({ stage: s.name }, delta);
          seen.set(key, s[field]);
        }
      },
    });
  stageCounter('admitted', 'Requests an admission stage let through');
  stageCounter('rejected', 'Requests an admission stage refused');
  // Refusals and responses are counted here, in maps of a few bounded keys (the chain's reasons
  // and tidal's codes; route names by status), and handed to prom-client when it is scraped: a
  // labelled `inc` per response would build and hash a label string on the request path.
  const refusals = new Map<string, number>();
  new Counter({
    name: `${prefix}refused_total`,
    help: "Requests refused, by the chain's reason or tidal's error code",
    labelNames: ['reason'],
    registers,
    collect() {
      this.reset();
      for (const [reason, n] of refusals) this.inc({ reason }, n);
    },
  });
  const responses = new Map<string, Map<number, number>>();
  new Counter({
    name: `${prefix}responses_total`,
    help: 'HTTP responses by route and status',
    labelNames: ['route', 'status'],
    registers,
    collect() {
      this.reset();
      for (const [route, byStatus] of responses) for (const [status, n] of byStatus) this.inc({ route, status: String(status) }, n);
    },
  });
  return {
    refused(reason) {
      refusals.set(reason, (refusals.get(reason) ?? 0) + 1);
    },
    response(route, status) {
      let byStatus = responses.get(route);
      if (byStatus === undefined) responses.set(route, (byStatus = new Map<number, number>()));
      byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
    },
  };
}

/**
 * `tidal_serve_limit_decisions_total{stage, backend}`: the decisions the shared limits took, by the
 * backend that made them (`redis`; `local` for the tenant bucket's fallback; `none` for a window
 * admitted unchecked while Redis is away). Read from the stages' counters at scrape time.
 */
export function createSharedDecisionMetric(registry: Registry, chain: AdmissionChain): void {
  const seen = new Map<string, number>();
  new Counter({
    name: 'tidal_serve_limit_decisions_total',
    help: 'Decisions of the limits shared by every replica, by stage and by the backend that made them (redis, local fallback, none = fail-open)',
    labelNames: ['stage', 'backend'],
    registers: [registry],
    collect() {
      for (const s of chain.stats()) {
        if (!isSharedStats(s)) continue;
        for (const backend of ['redis', 'local', 'none'] as const) {
          const key = `${s.name}:${backend}`;
          const delta = s.backends[backend] - (seen.get(key) ?? 0);
          if (delta > 0) this.inc({ stage: s.name, backend }, delta);
          seen.set(key, s.backends[backend]);
        }
      }
    },
  });
}
