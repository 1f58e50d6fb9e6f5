import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { DegradationLevel } from 'tidal-load';
import { createMetrics } from '../src/metrics.js';

const CHILD = fileURLToPath(new URL('./fixtures/without-prom-client.mjs', import.meta.url));

describe('createMetrics', () => {
  it('registers the metrics in the given registry: gauges read at scrape, counters per query', async () => {
    const registry = new Registry();
    let inFlight = 3;
    const metrics = await createMetrics(registry, {
      inFlight: () => inFlight,
      level: () => DegradationLevel.CoarseAggregates,
      rejected: () => 7,
    });
    metrics.served('search', DegradationLevel.ReducedCandidates, 12);
    metrics.served('search', DegradationLevel.ReducedCandidates, 30);
    metrics.failed();
    inFlight = 5;
    const text = await registry.metrics();
    expect(text).toContain('tidal_queries_in_flight 5');
    expect(text).toContain('tidal_degradation_level 2');
    expect(text).toContain('tidal_queries_rejected_total 7');
    expect(text).toContain('tidal_queries_total{level="ReducedCandidates",op="search"} 2');
    expect(text).toContain('tidal_queries_failed_total 1');
    expect(text).toContain('tidal_query_duration_seconds_count{op="search"} 2');
  });
});

describe('without prom-client installed', () => {
  it('a database without .metrics() works, and one with it is refused with InvalidInputError naming the option', () => {
    const child = spawnSync(process.execPath, [CHILD], { encoding: 'utf8', timeout: 60_000 });
    expect(child.stderr).toBe('');
    expect(child.status).toBe(0);
    const result = JSON.parse(child.stdout) as Record<string, unknown>;
    expect(result.retrieved).toEqual(['a']);
    const refused = { name: 'InvalidInputError', code: 'TIDAL_INVALID_INPUT', field: 'metricsRegistry' };
    expect(result.open).toMatchObject(refused);
    expect(result.createMetrics).toMatchObject(refused);
    expect((result.createMetrics as { message: string }).message).toContain('npm install prom-client');
    expect((result.createMetrics as { message: string }).message).toContain("Cannot find package 'prom-client'");
  });
});
