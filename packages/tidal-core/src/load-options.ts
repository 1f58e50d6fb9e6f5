// The load-management options of TidalOptions: thresholds, the admission cap and its default,
// the metrics registry, and loadManagement: false.
import { InvalidInputError, resolveAdmissionLimit, resolveThresholds, type Thresholds } from 'tidal-load';
import type { FilledOptions, TidalOptions } from './options.js';

/** Thresholds that no in-flight count reaches: every query runs at Full. */
const NEVER: Thresholds = Object.freeze({ reducedCandidates: 2 ** 30 - 2, coarseAggregates: 2 ** 30 - 1, noDiversity: 2 ** 30 });

/**
 * The admission cap's default: the last threshold plus 192 queries per worker (512 on 2 workers).
 * Little's law, N = X × R, with the figures of docs/overload.md (2 workers, 100 000 items):
 * - what refused at 3× C was this cap, nothing else (the only source of `TIDAL_OVERLOADED` for a
 *   default query; the bench sends no sheddable ones): with 128 + 64 × 2 = 256, 3 698 of 95 000
 *   queries. Offered 4 749/s against ≈ 4 530/s sustained at the cheapest levels, so the queue
 *   lives near its bound, and every stall of the workers (bins of 250 ms served at 2 600–3 300/s)
 *   adds (4 749 − 2 600) × 0.25 ≈ 540 queries to it. Past `noDiversity` every query already runs at
 *   the cheapest level, so the only thing the slots above it buy is room for such a backlog to
 *   drain: 384 of them (512 − 128) hold a stall of ≈ 250 ms at half the throughput on top of the
 *   ≈ 130 in flight of a normal 3× bin;
 * - at 10× C the cap is always full: an admitted query waits ≈ 512 / 4 171 ≈ 123 ms (measured with
 *   256: 61 ms of bound gave p50 79 ms, p99 149 ms, so ≈ 140 / 210 ms expected), under the 300 ms
 *   target, and what is held in memory stays bounded: 512 queries' requests and results, ≈ 5 KB
 *   each, ≈ 2.5 MiB;
 * - a refusal is decided before any work in both cases, so its cost does not change.
 * Each worker adds capacity, so 192 more slots per worker keep the bound in milliseconds about the
 * same as the pool grows. A refused query costs the caller a retry, never the database any work.
 */
export function autoAdmissionLimit(thresholds: Readonly<Thresholds>, workers: number): number {
  return thresholds.noDiversity + 192 * workers;
}

export function resolveLoad(
  o: TidalOptions,
  workers: number,
): Pick<FilledOptions, 'loadThresholds' | 'admissionLimit' | 'metricsRegistry' | 'loadManagement'> {
  const enabled = o.loadManagement ?? true;
  if (typeof enabled !== 'boolean') throw new InvalidInputError('loadManagement', 'a boolean', enabled);
  const thresholds = resolveThresholds(o.loadThresholds);
  const admissionLimit = resolveAdmissionLimit(o.admissionLimit ?? 'auto', thresholds, { auto: autoAdmissionLimit(thresholds, workers) });
  const registry = o.metricsRegistry ?? null;
  if (registry !== null && (typeof registry !== 'object' || typeof registry.registerMetric !== 'function')) {
    throw new InvalidInputError('metricsRegistry', 'a prom-client Registry', registry);
  }
  return enabled
    ? { loadThresholds: thresholds, admissionLimit, metricsRegistry: registry, loadManagement: true }
    : { loadThresholds: NEVER, admissionLimit: 0, metricsRegistry: registry, loadManagement: false };
}
