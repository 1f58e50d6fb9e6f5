// Probe: ns per admit + release of the full five-stage admission chain against the in-flight cap alone, and per refusal.
/**
 * What the admission chain costs a request: nanoseconds per admit + release for the full chain (all
 * five stages) against the in-flight cap alone, and per refusal, measured interleaved in one run so
 * a busy machine shifts every variant alike.
 *
 *     npm run probes && node --expose-gc bench/probes/dist/probes/admission-cost.js
 */
import { createAdmissionChain } from 'tidal-serve';
import type { AdmissionChain, AdmissionOptions, RequestInfo } from 'tidal-serve';
import { Report, collectGarbage, parseOptions, percentile } from '../src/harness/index.js';

const OFF: AdmissionOptions = { inFlightCap: 0, adaptive: false, tenants: false, permits: {}, period: false };
const CAP: AdmissionOptions = { ...OFF, inFlightCap: 1_000_000 };
const FULL: AdmissionOptions = {
  inFlightCap: 1_000_000,
  adaptive: { floor: 1, targetLatencyMs: 1_000, windowMs: 100, backoff: 0.5 },
  // Rates far above what the loop offers: the measured path is the admitting one.
  tenants: { maxTenants: 10_000, tiers: { free: { ratePerSecond: 1e9, burst: 1_000_000 } } },
  permits: { retrieve: 1_000_000 },
  period: { quota: 1_000_000_000, periodMs: 3_600_000, align: true, key: 'tenant+route' },
};

// 64 tenants in rotation: the tenant and period maps see distinct keys, as a server would.
const REQUESTS: RequestInfo[] = Array.from({ length: 64 }, (_, i) => ({ route: 'retrieve', tenant: `tenant-${i}`, tier: 'free' }));
const OK = { latencyMs: 1, ok: true } as const;
const opts = parseOptions('admission-cost', {
  requests: { type: 'int', default: 200_000, description: 'admit + release pairs per round and variant' },
  rounds: { type: 'int', default: 15, description: 'interleaved rounds; the median is reported' },
});
const N = opts.requests;
const ROUNDS = opts.rounds;

function admitRelease(chain: AdmissionChain): number {
  const start = process.hrtime.bigint();
  for (let i = 0; i < N; i++) {
    const now = performance.now();
    const t = chain.admit(REQUESTS[i & 63]!, now);
    if (t.admitted) t.release(OK);
  }
  return Number(process.hrtime.bigint() - start) / N;
}

/** Every admit refused by the first stage: a cap of 1, held. */
function refusals(): number {
  const chain = createAdmissionChain({ ...FULL, inFlightCap: 1, adaptive: false }, () => performance.now());
  const held = chain.admit(REQUESTS[0]!, performance.now());
  const start = process.hrtime.bigint();
  let refused = 0;
  for (let i = 0; i < N; i++) if (!chain.admit(REQUESTS[i & 63]!, performance.now()).admitted) refused++;
  const ns = Number(process.hrtime.bigint() - start) / N;
  if (held.admitted) held.release(OK);
  if (refused !== N) throw new Error('the cap did not refuse');
  return ns;
}

/** The loop alone: a clock read and an array index per iteration. */
function loopOnly(): number {
  let sink = 0;
  const start = process.hrtime.bigint();
  for (let i = 0; i < N; i++) sink += performance.now() + REQUESTS[i & 63]!.tenant.length;
  const ns = Number(process.hrtime.bigint() - start) / N;
  if (sink === 0) throw new Error('unreachable');
  return ns;
}

const variants: Record<string, () => number> = {
  'loop + clock only': loopOnly,
  'empty chain': () => admitRelease(createAdmissionChain(OFF, () => performance.now())),
  'in-flight cap only': () => admitRelease(createAdmissionChain(CAP, () => performance.now())),
  'full chain (5 stages)': () => admitRelease(createAdmissionChain(FULL, () => performance.now())),
  'refusal by the cap (full chain behind it)': refusals,
};

const samples: Record<string, number[]> = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
for (const run of Object.values(variants)) run(); // warm up every path before measuring any
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, run] of Object.entries(variants)) {
    collectGarbage();
    samples[name]!.push(run());
  }
}
const median = (xs: number[]) =>
  percentile(
    [...xs].sort((a, b) => a - b),
    50,
  );
const capNs = median(samples['in-flight cap only']!);
const report = new Report('admission-cost', opts);
const rows = Object.entries(samples).map(([name, xs]) => {
  const m = median(xs);
  const sorted = [...xs].sort((a, b) => a - b);
  return [name, m.toFixed(0), `${percentile(sorted, 10).toFixed(0)}–${percentile(sorted, 90).toFixed(0)}`, `${(m / capNs).toFixed(2)}×`];
});
const title = `admit + release, ns per request: median of ${ROUNDS} interleaved rounds of ${N.toLocaleString('en-US')}`;
report.table(title, ['path', 'ns', 'p10–p90', 'vs the cap'], rows);
report.finish();
