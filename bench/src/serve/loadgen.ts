/**
 * The load generator for `bench:serve`: a separate process that drives a tidal server on loopback
 * over HTTP (one request per connection at a time, many keep-alive connections) and prints one JSON
 * line of results on stdout. Two clients: `raw` (bench/src/serve/raw-client.ts: node:net sockets,
 * each request serialized once, a minimal response parser) and `undici` (`Pool.request`); the
 * results mean the same with either.
 *
 * Open loop (`--rate R`): arrivals follow a Poisson process of rate R, fixed in advance by the seed,
 * whatever the server does; each request's latency runs from its SCHEDULED time, so time spent
 * waiting for a connection, or for this process's own event loop, is billed to the request (the
 * "coordinated omission" a closed loop hides). Closed loop (`--closed N`): N loops, each sending its
 * next request when the previous one ends, to measure the capacity C the open-loop rates are
 * multiples of.
 *
 *     node bench/dist/serve/loadgen.js --url http://127.0.0.1:7070 --requests mix.json --rate 2000 --duration-ms 10000
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Pool } from 'undici';
import { InvalidInputError } from 'tidal-core';
import { mulberry32 } from '../random.js';
import { RawClient, codeOf, serializeRequest } from './raw-client.js';
import type { Outcome, PreparedRequest } from './raw-client.js';
import { summarize } from '../harness/index.js';
import type { Summary } from '../harness/index.js';
import { personalDrawer, type PersonalMixSpec } from './personal-mix.js';
import { checkLoopbackUrl, checkSource, LOADGEN_DEFAULTS, LOADGEN_HELP, parseLoadgenArgs } from './loadgen-args.js';
import { WindowAccumulator, type LoadWindow } from './windows.js';

export { checkLoopbackUrl, checkRequests, checkSource, LOADGEN_DEFAULTS, parseLoadgenArgs } from './loadgen-args.js';

/** One request of the mix, as the JSON file gives it. */
export interface RequestSpec {
  /** @default 'GET' */
  readonly method?: string;
  /** Starts with `/`; appended to the base URL's path. */
  readonly path: string;
  /** A string is sent as it is; anything else as JSON (with `content-type: application/json`). */
  readonly body?: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  /** The query type it counts under in `byType` (a drawn mix labels every request). */
  readonly type?: string;
}

/** What `--requests` gives: a fixed list picked from uniformly, or a mix drawn per arrival. */
export type RequestSource = readonly RequestSpec[] | PersonalMixSpec;

/** Per request type: sent, answered 2xx, refused (429, 503), other statuses, no answer. */
export interface TypeCounts {
  sent: number;
  ok: number;
  refused: number;
  failed: number;
  errors: number;
}

/** The HTTP client that sends the requests. */
export type LoadgenClient = 'raw' | 'undici';

export interface LoadgenConfig {
  /** The server's base URL; loopback only. */
  readonly url: string;
  /** @default LOADGEN_DEFAULTS.client */
  readonly client: LoadgenClient;
  readonly mode:
    | { readonly kind: 'open'; readonly ratePerSecond: number }
    /** Closed: `concurrency` callers; with `requests`, they stop after that many sends, whichever comes first. */
    | { readonly kind: 'closed'; readonly concurrency: number; readonly requests?: number };
  readonly durationMs: number;
  /** Connections in the pool. @default open: 512; closed: the concurrency */
  readonly connections: number;
  /**
   * Per-request limit on waiting for headers, and between body chunks (raw: no byte moving on the
   * connection while the request is outstanding, counted as `LOADGEN_TIMEOUT`; undici:
   * `UND_ERR_HEADERS_TIMEOUT`, `UND_ERR_BODY_TIMEOUT`). @default 10 000
   */
  readonly timeoutMs: number;
  /** After the schedule ends, how long requests still running may take before they are abandoned. @default 5 000 */
  readonly graceMs: number;
  readonly seed: number;
  /**
   * Requests outstanding (sent or queued for a connection) past which the open loop drops an
   * arrival instead of sending it (counted in `generatorDropped`): this process's memory stays
   * bounded when a server stops answering. @default 100 000
   */
  readonly maxOutstanding: number;
  /** A response header whose values are counted over 2xx responses (the degradation level), or `null`. */
  readonly countHeader: string | null;
  /**
   * Connections opened before the schedule starts (raw client only), so the run measures the
   * server's answers to requests on open connections, not its accept queue. @default 0
   */
  readonly preconnect?: number;
  /**
   * Open loop: a send made more than this many ms after its scheduled time counts as late
   * (`sendLateness.late`): this process fell behind its own schedule. @default LOADGEN_DEFAULTS.lateMs
   */
  readonly lateMs?: number;
  /** Results also cut into windows of this many ms of the schedule (`windows`, windows.ts); absent: none. */
  readonly windowMs?: number;
}

/** One request's timeline, with `trace`. Times are ms since the run started. */
export interface TraceRecord {
  readonly index: number;
  readonly scheduledMs: number;
  readonly sentMs: number;
  readonly endMs: number;
  /** When its bytes went to a socket, after any wait for a free connection (raw client; `null` otherwise). */
  readonly wroteMs: number | null;
  /** `0` for a connection error or an abandoned request. */
  readonly status: number;
  readonly code: string | null;
  readonly latencyMs: number;
}

export interface LoadResult {
  readonly mode: 'open' | 'closed';
  readonly client: LoadgenClient;
  readonly url: string;
  readonly durationMs: number;
  /** From the start to the last response (or to the end of the grace period). */
  readonly elapsedMs: number;
  readonly connections: number;
  /** Connections open when the schedule started (`preconnect`). */
  readonly preconnected: number;
  readonly targetRatePerSec: number | null;
  readonly concurrency: number | null;
  /** Requests the schedule called for (open) or sent (closed). */
  readonly offered: number;
  readonly generatorDropped: number;
  /** Responses received, by status code. */
  readonly statuses: Record<string, number>;
  readonly completed: number;
  /** 429 and 503 responses by the `code` of their JSON body (`(none)` without one). */
  readonly refusalsByCode: Record<string, number>;
  /** Other non-2xx responses by `code`. */
  readonly failuresByCode: Record<string, number>;
  /**
   * Requests that got no response: connection errors and timeouts, by error code (the socket's
   * code, `ECONNREFUSED`, `ECONNRESET`, ..., or the client's: raw-client.ts lists its own).
   */
  readonly errors: Record<string, number>;
  /** Still running when the grace period ran out. */
  readonly abandoned: number;
  readonly offeredRatePerSec: number;
  readonly achievedRatePerSec: number;
  readonly goodputPerSec: number;
  readonly maxOutstanding: number;
  /** Latency from the scheduled time, in ms, of 2xx responses and of refusals (429, 503). */
  readonly latency: { readonly ok: Summary; readonly refused: Summary };
  /**
   * The same latencies from the send: from when the request's bytes went to a socket, after any
   * wait for a free connection, to its last byte back: what the server took, the pool's wait left
   * out. `null` with the undici client, which does not say when it wrote.
   */
  readonly latencyFromSend: { readonly ok: Summary; readonly refused: Summary } | null;
  /**
   * How long requests waited for a free connection of the pool (`connections`), in ms: from being
   * handed to the client to their bytes going to a socket. A client with a bounded pool meets this
   * wait; it is billed to the latency from the schedule, but it is not the generator's lateness
   * (`sendLateness`). `over`: waits longer than `lateMs`. `null` with the undici client.
   */
  readonly poolWait: {
    readonly p50: number;
    readonly p99: number;
    readonly max: number;
    readonly over: number;
    readonly sends: number;
  } | null;
  /** With `windowMs`: the results per window of the schedule (windows.ts). */
  readonly windows?: LoadWindow[];
  readonly headerCounts: Record<string, number> | null;
  /** Counts by the requests' `type` (requests without one under `(none)`). */
  readonly byType: Record<string, TypeCounts>;
  /**
   * This process's CPU time over the run as a share of one core, and its event loop's p99 delay:
   * when either is high the generator, not the server, may be what limited the run. `cpuUs`: the
   * same CPU time in µs (divided by `completed`, what one request cost the generator).
   */
  readonly generator: { readonly cpuShare: number; readonly loopDelayP99Ms: number; readonly cpuUs: number; readonly loopLagP99Ms: number };
  /**
   * Open loop: how late each request was handed to the client after its scheduled time, in ms
   * (this process's timers and event loop, before any wait for a connection), and how many were
   * later than `lateMs`. `null` for a closed loop, whose requests are scheduled when they are sent.
   */
  readonly sendLateness: {
    readonly p50: number;
    readonly p99: number;
    readonly max: number;
    readonly late: number;
    readonly sends: number;
    readonly lateMs: number;
  } | null;
  /** With `trace`: `performance.now()` at the run's start (trace times are relative to it), and every request. */
  readonly originMs?: number;
  readonly trace?: TraceRecord[];
}

const MAX_BODY_BYTES = 1 << 30;

/** Requests ready to send: path joined, body serialized once. */
function prepare(base: URL, specs: readonly RequestSpec[]): (PreparedRequest & { type?: string })[] {
  const prefix = base.pathname.endsWith('/') ? base.pathname.slice(0, -1) : base.pathname;
  return specs.map((s) => {
    const headers: Record<string, string> = { ...s.headers };
    let body: string | undefined;
    if (s.body !== undefined) {
      body = typeof s.body === 'string' ? s.body : JSON.stringify(s.body);
      if (typeof s.body !== 'string' && !Object.keys(headers).some((k) => k.toLowerCase() === 'content-type'))
        headers['content-type'] = 'application/json';
    }
    return { method: s.method ?? 'GET', path: prefix + s.path, body, headers, type: s.type };
  });
}

/** One exchange with the server; never rejects (no response is `status` 0 with a code). */
interface Exchanger {
  /** Sends the mix's request `pick`, or a request drawn for this arrival. */
  exchange(pick: number | PreparedRequest): Promise<Outcome>;
  /** Opens `n` connections before the first exchange; resolves with the connections open. */
  preconnect?(n: number): Promise<number>;
  destroy(): Promise<void>;
}

function undiciExchanger(base: URL, mix: readonly PreparedRequest[], config: LoadgenConfig): Exchanger {
  const pool = new Pool(base.origin, {
    connections: config.connections,
    pipelining: 1, // one request at a time per connection: no head-of-line blocking between requests
    headersTimeout: config.timeoutMs,
    bodyTimeout: config.timeoutMs,
    connect: { timeout: config.timeoutMs },
  });
  return {
    async exchange(pick) {
      const req = typeof pick === 'number' ? mix[pick]! : pick;
      try {
        const res = await pool.request({ method: req.method, path: req.path, headers: req.headers, body: req.body });
        const status = res.statusCode;
        if (status >= 200 && status < 300) {
          // Read to the end (the response is over when its last byte is in); dump skips the async
          // iterator's per-chunk promises. The limit only has to exceed any body tidal sends.
          await res.body.dump({ limit: MAX_BODY_BYTES });
          const v = config.countHeader === null ? undefined : res.headers[config.countHeader];
          return { status, code: null, counted: v === undefined ? undefined : String(v) };
        }
        return { status, code: codeOf(await res.body.text()), counted: undefined };
      } catch (err) {
        const e = err as { code?: unknown; name?: unknown };
        return {
          status: 0,
          code: typeof e.code === 'string' ? e.code : typeof e.name === 'string' ? e.name : 'UNKNOWN',
          counted: undefined,
        };
      }
    },
    async destroy() {
      await pool.destroy().catch(() => undefined);
    },
  };
}

function rawExchanger(base: URL, mix: readonly PreparedRequest[], config: LoadgenConfig): Exchanger {
  const bytes = mix.map((req, i) => serializeRequest(req, base.host, `requests[${i}]`));
  const client = new RawClient({
    origin: base,
    connections: config.connections,
    timeoutMs: config.timeoutMs,
    countHeader: config.countHeader,
  });
  return {
    exchange: (pick) =>
      typeof pick === 'number' ? client.send(bytes[pick]!, mix[pick]!.method) : client.send(serializeRequest(pick, base.host), pick.method),
    preconnect: (n) => client.preconnect(n),
    destroy() {
      client.destroy();
      return Promise.resolve();
    },
  };
}

function bump(counts: Record<string, number>, key: string): void {
  counts[key] = (counts[key] ?? 0) + 1;
}

/**
 * Runs one load phase against `config.url` and returns its results. With `trace`, every request's
 * timeline is returned too (tests read it; the CLI does not print it).
 */
export async function runLoad(config: LoadgenConfig, source: RequestSource, options: { trace?: boolean } = {}): Promise<LoadResult> {
  const base = checkLoopbackUrl(config.url);
  const checked = checkSource(source, 'requests');
  const drawn = Array.isArray(checked) ? null : (checked as PersonalMixSpec);
  // A drawn mix has no list: `exchange` gets the request drawn for the arrival.
  const mix = drawn === null ? prepare(base, checked as readonly RequestSpec[]) : [];
  const draw = drawn === null ? null : personalDrawer(drawn, mulberry32(config.seed ^ 0x5bd1e995));
  const client = config.client === 'raw' ? rawExchanger(base, mix, config) : undiciExchanger(base, mix, config);
  let preconnected = 0;
  if ((config.preconnect ?? 0) > 0) {
    if (!client.preconnect) throw new InvalidInputError('preconnect', 'used with the raw client', config.preconnect);
    preconnected = await client.preconnect(config.preconnect!);
  }
  const random = mulberry32(config.seed);
  const loopDelay = monitorEventLoopDelay({ resolution: LOADGEN_DEFAULTS.loopResolutionMs });
  loopDelay.enable();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const clock = (): number => performance.now() - t0;

  const statuses: Record<string, number> = {};
  const refusalsByCode: Record<string, number> = {};
  const failuresByCode: Record<string, number> = {};
  const errors: Record<string, number> = {};
  const headerCounts: Record<string, number> | null = config.countHeader === null ? null : {};
  const byType: Record<string, TypeCounts> = {};
  const okLatencies: number[] = [];
  const refusedLatencies: number[] = [];
  // From the send, and the pool's wait; stay empty when the client does not say when it wrote.
  const okFromSend: number[] = [];
  const refusedFromSend: number[] = [];
  const poolWaits: number[] = [];
  const windows = config.windowMs === undefined ? null : new WindowAccumulator(config.windowMs);
  const trace: TraceRecord[] | undefined = options.trace ? [] : undefined;
  const lateMs = config.lateMs ?? LOADGEN_DEFAULTS.lateMs;
  const open = config.mode.kind === 'open';
  const lateness: number[] = [];
  let late = 0;
  let offered = 0;
  let completed = 0;
  let good = 0;
  let dropped = 0;
  let outstanding = 0;
  let maxOutstanding = 0;
  let lastEndMs = 0;
  let closing = false;
  const running = new Set<Promise<void>>();

  const send = async (index: number, scheduledMs: number): Promise<void> => {
    const pick: number | (PreparedRequest & { type?: string }) =
      draw !== null ? prepare(base, [draw()])[0]! : mix.length === 1 ? 0 : Math.floor(random() * mix.length);
    const type = (typeof pick === 'number' ? mix[pick]!.type : pick.type) ?? '(none)';
    const counts = (byType[type] ??= { sent: 0, ok: 0, refused: 0, failed: 0, errors: 0 });
    counts.sent++;
    const sentMs = clock();
    if (open) {
      const behind = sentMs - scheduledMs;
      lateness.push(behind);
      if (behind > lateMs) late++;
    }
    windows?.sent(scheduledMs);
    const { status, code, counted, writtenAt } = await client.exchange(pick);
    const endMs = clock();
    if (closing) return; // abandoned: counted as such, not as an error of the server
    if (headerCounts !== null && status >= 200 && status < 300) bump(headerCounts, counted ?? '(none)');
    const latencyMs = endMs - scheduledMs;
    const wroteMs = writtenAt === undefined ? null : writtenAt - t0;
    if (wroteMs !== null) poolWaits.push(Math.max(0, wroteMs - sentMs));
    windows?.add({ scheduledMs, endMs, status, counted, type });
    lastEndMs = endMs;
    if (status === 0) {
      bump(errors, code ?? 'UNKNOWN');
      counts.errors++;
    } else {
      completed++;
      bump(statuses, String(status));
      if (status >= 200 && status < 300) {
        good++;
        counts.ok++;
        okLatencies.push(latencyMs);
        if (wroteMs !== null) okFromSend.push(endMs - wroteMs);
      } else if (status === 429 || status === 503) {
        bump(refusalsByCode, code!);
        counts.refused++;
        refusedLatencies.push(latencyMs);
        if (wroteMs !== null) refusedFromSend.push(endMs - wroteMs);
      } else {
        bump(failuresByCode, code!);
        counts.failed++;
      }
    }
    trace?.push({ index, scheduledMs, sentMs, endMs, wroteMs, status, code, latencyMs });
  };

  const launch = (index: number, scheduledMs: number): Promise<void> => {
    outstanding++;
    if (outstanding > maxOutstanding) maxOutstanding = outstanding;
    const p = send(index, scheduledMs).finally(() => {
      outstanding--;
      running.delete(p);
    });
    running.add(p);
    return p;
  };

  if (config.mode.kind === 'open') {
    const meanGapMs = 1000 / config.mode.ratePerSecond;
    // Arrival times, fixed by the seed before anything is sent: what the server does cannot move them.
    const gaps = mulberry32(config.seed ^ 0x9e3779b9);
    let nextMs = -Math.log(1 - gaps()) * meanGapMs;
    await new Promise<void>((resolve) => {
      const tick = (): void => {
        const now = clock();
        while (nextMs <= now && nextMs < config.durationMs) {
          const index = offered++;
          if (outstanding >= config.maxOutstanding) dropped++;
          else void launch(index, nextMs);
          nextMs += -Math.log(1 - gaps()) * meanGapMs;
        }
        if (nextMs >= config.durationMs) resolve();
        else setTimeout(tick, Math.max(0, nextMs - clock()));
      };
      tick();
    });
  } else {
    const limit = config.mode.requests ?? Number.POSITIVE_INFINITY;
    const loops = Array.from({ length: config.mode.concurrency }, async () => {
      while (clock() < config.durationMs && offered < limit) {
        // Closed loop: the next request is scheduled when the previous one ends.
        await launch(offered++, clock());
      }
    });
    await Promise.all(loops);
  }

  // The schedule is over: give what is still running the grace period, then abandon it.
  let graceTimer: NodeJS.Timeout | undefined;
  const graceOver = new Promise<void>((resolve) => {
    graceTimer = setTimeout(resolve, config.graceMs);
  });
  await Promise.race([Promise.all([...running]), graceOver]);
  clearTimeout(graceTimer);
  const abandoned = outstanding;
  closing = true;
  const elapsedMs = abandoned > 0 ? clock() : Math.max(lastEndMs, Math.min(clock(), config.durationMs));
  await client.destroy();
  await Promise.allSettled([...running]);
  const cpu = process.cpuUsage(cpu0);
  loopDelay.disable();

  const seconds = elapsedMs / 1000;
  return {
    mode: config.mode.kind,
    client: config.client,
    url: config.url,
    durationMs: config.durationMs,
    elapsedMs,
    connections: config.connections,
    preconnected,
    targetRatePerSec: config.mode.kind === 'open' ? config.mode.ratePerSecond : null,
    concurrency: config.mode.kind === 'closed' ? config.mode.concurrency : null,
    offered,
    generatorDropped: dropped,
    statuses,
    completed,
    refusalsByCode,
    failuresByCode,
    errors,
    abandoned,
    offeredRatePerSec: offered / (config.durationMs / 1000),
    achievedRatePerSec: seconds > 0 ? completed / seconds : 0,
    goodputPerSec: seconds > 0 ? good / seconds : 0,
    maxOutstanding,
    latency: { ok: summarize(okLatencies), refused: summarize(refusedLatencies) },
    latencyFromSend: config.client === 'raw' ? { ok: summarize(okFromSend), refused: summarize(refusedFromSend) } : null,
    poolWait: config.client === 'raw' ? poolWaitOf(poolWaits, lateMs) : null,
    ...(windows !== null ? { windows: windows.windows() } : {}),
    headerCounts,
    byType,
    generator: {
      cpuShare: (cpu.user + cpu.system) / 1000 / Math.max(1, clock()),
      loopDelayP99Ms: loopDelay.percentile(99) / 1e6,
      cpuUs: cpu.user + cpu.system,
      loopLagP99Ms: Math.max(0, loopDelay.percentile(99) / 1e6 - LOADGEN_DEFAULTS.loopResolutionMs),
    },
    sendLateness: open ? latenessOf(lateness, late, lateMs) : null,
    ...(trace !== undefined ? { originMs: t0, trace: trace.sort((a, b) => a.index - b.index) } : {}),
  };
}

function poolWaitOf(samples: readonly number[], overMs: number): NonNullable<LoadResult['poolWait']> {
  const s = summarize(samples);
  const n = (x: number): number => (Number.isFinite(x) ? x : 0);
  let over = 0;
  for (const w of samples) if (w > overMs) over++;
  return { p50: n(s.p50), p99: n(s.p99), max: n(s.max), over, sends: samples.length };
}

function latenessOf(samples: readonly number[], late: number, lateMs: number): NonNullable<LoadResult['sendLateness']> {
  const s = summarize(samples);
  const n = (x: number): number => (Number.isFinite(x) ? x : 0);
  return { p50: n(s.p50), p99: n(s.p99), max: n(s.max), late, sends: samples.length, lateMs };
}

async function main(argv: readonly string[]): Promise<number> {
  let parsed: ReturnType<typeof parseLoadgenArgs>;
  let specs: RequestSource;
  try {
    parsed = parseLoadgenArgs(argv);
    if (parsed === null) {
      process.stdout.write(LOADGEN_HELP);
      return 0;
    }
    let text: string;
    try {
      text = readFileSync(parsed.requestsFile, 'utf8');
    } catch {
      throw new InvalidInputError('--requests', 'a readable file', parsed.requestsFile);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new InvalidInputError('--requests', 'a file of JSON', parsed.requestsFile);
    }
    specs = checkSource(json);
  } catch (err) {
    process.stderr.write(`loadgen: ${err instanceof Error ? err.message : String(err)}\n(see --help)\n`);
    return 2;
  }
  const { config } = parsed;
  // Bounded in time whatever happens: past the schedule, the grace and a margin, give up loudly.
  const watchdog = setTimeout(
    () => {
      process.stderr.write('loadgen: did not finish within duration + grace + 10 s\n');
      process.exit(1);
    },
    config.durationMs + config.graceMs + 10_000,
  );
  watchdog.unref();
  const result = await runLoad(config, specs);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  return 0;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`loadgen: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
