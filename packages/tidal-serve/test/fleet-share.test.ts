/**
 * Three replicas' tenant limiters (three independent connections, sources and stages) over one real
 * redis-server, each offered far more than one saturated quota: each replica's share of what the
 * fleet admitted stays within ±25% of an even share. The run is bounded by what the fleet admitted,
 * not by time, and the three share one event loop, so a slow machine slows all three alike.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FleetRedis, RedisRateSource } from 'tidal-fleet';
import { createSharedTenantLimiter } from '../src/admission/shared-limits.js';
import type { RequestInfo } from '../src/admission/types.js';
import { servicesSkipped, startRedis, type RedisServer } from '../../tidal-fleet/test/helpers/services.js';

const REQ: RequestInfo = { route: 'search', tenant: 'acme', tier: 'free' };
const SPEC = { ratePerSecond: 150, burst: 15 };
/** Three seconds of the quota: about 150 batches of 2 across the fleet, enough for a share to settle. */
const ADMITTED = 450;

describe.skipIf(servicesSkipped)('three shared tenant limiters on one saturated quota', () => {
  let redis: RedisServer;
  const conns: FleetRedis[] = [];

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await Promise.all(conns.map((c) => c.close()));
    await redis?.stop();
  });

  it('each admits within ±25% of an even share', async () => {
    const replicas = await Promise.all(
      [0, 1, 2].map(async () => {
        const fleet = FleetRedis.connect(redis.url, { prefix: 'share:', heartbeatIntervalMs: 0, commandTimeoutMs: 1_000 });
        conns.push(fleet);
        for (const end = Date.now() + 30_000; !fleet.ready && Date.now() < end;) await new Promise((r) => setTimeout(r, 10));
        const source = new RedisRateSource(fleet, { ...SPEC, name: 'tenant:', onWarning: () => {} });
        const stage = createSharedTenantLimiter({ tiers: { free: SPEC }, maxTenants: 10, source: () => source, replicas: () => 3 });
        return { fleet, stage, admitted: 0, refused: 0 };
      }),
    );
    expect(replicas.every((r) => r.fleet.ready)).toBe(true);
    let total = 0;
    const started = Date.now();
    // Two callers per replica, each yielding to the event loop between requests.
    await Promise.all(
      replicas.flatMap((r) =>
        [0, 1].map(async () => {
          while (total < ADMITTED && Date.now() - started < 60_000) {
            const t = r.stage.admit(REQ, Date.now());
            if (t.admitted) {
              r.admitted++;
              total++;
              t.release({ latencyMs: 0, ok: true, served: true });
            } else r.refused++;
            await new Promise((resolve) => setImmediate(resolve));
          }
        }),
      ),
    );
    const split = replicas.map((r) => r.admitted);
    expect(total, `the fleet admitted ${ADMITTED} within 60 s`).toBeGreaterThanOrEqual(ADMITTED);
    expect(
      replicas.every((r) => r.refused > r.admitted),
      'each replica was offered more than it admitted: the quota was saturated',
    ).toBe(true);
    const even = total / 3;
    for (const [i, n] of split.entries()) {
      expect(n, `replica ${i} of ${JSON.stringify(split)}`).toBeGreaterThanOrEqual(0.75 * even);
      expect(n, `replica ${i} of ${JSON.stringify(split)}`).toBeLessThanOrEqual(1.25 * even);
    }
  }, 180_000);
});
