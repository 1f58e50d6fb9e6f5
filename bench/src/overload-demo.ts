/**
 * The demo's last part: tidal under overload, in ten seconds. Measures the capacity C of this
 * machine on the demo corpus (closed loop, Full level), then offers 3× C as an open-loop Poisson
 * stream of the overload benchmark's query mix, and prints a line per second: offered, served,
 * refused, the levels the served queries ran at, and their p99 latency (counted from each query's
 * scheduled arrival, so a late generator is charged to the database). Writes the same seconds as a
 * chart (SVG).
 */
import { writeFileSync } from 'node:fs';
import { levelName, TidalError, type DegradationLevelName, type TidalDb } from 'tidal-core';
import type { Corpus } from './corpus.js';
import { prepareQueries } from './query-mix.js';
import { mulberry32 } from './random.js';
import { fmtInt, nowMs, percentile } from './harness/index.js';

const LEVELS: readonly DegradationLevelName[] = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'];
const SHORT: Record<DegradationLevelName, string> = {
  Full: 'Full',
  ReducedCandidates: 'Reduced',
  CoarseAggregates: 'Coarse',
  NoDiversity: 'NoDiv',
};

export interface DemoSecond {
  second: number;
  offered: number;
  served: number;
  refused: number;
  failed: number;
  levels: Record<DegradationLevelName, number>;
  p99Ms: number;
}

export interface OverloadDemoOptions {
  seconds: number;
  factor: number;
  /** How long the closed-loop capacity measurement runs. */
  capacitySeconds: number;
  workers: number;
  chartPath: string;
}

export async function overloadDemo(
  db: TidalDb,
  corpus: Corpus,
  log: (line?: string) => void,
  o: OverloadDemoOptions,
): Promise<DemoSecond[]> {
  const rand = mulberry32(7);
  // As many distinct queries as the overload benchmark draws, so only what a real stream repeats repeats.
  const queries = prepareQueries(corpus, rand, 65_536);
  let qi = 0;
  const next = () => queries[qi++ % queries.length]!;

  // Capacity: enough clients to keep every worker busy, few enough to stay at Full.
  const until = nowMs() + o.capacitySeconds * 1000;
  let done = 0;
  await Promise.all(
    Array.from({ length: o.workers * 4 }, async () => {
      while (nowMs() < until) {
        await next()(db);
        done++;
      }
    }),
  );
  const capacity = done / o.capacitySeconds;
  const rate = capacity * o.factor;
  log(
    `Overload: capacity C ≈ ${fmtInt(capacity)} queries/s (closed loop, ${o.capacitySeconds} s); now offering ${o.factor}× C = ${fmtInt(rate)} queries/s for ${o.seconds} s`,
  );
  log(` sec  offered  served  refused  levels of the served queries (Full / Reduced / Coarse / NoDiv)   p99 ms`);

  const seconds: DemoSecond[] = [];
  const bins = Array.from({ length: o.seconds }, (_, i) => ({
    second: i + 1,
    offered: 0,
    served: 0,
    refused: 0,
    failed: 0,
    levels: { Full: 0, ReducedCandidates: 0, CoarseAggregates: 0, NoDiversity: 0 },
    lat: [] as number[],
  }));
  const pending = new Set<Promise<void>>();
  const start = nowMs();
  const end = start + o.seconds * 1000;
  let nextArrival = start;
  let printed = 0;
  const print = (upTo: number) => {
    for (; printed < upTo; printed++) {
      const b = bins[printed]!;
      const lat = Float64Array.from(b.lat).sort();
      const p99 = lat.length ? percentile(lat, 99) : Number.NaN;
      const mix = LEVELS.map((l) => `${SHORT[l]} ${fmtInt(b.levels[l])}`).join(' / ');
      log(
        `${String(b.second).padStart(4)}  ${fmtInt(b.offered).padStart(7)}  ${fmtInt(b.served).padStart(6)}  ${fmtInt(b.refused).padStart(7)}  ${mix.padEnd(62)}  ${Number.isNaN(p99) ? '-' : p99.toFixed(0)}`,
      );
      seconds.push({
        second: b.second,
        offered: b.offered,
        served: b.served,
        refused: b.refused,
        failed: b.failed,
        levels: b.levels,
        p99Ms: p99,
      });
    }
  };
  while (nextArrival < end) {
    const t = nowMs();
    while (nextArrival <= t && nextArrival < end) {
      const scheduled = nextArrival;
      nextArrival += (-Math.log(1 - rand()) * 1000) / rate;
      // Each query is counted in the second it was scheduled in.
      const b = bins[Math.min(o.seconds - 1, Math.floor((scheduled - start) / 1000))]!;
      b.offered++;
      const q = next()(db).then(
        (level) => {
          b.served++;
          b.levels[levelName(level)]++;
          b.lat.push(nowMs() - scheduled);
        },
        (err: unknown) => {
          if (TidalError.is(err) && err.code === 'TIDAL_OVERLOADED') b.refused++;
          else b.failed++;
        },
      );
      const tracked = q.finally(() => pending.delete(tracked));
      pending.add(tracked);
    }
    // A second is printed once the next one is two seconds old: its queries have mostly finished.
    print(Math.max(0, Math.floor((nowMs() - start) / 1000) - 1));
    await new Promise((r) => setTimeout(r, 1));
  }
  const drainUntil = nowMs() + 10_000;
  while (pending.size > 0 && nowMs() < drainUntil) await new Promise((r) => setTimeout(r, 5));
  print(o.seconds);
  const offered = seconds.reduce((a, s) => a + s.offered, 0);
  const served = seconds.reduce((a, s) => a + s.served, 0);
  const refused = seconds.reduce((a, s) => a + s.refused, 0);
  log(
    `${fmtInt(offered)} offered, ${fmtInt(served)} served (${((100 * served) / Math.max(1, offered)).toFixed(1)} %), ${fmtInt(refused)} refused` +
      (pending.size > 0 ? `, ${fmtInt(pending.size)} still running` : ''),
  );
  writeFileSync(o.chartPath, renderChart(seconds, capacity, o.factor));
  log(`chart: ${o.chartPath}`);
  return seconds;
}

const COLORS: Record<DegradationLevelName, string> = {
  Full: '#2e7d32',
  ReducedCandidates: '#9e9d24',
  CoarseAggregates: '#ef6c00',
  NoDiversity: '#c62828',
};

/** Stacked bars of the served queries by level per second, with the offered and refused counts as lines. */
function renderChart(seconds: readonly DemoSecond[], capacity: number, factor: number): string {
  const W = 720;
  const H = 260;
  const pad = { l: 60, r: 20, t: 30, b: 40 };
  const max = Math.max(1, ...seconds.map((s) => Math.max(s.offered, s.served + s.refused)));
  const bw = (W - pad.l - pad.r) / Math.max(1, seconds.length);
  const y = (v: number) => pad.t + (H - pad.t - pad.b) * (1 - v / max);
  const parts: string[] = [];
  seconds.forEach((s, i) => {
    let acc = 0;
    for (const l of LEVELS) {
      const v = s.levels[l];
      if (v === 0) continue;
      parts.push(
        `<rect x="${(pad.l + i * bw + 2).toFixed(1)}" y="${y(acc + v).toFixed(1)}" width="${(bw - 4).toFixed(1)}" height="${(y(acc) - y(acc + v)).toFixed(1)}" fill="${COLORS[l]}"/>`,
      );
      acc += v;
    }
  });
  const line = (values: number[], color: string, dash = '') =>
    `<polyline fill="none" stroke="${color}" stroke-width="2" ${dash ? `stroke-dasharray="${dash}"` : ''} points="${values.map((v, i) => `${(pad.l + (i + 0.5) * bw).toFixed(1)},${y(v).toFixed(1)}`).join(' ')}"/>`;
  parts.push(
    line(
      seconds.map((s) => s.offered),
      '#555',
      '5,4',
    ),
  );
  parts.push(
    line(
      seconds.map((s) => s.refused),
      '#000',
    ),
  );
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const v = Math.round(max * f);
    return `<text x="${pad.l - 6}" y="${y(v) + 4}" text-anchor="end">${v}</text><line x1="${pad.l}" x2="${W - pad.r}" y1="${y(v)}" y2="${y(v)}" stroke="#eee"/>`;
  });
  const xs = seconds.map((s, i) => `<text x="${pad.l + (i + 0.5) * bw}" y="${H - pad.b + 15}" text-anchor="middle">${s.second}</text>`);
  const legend = LEVELS.map(
    (l, i) =>
      `<rect x="${pad.l + i * 120}" y="${H - 14}" width="10" height="10" fill="${COLORS[l]}"/><text x="${pad.l + i * 120 + 14}" y="${H - 5}">${l}</text>`,
  ).join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H + 20}" font-family="sans-serif" font-size="11">
<rect width="100%" height="100%" fill="white"/>
<text x="${pad.l}" y="16" font-size="13">tidal at ${factor}× capacity (C ≈ ${Math.round(capacity)} q/s): served queries per second by level; dashed: offered; black: refused</text>
${ticks.join('\n')}
${parts.join('\n')}
${xs.join('\n')}
<text x="${(W + pad.l) / 2}" y="${H - pad.b + 28}" text-anchor="middle">second</text>
<g transform="translate(0, 12)">${legend}</g>
</svg>
`;
}
