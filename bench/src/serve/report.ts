/**
 * What bench:serve writes: the markdown block of docs/serve.md, the chart (docs/serve.svg) and the
 * progress line of each phase. The run itself is bench-serve.ts.
 */
import { loadavg } from 'node:os';
import { describeMachine, fmtInt, gitCommit, machine, markdownTable } from '../harness/index.js';
import type { LoadResult } from './loadgen.js';
import type { ProfileSummary } from './profile.js';
import { describeThreads, type ThreadShare } from './threads.js';
import type { Validity, ValidityThresholds } from './validity.js';
import type { ResolvedRuntime, VariantSpec } from './variants.js';

const LEVELS = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const;

export interface Tick {
  /** `performance.now()` of the bench when the sample came back. */
  t: number;
  level: string;
  inFlight: number;
  rss: number;
}

export interface PhaseOutcome {
  name: string;
  factor: number | null;
  load: LoadResult;
  /** The server's main thread on a CPU, as a share of one core over the schedule. */
  mainCpu: number;
  /** The server's main thread runnable but waiting for a CPU, as a share of the schedule's time. */
  mainWait: number;
  /** The whole server process (main thread, query workers, writer), in cores over the schedule. */
  processCpu: number;
  /** The main thread's on-CPU µs from the schedule's start to the last response, per response (every request of the mix is a read). */
  mainUsPerResponse: number | null;
  /** Each server thread's CPU over the schedule, busiest first (the first few). */
  threads: ThreadShare[];
  /** Whether the generator kept its schedule (validity.ts); an invalid phase's latencies are not the server's. */
  validity: Validity;
  rssStart: number;
  rssEnd: number;
  ticks: Tick[];
  /** `performance.now()` here when the generator's schedule ended (its last arrival). */
  scheduleEndAt: number;
  /** The phase's start and end on the system's monotonic clock, in µs (what CPU profiles time samples by). */
  monotonicUs: [number, number];
  /** For the phase after the overload: ms from the overload's last arrival until the level was Full for good. */
  backToFullMs: number | null;
}

export type PinLabel = 'unpinned' | 'pinned';

export interface ServerRun {
  pin: PinLabel;
  variant: VariantSpec;
  runtime: ResolvedRuntime;
  /** The server's CPUs as /proc reported them once it listened. */
  serverCpus: string;
  /** The C the phases are multiples of. */
  c: number;
  capacity: PhaseOutcome;
  phases: PhaseOutcome[];
  exitCode: number | null;
  /** `--profile`: the main thread's self time, then the busiest other thread's. */
  profiles: ProfileSummary[];
}

/** A variant that could not run (its runtime missing, its server refusing a flag, …). */
export interface FailedRun {
  pin: PinLabel;
  variant: VariantSpec;
  error: string;
}

/** One pin mode's runs, all at the C its first server measured (or `--capacity`). */
export interface PinRun {
  pin: PinLabel;
  /** `{ server, generator }` CPU lists when pinned. */
  cpus: { server: number[]; generator: number[] } | null;
  runs: ServerRun[];
  failed: FailedRun[];
}

export interface ReportFlags {
  items: number;
  seconds: number;
  closed: number;
  workers: number;
  distinct: number;
  mix: 'default' | 'personal';
  users: number;
  writeShare: number;
  capacity: number;
  client: string;
  /** The generator's connections at most (`--pool`; 0: as many as the rate needs). */
  pool: number;
  profileAt: number;
  lateMs: number;
  validity: ValidityThresholds;
}

/** A latency in ms; the generator reports an empty sample's percentiles as null. */
export function ms(v: number | null, digits = 0): string {
  return v === null || !Number.isFinite(v) ? '–' : v.toFixed(digits);
}

function share(part: number, whole: number): string {
  return whole === 0 ? '–' : `${Math.round((100 * part) / whole)} %`;
}

export function refusedCount(r: LoadResult): number {
  return Object.values(r.refusalsByCode).reduce((a, b) => a + b, 0);
}

function lateness(r: LoadResult, v: Validity): string {
  if (r.sendLateness === null || v.lateShare === null) return '–';
  return `${r.sendLateness.p99.toFixed(1)} (${(v.lateShare * 100).toFixed(1)} %)`;
}

/** The phase's progress line on stderr; an invalid phase's latencies dimmed on a terminal. */
export function describePhase(p: PhaseOutcome, tty: boolean): string {
  const r = p.load;
  const dim = (s: string): string => (p.validity.valid ? s : tty ? `\x1b[2m${s}\x1b[22m` : `(${s})`);
  const late = r.sendLateness === null ? '' : `  late p99 ${r.sendLateness.p99.toFixed(1)} ms`;
  // Refusals timed from the schedule and from the send: apart, they tell the pool's wait from the server's answer.
  const fromSend =
    !r.latencyFromSend || r.latencyFromSend.refused.n === 0
      ? ''
      : ` (p50 ${ms(r.latency.refused.p50, 1)} ms; from the send p50 ${ms(r.latencyFromSend.refused.p50, 1)}, p99 ${ms(r.latencyFromSend.refused.p99, 1)} ms)`;
  const pool = !r.poolWait || r.mode !== 'open' ? '' : `  pool ${fmtInt(r.connections)}, wait p99 ${ms(r.poolWait.p99, 1)} ms`;
  return (
    `${p.validity.valid ? '' : 'INVALID '}${p.name.padEnd(12)} offered ${fmtInt(r.offeredRatePerSec)}/s  goodput ${fmtInt(r.goodputPerSec)}/s (${share(r.goodputPerSec, r.offeredRatePerSec)})  ` +
    `refused ${fmtInt(refusedCount(r))}  ${dim(`p99 ${ms(r.latency.ok.p99)} ms  refusal p99 ${ms(r.latency.refused.p99, 1)} ms${fromSend}`)}${pool}  ` +
    `main CPU ${Math.round(p.mainCpu * 100)} % (waiting ${Math.round(p.mainWait * 100)} %), ${ms(p.mainUsPerResponse)} µs/response  process ${p.processCpu.toFixed(2)} cores  ` +
    `generator lag p99 ${r.generator.loopLagP99Ms.toFixed(1)} ms${late}` +
    (p.validity.valid ? '' : `  [${p.validity.reasons.join('; ')}]`)
  );
}

function levelMix(r: LoadResult): string {
  const counts = r.headerCounts ?? {};
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  if (total === 0) return '–';
  return LEVELS.filter((l) => (counts[l] ?? 0) > 0)
    .map(
      (l) =>
        `${l === 'Full' ? 'F' : l === 'ReducedCandidates' ? 'R' : l === 'CoarseAggregates' ? 'C' : 'N'} ${Math.round((100 * (counts[l] ?? 0)) / total)}`,
    )
    .join(' · ');
}

function phaseTable(run: ServerRun): string {
  const rows = [run.capacity, ...run.phases].map((p) => {
    const r = p.load;
    const codes = Object.entries(r.refusalsByCode)
      .sort((a, b) => b[1] - a[1])
      .map(([code, n]) => `${code} ${fmtInt(n)}`)
      .join(', ');
    // An invalid phase's latencies are the generator's as much as the server's: struck through.
    const lat = (s: string): string => (p.validity.valid || s === '–' ? s : `~~${s}~~`);
    return [
      p.validity.valid ? p.name : `${p.name} **INVALID**`,
      fmtInt(r.offeredRatePerSec),
      fmtInt(r.goodputPerSec),
      share(r.goodputPerSec, r.offeredRatePerSec),
      codes === '' ? '0' : codes,
      lat(`${ms(r.latency.ok.p50)} / ${ms(r.latency.ok.p99)}`),
      refusedCount(r) === 0 ? '–' : lat(ms(r.latency.refused.p99, 1)),
      levelMix(r),
      `${Math.round(p.mainCpu * 100)} % (${Math.round(p.mainWait * 100)} %)`,
      ms(p.mainUsPerResponse),
      p.processCpu.toFixed(2),
      describeThreads(p.threads, 3),
      `${Math.round(r.generator.cpuShare * 100)} %`,
      r.generator.loopLagP99Ms.toFixed(1),
      lateness(r, p.validity),
      `${Math.round(p.rssEnd / 2 ** 20)}`,
      p.backToFullMs === null ? '–' : fmtInt(p.backToFullMs),
    ];
  });
  return markdownTable(
    [
      'phase',
      'offered/s',
      'goodput/s',
      'of offered',
      'refused (by code)',
      'ok p50 / p99 ms',
      'refusal p99 ms',
      'levels %',
      'main thread CPU (waiting)',
      'main µs / response',
      'process cores',
      'busiest threads',
      'generator CPU',
      'generator lag p99 ms',
      'sends late p99 ms (share late)',
      'RSS MiB',
      'to Full ms',
    ],
    rows,
  );
}

function invalidNotes(run: ServerRun): string[] {
  return [run.capacity, ...run.phases]
    .filter((p) => !p.validity.valid)
    .map((p) => `- ${p.name} INVALID: ${p.validity.reasons.join('; ')}.`);
}

function pinHeading(p: PinRun): string {
  return p.cpus === null
    ? `Unpinned: the server and the generator share every core`
    : `Pinned (\`taskset\`): the server on CPU ${p.cpus.server.join(',')}, the generator on CPU ${p.cpus.generator.join(',')}`;
}

function servers(pins: readonly PinRun[]): string {
  const seen = new Map<string, string>();
  for (const p of pins)
    for (const r of p.runs)
      seen.set(
        r.variant.name,
        `${r.variant.name} ${r.runtime.nodeVersion}${r.variant.runtime === 'default' ? '' : ` (${r.variant.runtime})`}`,
      );
  return [...seen.values()].join(', ');
}

function mixDescription(f: ReportFlags): string {
  if (f.mix === 'default') return `${fmtInt(f.distinct)} distinct requests (the query mix of docs/overload.md).`;
  return (
    `the personalized mix (\`--mix personal\`, bench/src/serve/personal-mix.ts): ${fmtInt(f.users)} users built through the routes before the run (an embedding, a history of views naming the user, follows), then every arrival's request drawn afresh: of the reads 35 % for_you, 10 % for_you + unseen, 10 % following, 10 % related, 15 % trending, 10 % text, 10 % hybrid; ` +
    `${(f.writeShare * 100).toFixed(0)} % of arrivals are writes naming a user (80 % signals, 10 % hides, 10 % follows). C is measured once vector searches use the ANN index.`
  );
}

/** Per request type: served of sent at each phase (the personal mix labels every request). */
export function typeTable(run: ServerRun): string {
  const phases = [run.capacity, ...run.phases];
  const types = [...new Set(phases.flatMap((p) => Object.keys(p.load.byType ?? {})))].sort();
  return markdownTable(
    ['type', ...phases.map((p) => p.name)],
    types.map((t) => [
      t,
      ...phases.map((p) => {
        const c = p.load.byType?.[t];
        return c === undefined || c.sent === 0 ? '–' : `${fmtInt(c.ok)} / ${fmtInt(c.sent)}`;
      }),
    ]),
  );
}

export function renderMarkdown(pins: readonly PinRun[], f: ReportFlags): string {
  const m = machine();
  const lines = [
    `Measured by \`npm run bench:serve\` at commit ${gitCommit()} on ${describeMachine(m)} (the generator's Node; the servers': ${servers(pins) || 'none ran'}): \`tidal serve --demo\` with ${fmtInt(f.items)} items and ${f.workers} query workers in one process, the load generator (bench/src/serve/loadgen.ts, \`--client ${f.client}\`, open-loop Poisson arrivals, latency from each request's scheduled time${f.pool > 0 ? `, over at most ${fmtInt(f.pool)} keep-alive connections: an arrival that finds them all busy waits for one (\`--pool\`)` : ''}) in another, both on loopback. ${f.seconds} s per phase; ${mixDescription(f)} Load average (1 min) when the tables were written: ${loadavg()[0]!.toFixed(1)}. Each pin mode below has its own C: ${f.capacity > 0 ? `fixed at ${fmtInt(f.capacity)} requests/s (\`--capacity\`)` : `the goodput of a closed loop of ${f.closed} against its first server (below the first degradation threshold, so C is Full's capacity)`}; the 1×…0.5× rates are multiples of it, the same for every server of that mode.`,
    '',
  ];
  for (const p of pins) {
    const first = p.runs[0];
    const c =
      first === undefined
        ? 'No server ran.'
        : `**C = ${fmtInt(first.c)} requests/s**${f.capacity > 0 || first.capacity.validity.valid ? '.' : ', from an INVALID capacity phase: the generator lagged while it was measured.'}`;
    lines.push(`### ${pinHeading(p)}`, '', c, '');
    for (const run of p.runs) {
      lines.push(`#### ${run.variant.heading}`, '', phaseTable(run), '');
      if (f.mix === 'personal') lines.push('Requests served (2xx) of those sent, by type:', '', typeTable(run), '');
      const notes = invalidNotes(run);
      if (notes.length > 0) lines.push(...notes, '');
      for (const prof of run.profiles) {
        lines.push(
          `Self time of the server's ${prof.thread === 'main' ? 'main thread' : `busiest other thread (${prof.thread})`} by function at ${f.profileAt}× C (\`--profile\`), over ${fmtInt(prof.samples)} busy CPU-profile samples:`,
          '',
          markdownTable(
            ['self time', 'function'],
            prof.top.map((t) => [`${(t.share * 100).toFixed(1)} %`, t.name.replaceAll('|', '\\|')]),
          ),
          '',
        );
      }
    }
    for (const x of p.failed) lines.push(`**${x.variant.name} did not run:** ${x.error}`, '');
  }
  lines.push(
    `"levels %": the share of 2xx responses at each degradation level (F Full, R ReducedCandidates, C CoarseAggregates, N NoDiversity). "main thread CPU": the server's main thread on a CPU, as a share of one core over the phase's schedule (its first to its last arrival), and in brackets the share of that time it was runnable but waiting for a CPU (/proc schedstat); "main µs / response": that thread's on-CPU time from the schedule's start to the last response, divided by the responses (${f.mix === 'default' ? 'all reads: retrieve and search' : 'reads and writes'}); "process cores": the whole server (main thread, query workers, writer); "busiest threads": the server's threads by CPU over the schedule, by their \`comm\`/tid (/proc/PID/task). "generator lag p99": the p99 of the generator's own event-loop delay beyond its 10 ms timer; "sends late": the p99 of how long after its scheduled time each request was handed to the client, and the share of sends more than ${f.lateMs} ms late. A phase is **INVALID** when the lag p99 is above ${f.validity.maxLagP99Ms} ms, more than ${(f.validity.maxLateShare * 100).toFixed(1)} % of its sends were late, or the generator dropped arrivals: it measured the generator as much as the server, and its latencies (struck through) are not the server's. "to Full ms": after the 10× phase, time from its last arrival until the level was Full for good (sampled from /stats every 250 ms, so ±250 ms).`,
    '',
  );
  return lines.join('\n');
}

const PALETTE = ['#2a7', '#c55', '#57c', '#d92', '#7a4', '#a5c', '#4aa', '#888'];

export function renderSvg(pins: readonly PinRun[]): string {
  const runs = pins.flatMap((p) => p.runs);
  const first = runs[0];
  const W = Math.max(760, 120 + 40 * runs.length * 4);
  const H = 240;
  const pad = 50;
  if (first === undefined)
    return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="40"><text x="10" y="20">no server ran</text></svg>\n`;
  const phases = first.phases.map((p) => p.name);
  const bw = (W - 2 * pad) / phases.length;
  const maxRate = Math.max(...runs.flatMap((r) => r.phases.map((p) => p.load.offeredRatePerSec))) * 1.05;
  const y = (v: number) => H - 30 - (v / maxRate) * (H - 70);
  const bars: string[] = [];
  phases.forEach((name, i) => {
    const x0 = pad + i * bw;
    runs.forEach((r, k) => {
      const p = r.phases[i];
      if (p === undefined) return;
      const w = (bw - 16) / runs.length;
      const x = x0 + 8 + k * w;
      const o = p.load.offeredRatePerSec;
      const g = p.load.goodputPerSec;
      bars.push(`<rect x="${x}" y="${y(o)}" width="${w - 2}" height="${H - 30 - y(o)}" fill="#eee" stroke="#999"/>`);
      bars.push(
        `<rect x="${x}" y="${y(g)}" width="${w - 2}" height="${H - 30 - y(g)}" fill="${PALETTE[k % PALETTE.length]}"${p.validity.valid ? '' : ' fill-opacity="0.35"'}/>`,
      );
      bars.push(`<text x="${x + w / 2}" y="${y(g) - 3}" text-anchor="middle" font-size="9">${fmtInt(g)}</text>`);
    });
    bars.push(`<text x="${x0 + bw / 2}" y="${H - 12}" text-anchor="middle">${name}</text>`);
  });
  const legend = runs
    .map((r, k) => {
      const x = pad + (k % 4) * 170;
      const yy = 8 + Math.floor(k / 4) * 14;
      return `<rect x="${x}" y="${yy}" width="10" height="10" fill="${PALETTE[k % PALETTE.length]}"/><text x="${x + 14}" y="${yy + 9}">${r.variant.name}, ${r.pin}</text>`;
    })
    .join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">\n<rect width="100%" height="100%" fill="white"/>\n${bars.join('\n')}\n${legend}\n<text x="${W - pad}" y="${H - 1}" text-anchor="end" font-size="9">grey: offered; colour: goodput (pale: INVALID phase)</text>\n</svg>\n`;
}
