// Probe: admit + release with the admission state in this thread's memory against shared memory (docs/serve.md).
/**
 * `node bench/probes/dist/probes/admission-shared.js` (after `npm run probes`): what one `admit` + `release` of the
 * HTTP admission chain costs with its state in this thread's memory and in shared memory
 * (`createSharedAdmissionState`), one thread, uncontended, side by side in one run.
 *
 * Chains: the cap and the adaptive limit (`retrieve`), the whole chain (cap, adaptive, one tenant's
 * bucket, the route's permits, a period quota), and the whole chain over 1 000 tenants (a table
 * lookup per request). Each round times `--ops` admit+release pairs of every variant, interleaved;
 * the median of `--rounds` rounds (after one warm-up) is reported.
 */
import { createAdmissionChain, createSharedAdmissionState, type AdmissionOptions, type RequestInfo } from 'tidal-serve';
import { Report, nowMs, parseOptions } from '../src/harness/index.js';

const opts = parseOptions('admission-shared', {
  ops: { type: 'int', default: 1_000_000, description: 'admit + release pairs per round and variant' },
  rounds: { type: 'int', default: 7, description: 'timed rounds after one warm-up; the median is reported' },
});
const OPS = opts.ops;
const ROUNDS = opts.rounds;

const CAP_ADAPTIVE: AdmissionOptions = {
  inFlightCap: 640,
  adaptive: { floor: 136, targetLatencyMs: 250, windowMs: 250, backoff: 0.9 },
  tenants: false,
  permits: {},
  period: false,
};
const FULL: AdmissionOptions = {
  ...CAP_ADAPTIVE,
  // Rates no run reaches, so every request is admitted and each stage does its whole work.
  tenants: { tiers: { free: { ratePerSecond: 1e9, burst: 1e9 } }, maxTenants: 10_000 },
  permits: { retrieve: 384, search: 384 },
  period: { quota: 2 ** 30, periodMs: 3_600_000, align: true, key: 'tenant' },
};

interface Variant {
  readonly name: string;
  readonly options: AdmissionOptions;
  readonly tenants: number;
}

const VARIANTS: Variant[] = [
  { name: 'cap + adaptive', options: CAP_ADAPTIVE, tenants: 1 },
  { name: 'whole chain, 1 tenant', options: FULL, tenants: 1 },
  { name: 'whole chain, 1 000 tenants', options: FULL, tenants: 1_000 },
];

function timeChain(options: AdmissionOptions, shared: boolean, requests: readonly RequestInfo[]): number {
  let t = 1_700_000_000_000;
  const clock = () => t;
  const chain = createAdmissionChain(options, clock, shared ? { shared: createSharedAdmissionState(options) } : {});
  const n = requests.length;
  const outcome = { latencyMs: 5, ok: true };
  const start = nowMs();
  for (let i = 0; i < OPS; i++) {
    if ((i & 1023) === 0) t++;
    const r = chain.admit(requests[i % n]!, t);
    if (!r.admitted) throw new Error(`refused: ${r.reason}`);
    r.release(outcome);
  }
  return ((nowMs() - start) * 1e6) / OPS;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const report = new Report('admission-shared', opts);
report.line(`admit + release, ns/op; ${OPS.toLocaleString('en')} ops per round, median of ${ROUNDS} rounds.`);
report.line();
const results = new Map<string, { local: number[]; shared: number[] }>();
for (let round = 0; round <= ROUNDS; round++) {
  for (const v of VARIANTS) {
    const requests = Array.from({ length: v.tenants }, (_, i): RequestInfo => ({ route: 'retrieve', tenant: `tenant-${i}`, tier: 'free' }));
    // Alternate which goes first, so neither always runs on a warmer cache.
    const order = round % 2 === 0 ? [false, true] : [true, false];
    for (const shared of order) {
      const ns = timeChain(v.options, shared, requests);
      if (round === 0) continue;
      const r = results.get(v.name) ?? { local: [], shared: [] };
      (shared ? r.shared : r.local).push(ns);
      results.set(v.name, r);
    }
  }
}
const rows: string[][] = [];
for (const [name, r] of results) {
  const l = median(r.local);
  const s = median(r.shared);
  rows.push([name, l.toFixed(0), s.toFixed(0), `${(s / l).toFixed(2)}×`]);
}
report.table('', ['chain', 'local ns/op', 'shared ns/op', 'shared ÷ local'], rows);
report.finish();
