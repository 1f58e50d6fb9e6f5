/**
 * `npm run bench:serve -- --soak`: one server, the personalized mix at a steady open-loop rate for
 * `--duration` seconds, reported per minute (soak.ts). The rate is `--rate`, or `--fraction` of the
 * C a closed loop measures once the server's vector searches use the ANN index. Loopback only,
 * bounded in time (the generator's own watchdog, and a kill past the duration plus a minute).
 */
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { InvalidInputError } from 'tidal-core';
import { fmtInt, type Report } from '../harness/index.js';
import type { Corpus } from '../corpus.js';
import { PERSONAL_DEFAULTS, type PersonalMixSpec } from './personal-mix.js';
import { buildUsers } from './personal-users.js';
import { allowedCpus, formatCpuList, setAffinity } from './pinning.js';
import { refusedCount } from './report.js';
import { startServer, statsOf, stopServer, waitAnn } from './server-child.js';
import { runLoadgen } from './spawn-loadgen.js';
import { renderSoak, soakMinutes, soakVerdict, SOAK_TARGETS, type MemorySample } from './soak.js';
import type { LoadResult, LoadgenClient } from './loadgen.js';
import { judgePhase, type ValidityThresholds } from './validity.js';
import type { ResolvedRuntime, VariantSpec } from './variants.js';

const LEVEL_HEADER = 'x-tidal-degradation-level';
const MINUTE_MS = 60_000;
/** RSS every 5 s (a /proc read: nothing asked of the server); `/stats` memory every third sample. */
const RSS_EVERY_MS = 5_000;
const STATS_EVERY = 3;

export interface SoakFlags {
  items: number;
  workers: number;
  closed: number;
  seconds: number;
  users: number;
  client: LoadgenClient;
  lateMs: number;
  validity: ValidityThresholds;
  /** The soak's length in seconds. */
  duration: number;
  /** A fixed rate in requests/s, or 0 for `fraction` × C. */
  rate: number;
  fraction: number;
  /** The generator's connections (0: the phases' rule). */
  pool: number;
}

/** Flattens `/stats` `db.memory` into bytes by component (soak.ts's `components`). */
export function memoryComponents(stats: unknown): Record<string, number> | undefined {
  const m = (stats as { db?: { memory?: Record<string, unknown> } }).db?.memory as
    | {
        process: { heapUsed: number; external: number; arrayBuffers: number };
        signals: { bytes: number };
        users: { bytes: number; usedBytes: number };
        cursors: { bytes: number };
        catalog: { bytes: number };
        text: { bytes: number };
        vectors: { bytes: number };
        threads: { threadId: number; heapUsed: number }[];
      }
    | undefined;
  if (m === undefined) return undefined;
  return {
    mainHeap: m.process.heapUsed,
    workerHeaps: m.threads.filter((t) => t.threadId !== 0).reduce((a, t) => a + t.heapUsed, 0),
    external: m.process.external,
    signals: m.signals.bytes,
    // The records' arena as written so far: its `bytes` are the buffer grown (doubling), mostly
    // pages never touched, and its `liveBytes` counts a replaced record's block again.
    users: m.users.usedBytes,
    cursors: m.cursors.bytes,
    catalog: m.catalog.bytes,
    text: m.text.bytes,
    vectors: m.vectors.bytes,
  };
}

type RssReading = Pick<MemorySample, 'rss' | 'split'>;
type Sample = { t: number; components?: Record<string, number> } & RssReading;

/** VmRSS and its split (RssAnon, RssFile, RssShmem) from /proc/PID/status, in bytes. */
export function rssSplitOf(pid: number | 'self', status?: string): RssReading {
  const text = status ?? readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string): number | null => {
    const m = new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text);
    return m === null ? null : Number(m[1]) * 1024;
  };
  const anon = kb('RssAnon');
  const file = kb('RssFile');
  const shmem = kb('RssShmem');
  return { rss: kb('VmRSS') ?? 0, ...(anon !== null && file !== null && shmem !== null ? { split: { anon, file, shmem } } : {}) };
}

/** Reads the server's RSS (and every `STATS_EVERY`th time its /stats memory) until stopped. */
function memorySampler(url: string, pid: number): { stop(): Promise<Sample[]> } {
  const samples: Sample[] = [];
  let running = true;
  let wake: (() => void) | null = null;
  const loop = (async () => {
    for (let i = 0; running; i++) {
      try {
        const components = i % STATS_EVERY === 0 ? memoryComponents(await statsOf(url)) : undefined;
        samples.push({ t: performance.now(), ...rssSplitOf(pid), ...(components === undefined ? {} : { components }) });
      } catch {
        // A lost sample is a gap in the memory column, not a failure of the soak.
      }
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, RSS_EVERY_MS);
      });
    }
  })();
  return {
    async stop() {
      running = false;
      wake?.();
      await loop;
      return samples;
    },
  };
}

function loadgenArgs(
  url: string,
  requestsFile: string,
  flags: SoakFlags,
  seed: number,
  mode: string[],
  ms: number,
  pool: number | null,
): string[] {
  return [
    '--url',
    url,
    '--requests',
    requestsFile,
    ...mode,
    '--duration-ms',
    String(ms),
    '--grace-ms',
    '3000',
    '--seed',
    String(seed),
    '--count-header',
    LEVEL_HEADER,
    '--client',
    flags.client,
    '--late-ms',
    String(flags.lateMs),
    // Opened as needed, not beforehand: a connection opened and left unused for a minute is closed
    // by Node's headers timeout with a 408 (36 of them in a 4-minute soak with 1 024 preconnected).
    ...(pool === null ? [] : ['--connections', String(pool)]),
  ];
}

/** The soak: returns the exit code (1 when a target was missed or the generator could not keep up). */
export async function soakRun(
  opts: {
    flags: SoakFlags;
    variant: VariantSpec;
    runtime: ResolvedRuntime;
    cpus: { server: number[]; generator: number[] } | null;
    requestsFile: string;
    personal: { corpus: Corpus; spec: PersonalMixSpec };
  },
  report: Report,
): Promise<number> {
  const { flags, variant, runtime, cpus, requestsFile } = opts;
  if (!(flags.fraction > 0 && flags.fraction <= 10)) throw new InvalidInputError('--fraction', 'a share of C > 0 and ≤ 10', flags.fraction);
  const original = allowedCpus();
  if (cpus !== null) setAffinity(process.pid, cpus.generator);
  const generatorCpus = cpus?.generator ?? null;
  process.stderr.write(
    `soak: starting ${variant.name} (${runtime.nodeVersion}${cpus === null ? '' : `, CPU ${formatCpuList(cpus.server)}`})...\n`,
  );
  const server = await startServer(flags, variant, runtime, cpus?.server ?? null, null);
  try {
    const built = await buildUsers(server.url, opts.personal.corpus, opts.personal.spec, PERSONAL_DEFAULTS.follows);
    process.stderr.write(`  built ${fmtInt(built.users)} users, ${fmtInt(built.signals)} signals, ${fmtInt(built.follows)} follows\n`);
    await waitAnn(server.url);
    const closed = (seconds: number, seed: number) =>
      runLoadgen(
        loadgenArgs(server.url, requestsFile, flags, seed, ['--closed', String(flags.closed)], seconds * 1000, null),
        (seconds + 60) * 1000,
        generatorCpus,
      );
    await closed(Math.min(5, flags.seconds), 10);
    let c: number | null = null;
    let rate = flags.rate;
    if (rate === 0) {
      c = (await closed(flags.seconds, 11)).result.goodputPerSec;
      if (!(c > 0)) throw new Error('the closed loop measured no capacity');
      rate = c * flags.fraction;
    }
    const pool = flags.pool > 0 ? flags.pool : Math.min(8192, Math.max(512, Math.ceil(rate * 0.5)));
    const durationMs = flags.duration * 1000;
    const load0 = loadavg()[0]!;
    process.stderr.write(
      `  soak: ${fmtInt(rate)} requests/s${c === null ? '' : ` (${flags.fraction}× C = ${fmtInt(c)}/s)`} for ${flags.duration} s, ${fmtInt(pool)} connections; load average ${load0.toFixed(2)}\n`,
    );
    const memory = memorySampler(server.url, server.pid);
    const { result, exitedAt } = await runLoadgen(
      [
        ...loadgenArgs(server.url, requestsFile, flags, 200, ['--rate', String(Math.round(rate))], durationMs, pool),
        '--window-ms',
        String(MINUTE_MS),
      ],
      durationMs + 60_000,
      generatorCpus,
    );
    const samples = await memory.stop();
    const startAt = exitedAt - result.elapsedMs;
    const mem: MemorySample[] = samples.map(({ t, ...s }) => ({ atMs: t - startAt, ...s }));
    const minutes = Math.ceil(durationMs / MINUTE_MS);
    const rows = soakMinutes(result.windows ?? [], mem, MINUTE_MS, minutes);
    const verdict = soakVerdict(rows, SOAK_TARGETS);
    const validity = judgePhase(result, flags.validity);
    const exitCode = await stopServer(server);
    report.set('soak', {
      c,
      rate,
      pool,
      durationMs,
      loadAverage: [load0, loadavg()[0]],
      rows,
      verdict,
      validity,
      memory: mem,
      load: summaryOf(result),
      exitCode,
    });
    report.finish();
    report.line(describeSoak({ flags, variant, runtime, c, rate, pool, load0, result, validity }));
    report.line();
    report.line(renderSoak(rows, verdict, SOAK_TARGETS));
    return verdict.pass && validity.valid ? 0 : 1;
  } catch (err) {
    server.child.kill('SIGKILL');
    throw err;
  } finally {
    if (cpus !== null) setAffinity(process.pid, original);
  }
}

/** The generator's result without the windows (they are the rows). */
function summaryOf(r: LoadResult): Omit<LoadResult, 'windows'> {
  const { windows: _w, ...rest } = r;
  return rest;
}

function describeSoak(o: {
  flags: SoakFlags;
  variant: VariantSpec;
  runtime: ResolvedRuntime;
  c: number | null;
  rate: number;
  pool: number;
  load0: number;
  result: LoadResult;
  validity: ReturnType<typeof judgePhase>;
}): string {
  const { flags, result: r, validity: v } = o;
  const ms = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(0));
  const rate =
    o.c === null
      ? `${fmtInt(o.rate)} requests/s (--rate)`
      : `${fmtInt(o.rate)} requests/s = ${flags.fraction}× C (C = ${fmtInt(o.c)}/s, a closed loop of ${flags.closed} once the ANN index was in use)`;
  return (
    `Soak of ${variant(o)} (${o.runtime.nodeVersion}; generator ${process.version}): the personalized mix, ${fmtInt(flags.items)} items, ${fmtInt(flags.users)} users, ` +
    `${rate} for ${flags.duration} s, open loop, a pool of ${fmtInt(o.pool)} connections. Load average (1 min) ${o.load0.toFixed(2)} at the start, ${loadavg()[0]!.toFixed(2)} at the end.\n\n` +
    `Whole run: ${fmtInt(r.offered)} offered, ${fmtInt(r.completed)} answered, ${fmtInt(refusedCount(r))} refused; admitted p99 ${ms(r.latency.ok.p99)} ms from the schedule, ` +
    `${ms(r.latencyFromSend?.ok.p99)} ms from the send; pool wait p99 ${ms(r.poolWait?.p99)} ms; generator ${v.valid ? 'kept its schedule' : `INVALID: ${v.reasons.join('; ')}`} ` +
    `(lateness p99 ${ms(r.sendLateness?.p99)} ms, loop lag p99 ${r.generator.loopLagP99Ms.toFixed(1)} ms).` +
    (Object.keys(r.errors).length === 0
      ? ''
      : ` No answer: ${Object.entries(r.errors)
          .map(([code, n]) => `${fmtInt(n)} ${code}`)
          .join(', ')}.`)
  );
}

function variant(o: { variant: VariantSpec }): string {
  return o.variant.args.length === 0 ? `\`tidal serve --demo\` (${o.variant.name})` : `\`tidal serve --demo ${o.variant.args.join(' ')}\``;
}
