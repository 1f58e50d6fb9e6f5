/**
 * `tidal serve` flags: parsed strictly (an unknown flag or a value it cannot read refuses to start,
 * never falls back), then mapped onto the server's options and the chain's `AdmissionOptions`.
 */

import { availableParallelism } from 'node:os';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { DEFAULT_THRESHOLDS, InvalidInputError, autoAdmissionLimit, querySlots } from 'tidal-core';
import type { AdmissionOptions, RateSpec, Tier } from './admission/types.js';
import { SERVER_DEFAULTS } from './server.js';

/** Every setting of `tidal serve`, filled in. */
export interface ServeConfig {
  readonly help: boolean;
  readonly path: string | undefined;
  readonly schema: string | undefined;
  readonly port: number;
  readonly host: string;
  /** `--backlog N`: connections the kernel queues before the server accepts them (capped by `net.core.somaxconn`). */
  readonly backlog: number;
  readonly demo: boolean;
  readonly demoItems: number;
  readonly workers: number | undefined;
  /** `--worker-nice auto|N`: the query workers' nice value (see {@link resolveWorkerNice}). */
  readonly workerNice: 'auto' | number;
  /** `--worker-young-generation-mb N`: the query workers' (and acceptors') young generation cap; undefined: the database's default. */
  readonly workerYoungGenerationMb: number | undefined;
  readonly inFlightCap: 'auto' | number;
  /** `--queue-wait-ms MS`: the rate bound's target wait (queries in flight ≤ measured rate × MS); 0 turns it off. */
  readonly queueWaitMs: number;
  readonly adaptive: boolean;
  /** `undefined`: the default (tenants on when keys are configured); `false`: `--tenant-rate off`. */
  readonly tenantRates: TenantRates | false | undefined;
  readonly periodQuota: number | undefined;
  readonly periodMs: number;
  readonly keys: string | undefined;
  readonly timeoutMs: number;
  readonly drainMs: number;
  readonly bodyLimitBytes: number;
  readonly admission: boolean;
  /** Off with `--no-parent-check`: the server keeps running when the process that started it exits (`nohup tidal serve &`). */
  readonly parentCheck: boolean;
  /** `--redis URL`: the tenant limiter and the period limit decide through this Redis, shared by every replica. */
  readonly redis: string | undefined;
  /** `--redis-timeout-ms MS`: a Redis command slower than this is decided locally (the fallback). */
  readonly redisTimeoutMs: number;
  /** `--replicate` (with `--redis`): signals, items and user state replicate between replicas through a Redis Stream on it. */
  readonly replicate: boolean;
  /** `--embedder URL`: the `/v1/embeddings` endpoint `search({ text, semantic: true })` embeds through. */
  readonly embedder: string | undefined;
  /** `--embedder-max-concurrency N`: the embedder's `max_concurrent_calls`, across replicas with `--pg`. */
  readonly embedderMaxConcurrency: number | undefined;
  /** `--pg URL`: the PostgreSQL that holds the embedder's concurrency slots for every replica. */
  readonly pg: string | undefined;
  /**
   * `--acceptors auto|main|N`: HTTP acceptor threads. `main`: the main thread accepts (the only
   * way on Node 20); N: N query workers each listen on the port (reusePort). auto: one per query
   * worker where the platform allows it (see {@link resolveAcceptors}), else main.
   */
  readonly acceptors: 'auto' | 'main' | number;
  /** `--admin-port N`: the main thread's own listener (probes, metrics, dashboard) beside acceptor threads; 0 for any free port. */
  readonly adminPort: number | undefined;
  /** `--routes FILE`: a module whose default export is a fastify plugin of the application's routes. */
  readonly routes: string | undefined;
  /** `--wait-for-ann`: `/readyz` reports ready only once vector searches use the ANN index (not exact search during its build). */
  readonly waitForAnn: boolean;
}

/** `--tenant-rate free=100,pro=1000,acme=50:100`: per tier, or per named tenant. */
export interface TenantRates {
  readonly tiers: Partial<Record<Tier, RateSpec>>;
  readonly overrides: Record<string, RateSpec>;
}

/**
 * `--worker-nice auto` on a machine with 2 cores or more. The HTTP thread parses, admits, refuses
 * and answers every request, and the query workers compete with it for the same cores: on 2 cores
 * under bench:serve's load the thread spent 20–31 % of its time runnable but not running (its
 * schedstat) with the workers at its own priority, and 7–18 % at nice 10, where the 10× C phase
 * served 2.5× as much with half the refusal p99 (docs/serve.md). At nice 10 a worker's CFS
 * weight is 110 against the thread's 1 024, so the thread gets a core when it wants one, and the
 * workers still take every core it leaves idle. On one core the workers would get only what the
 * HTTP thread leaves, so `auto` stays 0 there.
 */
export const WORKER_NICE_AUTO = 10;

/** The nice value `--worker-nice auto` stands for on a machine with `cores` cores. */
export function resolveWorkerNice(setting: 'auto' | number, cores: number): number {
  if (setting !== 'auto') return setting;
  return cores >= 2 ? WORKER_NICE_AUTO : 0;
}

export const CONFIG_DEFAULTS = Object.freeze({
  port: 7070,
  host: '127.0.0.1',
  backlog: SERVER_DEFAULTS.backlog,
  demoItems: 20_000,
  periodMs: 60_000,
  timeoutMs: SERVER_DEFAULTS.timeoutMs,
  drainMs: 10_000,
  /** A script round trip on a LAN is 0.2-1 ms: 50 is far past a healthy one. */
  redisTimeoutMs: 50,
  bodyLimitBytes: SERVER_DEFAULTS.bodyLimitBytes,
  /**
   * The rate bound's target wait, the 3× C p99 budget: on a quiet machine with a client pool of
   * 1 024 connections (`bench:serve --pool 1024`, the server pinned to one core) it served 80 %
   * of 3× C against the cap alone's 69 % (the personalized mix: 75 % against 50 %) and held the
   * admitted p99 at 10× C to 671 ms against 1 031 (docs/serve.md, "The rate bound").
   */
  queueWaitMs: 250,
});

/**
 * The flags, for `node:util.parseArgs` and the help text alike. `-h` is `--help`; `--no-adaptive`
 * `--no-admission` and `--no-parent-check` are flags of their own (not negations parseArgs would read).
 */
const FLAGS = {
  path: { type: 'string', help: 'DIR        the database directory (created if missing); required unless --demo' },
  schema: {
    type: 'string',
    help: 'FILE     the schema as JSON (a SchemaDefinition); required at the first start on --path (stored there), optional later',
  },
  port: { type: 'string', help: `N          port to listen on, 0 for any free one (default ${CONFIG_DEFAULTS.port})` },
  host: { type: 'string', help: `HOST       address to listen on (default ${CONFIG_DEFAULTS.host}); beyond loopback --keys is required` },
  backlog: {
    type: 'string',
    help: `N       connections queued before they are accepted, 1 to 65535; the kernel caps it at net.core.somaxconn (default ${SERVER_DEFAULTS.backlog})`,
  },
  demo: { type: 'boolean', help: '             serve an ephemeral database loaded with the synthetic corpus' },
  'demo-items': { type: 'string', help: `N    items of the demo corpus (default ${CONFIG_DEFAULTS.demoItems})` },
  workers: { type: 'string', help: 'N       query worker threads, 1 to 64 (default: the number of cores)' },
  'worker-nice': {
    type: 'string',
    help: `auto|N  the query workers' nice value, 0 to 19: above 0 the HTTP thread gets a core first (default auto: ${WORKER_NICE_AUTO} on 2 or more cores, else 0)`,
  },
  'worker-young-generation-mb': {
    type: 'string',
    help: "N  the query workers' (and acceptor threads') V8 young generation in MiB, 0 (V8's own limit) to 1024: larger collects less often, for up to that much memory more a thread (default: the database's, 16)",
  },
  'in-flight-cap': { type: 'string', help: 'auto|N  requests in flight at most; 0 disables the cap (default auto)' },
  'queue-wait-ms': {
    type: 'string',
    help: `MS  queries in flight at most the measured service rate × MS, within the cap; 0: the cap alone (default ${CONFIG_DEFAULTS.queueWaitMs})`,
  },
  'no-adaptive': { type: 'boolean', help: '      no AIMD limit below the cap' },
  'tenant-rate': { type: 'string', help: 'SPEC  per-tenant token buckets: free=100,pro=1000,acme=50:100 (rate/s[:burst]), or off' },
  'period-quota': { type: 'string', help: 'N  requests per tenant per period (default: no period limit)' },
  'period-ms': { type: 'string', help: `MS    the period of --period-quota (default ${CONFIG_DEFAULTS.periodMs})` },
  keys: { type: 'string', help: 'FILE       API keys as JSON: { "<key>": { "tenant": "acme", "tier": "pro" } }' },
  'timeout-ms': {
    type: 'string',
    help: `MS   a query's deadline without an x-tidal-timeout-ms header, 0 for none (default ${CONFIG_DEFAULTS.timeoutMs})`,
  },
  'drain-ms': {
    type: 'string',
    help: `MS     on SIGTERM/SIGINT, how long in-flight requests may take (default ${CONFIG_DEFAULTS.drainMs})`,
  },
  'body-limit': { type: 'string', help: `BYTES  largest request body (default ${CONFIG_DEFAULTS.bodyLimitBytes})` },
  redis: {
    type: 'string',
    help: 'URL        share the tenant and period limits with every replica through this Redis (redis://host:port)',
  },
  'redis-timeout-ms': {
    type: 'string',
    help: `MS  a Redis command slower than this is decided on the local fallback (default ${CONFIG_DEFAULTS.redisTimeoutMs}; 1 to 60000)`,
  },
  replicate: {
    type: 'boolean',
    help: "         with --redis: replicate signals, items and user state to every replica through the stream tidal:replication (each replica's --path is its own)",
  },
  embedder: { type: 'string', help: 'URL     an embedding endpoint (POST URL/v1/embeddings) for search with semantic: true' },
  'embedder-max-concurrency': { type: 'string', help: `N  the embedder's max_concurrent_calls (1 to 32), across replicas with --pg` },
  pg: { type: 'string', help: "URL           PostgreSQL holding the embedder's concurrency slots for every replica (postgres://...)" },
  acceptors: {
    type: 'string',
    help: 'auto|main|N  HTTP acceptor threads: N query workers each listen on the port (reusePort, Node 22.12+ on Linux); main: the main thread accepts (default auto: one per query worker where possible, else main)',
  },
  'admin-port': {
    type: 'string',
    help: "N   with acceptor threads, the main thread's own listener for probes, /metrics, /stats and the dashboard (default: any free port, printed on stderr)",
  },
  routes: {
    type: 'string',
    help: 'FILE     a module whose default export is a fastify plugin of your own routes, loaded into every acceptor with { db }',
  },
  'no-admission': { type: 'boolean', help: "     no admission chain (tidal's own load management stays)" },
  'wait-for-ann': {
    type: 'boolean',
    help: '     /readyz answers 503 TIDAL_SERVE_ANN_BUILDING while the ANN index is being built (vector searches exact), ready once it is in use',
  },
  'no-parent-check': {
    type: 'boolean',
    help: '  keep running when the process that started it exits (by default it drains as on SIGTERM: npx does not pass SIGTERM on)',
  },
  help: { type: 'boolean', short: 'h', help: '             this text' },
} as const satisfies Record<string, NonNullable<ParseArgsConfig['options']>[string] & { readonly help: string }>;

/** `tidal serve --help`. */
export const HELP = [
  'usage: tidal serve --path DIR [--schema FILE] [flags]',
  '       tidal serve --demo [flags]',
  '',
  'flags:',
  ...Object.entries(FLAGS).map(([name, f]) => `  --${name} ${f.help}`),
  '',
  'Prints "tidal serve listening on http://HOST:PORT" once it accepts requests. Exit codes: 0 after a',
  'clean shutdown, 2 for a bad flag or value, 1 when it fails to start otherwise.',
].join('\n');

function whole(flag: string, text: string, min: number, max: number): number {
  const n = /^[0-9]+$/.test(text) ? Number(text) : Number.NaN;
  if (!(Number.isSafeInteger(n) && n >= min && n <= max)) throw new InvalidInputError(flag, `a whole number from ${min} to ${max}`, text);
  return n;
}

function rateSpec(flag: string, text: string): RateSpec {
  const m = /^([0-9]+(?:\.[0-9]+)?)(?::([0-9]+))?$/.exec(text);
  const rate = m ? Number(m[1]) : Number.NaN;
  if (!(rate > 0 && Number.isFinite(rate))) throw new InvalidInputError(flag, 'rate/s[:burst], a positive rate and a whole burst', text);
  const burst = m![2] === undefined ? Math.max(1, Math.ceil(rate)) : Number(m![2]);
  if (!(Number.isSafeInteger(burst) && burst >= 1)) throw new InvalidInputError(flag, 'a burst of at least 1', text);
  return { ratePerSecond: rate, burst };
}

/** Parses `--tenant-rate`: comma-separated `name=rate[:burst]`, a name being a tier or a tenant. */
export function parseTenantRates(text: string): TenantRates | false {
  if (text === 'off') return false;
  const tiers: Partial<Record<Tier, RateSpec>> = {};
  const overrides: Record<string, RateSpec> = {};
  for (const part of text.split(',')) {
    const eq = part.indexOf('=');
    const name = eq > 0 ? part.slice(0, eq) : '';
    if (name === '')
      throw new InvalidInputError('--tenant-rate', 'off or comma-separated name=rate[:burst] (name: free, pro or a tenant)', text);
    const spec = rateSpec(`--tenant-rate ${name}`, part.slice(eq + 1));
    if (name === 'free' || name === 'pro') tiers[name] = spec;
    else overrides[name] = spec;
  }
  return { tiers, overrides };
}

/** What parseArgs read: a string per flag with a value, `true` per flag without, absent when not given. */
type FlagValues = { -readonly [K in keyof typeof FLAGS]?: (typeof FLAGS)[K]['type'] extends 'string' ? string : boolean };

/**
 * Reads `argv` with `node:util.parseArgs`, strictly: an unknown flag, a flag without its value, a
 * value given to a flag that takes none, or a bare argument is refused.
 * @throws InvalidInputError naming the flag (parseArgs says which in its message alone).
 */
function readFlags(argv: readonly string[]): FlagValues {
  try {
    return parseArgs({ args: [...argv], options: FLAGS, strict: true, allowPositionals: false }).values;
  } catch (err) {
    if (!String((err as { code?: unknown }).code).startsWith('ERR_PARSE_ARGS_')) throw err;
    throw refusedFlag(argv) ?? new InvalidInputError('flags', 'what tidal serve --help lists', argv.join(' '));
  }
}

/** The first argument a strict parse refuses, as the error that names it. */
function refusedFlag(argv: readonly string[]): InvalidInputError | undefined {
  const { tokens } = parseArgs({ args: [...argv], options: FLAGS, strict: false, allowPositionals: true, tokens: true });
  for (const t of tokens) {
    if (t.kind === 'positional') return new InvalidInputError('argument', 'a flag (see tidal serve --help)', t.value);
    if (t.kind !== 'option') continue;
    const flag = Object.hasOwn(FLAGS, t.name) ? FLAGS[t.name as keyof typeof FLAGS] : undefined;
    if (flag === undefined) return new InvalidInputError('flag', 'one that tidal serve --help lists', t.rawName);
    const name = `--${t.name}`;
    if (flag.type === 'boolean' && t.value !== undefined) return new InvalidInputError(name, 'given without a value', t.value);
    if (flag.type === 'string' && t.value === undefined) return new InvalidInputError(name, 'followed by a value', undefined);
    // parseArgs reads `--port --demo` as --port missing its value; a value starting with - goes as --port=-1.
    if (flag.type === 'string' && !t.inlineValue && t.value!.startsWith('-'))
      return new InvalidInputError(name, `followed by a value (write ${name}=VALUE for one that starts with -)`, t.value);
  }
  return undefined;
}

/**
 * Parses the flags after `tidal serve`.
 * @throws InvalidInputError naming the flag: unknown, missing its value, or a value it cannot read.
 */
export function parseServeArgs(argv: readonly string[]): ServeConfig {
  const raw = readFlags(argv);
  const str = (name: keyof typeof FLAGS): string | undefined => {
    const v = raw[name];
    return typeof v === 'string' ? v : undefined;
  };
  const bool = (name: keyof typeof FLAGS): boolean => raw[name] === true;

  const demo = bool('demo');
  const path = str('path');
  const schema = str('schema');
  const help = bool('help');
  if (!help) {
    if (demo && (path !== undefined || schema !== undefined)) {
      throw new InvalidInputError(
        path !== undefined ? '--path' : '--schema',
        'left out with --demo (the demo serves an ephemeral database of its own schema)',
        path ?? schema,
      );
    }
    if (!demo && path === undefined) throw new InvalidInputError('--path', 'given (or use --demo)', undefined);
    if (path === '') throw new InvalidInputError('--path', 'a non-empty directory', path);
  }
  if (!demo && raw['demo-items'] !== undefined) throw new InvalidInputError('--demo-items', 'given only with --demo', str('demo-items'));
  const cap = str('in-flight-cap') ?? 'auto';
  const host = str('host') ?? CONFIG_DEFAULTS.host;
  if (host === '') throw new InvalidInputError('--host', 'an address', host);
  const quota = str('period-quota');
  if (quota === undefined && raw['period-ms'] !== undefined)
    throw new InvalidInputError('--period-ms', 'given only with --period-quota', str('period-ms'));
  const rates = str('tenant-rate');
  const redis = str('redis');
  if (redis !== undefined && !/^rediss?:\/\/[^\s]+$/.test(redis))
    throw new InvalidInputError('--redis', 'a redis:// or rediss:// URL', redis);
  if (bool('replicate') && redis === undefined)
    throw new InvalidInputError('--replicate', 'given with --redis (the Redis its stream is on)', true);
  if (bool('replicate') && demo)
    throw new InvalidInputError('--replicate', 'given without --demo (every replica would load the demo corpus and replicate it)', true);
  const embedder = str('embedder');
  if (embedder !== undefined && !/^https?:\/\/[^\s]+$/.test(embedder))
    throw new InvalidInputError('--embedder', 'an http:// or https:// URL', embedder);
  const pg = str('pg');
  if (pg !== undefined && !/^postgres(ql)?:\/\/[^\s]+$/.test(pg))
    throw new InvalidInputError('--pg', 'a postgres:// or postgresql:// URL', pg);
  const maxConcurrency = str('embedder-max-concurrency');
  if (embedder === undefined && maxConcurrency !== undefined)
    throw new InvalidInputError('--embedder-max-concurrency', 'given only with --embedder', maxConcurrency);
  if (embedder === undefined && pg !== undefined)
    throw new InvalidInputError('--pg', "given only with --embedder (it holds the embedder's slots)", pg);
  if (pg !== undefined && maxConcurrency === undefined)
    throw new InvalidInputError('--pg', 'given with --embedder-max-concurrency (the limit it holds)', pg);
  return {
    help,
    path,
    schema,
    port: str('port') === undefined ? CONFIG_DEFAULTS.port : whole('--port', str('port')!, 0, 65_535),
    host,
    backlog: str('backlog') === undefined ? CONFIG_DEFAULTS.backlog : whole('--backlog', str('backlog')!, 1, 65_535),
    demo,
    demoItems: str('demo-items') === undefined ? CONFIG_DEFAULTS.demoItems : whole('--demo-items', str('demo-items')!, 1, 10_000_000),
    workers: str('workers') === undefined ? undefined : whole('--workers', str('workers')!, 1, 64),
    workerNice: (str('worker-nice') ?? 'auto') === 'auto' ? 'auto' : whole('--worker-nice', str('worker-nice')!, 0, 19),
    workerYoungGenerationMb:
      str('worker-young-generation-mb') === undefined
        ? undefined
        : whole('--worker-young-generation-mb', str('worker-young-generation-mb')!, 0, 1024),
    inFlightCap: cap === 'auto' ? 'auto' : whole('--in-flight-cap', cap, 0, 2 ** 30),
    queueWaitMs:
      str('queue-wait-ms') === undefined ? CONFIG_DEFAULTS.queueWaitMs : whole('--queue-wait-ms', str('queue-wait-ms')!, 0, 600_000),
    adaptive: !bool('no-adaptive'),
    tenantRates: rates === undefined ? undefined : parseTenantRates(rates),
    periodQuota: quota === undefined ? undefined : whole('--period-quota', quota, 1, 2 ** 40),
    periodMs: str('period-ms') === undefined ? CONFIG_DEFAULTS.periodMs : whole('--period-ms', str('period-ms')!, 1, 2 ** 40),
    keys: str('keys'),
    timeoutMs: str('timeout-ms') === undefined ? CONFIG_DEFAULTS.timeoutMs : whole('--timeout-ms', str('timeout-ms')!, 0, 2_147_483_647),
    drainMs: str('drain-ms') === undefined ? CONFIG_DEFAULTS.drainMs : whole('--drain-ms', str('drain-ms')!, 0, 2_147_483_647),
    bodyLimitBytes:
      str('body-limit') === undefined ? CONFIG_DEFAULTS.bodyLimitBytes : whole('--body-limit', str('body-limit')!, 1, 2 ** 30),
    admission: !bool('no-admission'),
    parentCheck: !bool('no-parent-check'),
    redis,
    redisTimeoutMs:
      str('redis-timeout-ms') === undefined
        ? CONFIG_DEFAULTS.redisTimeoutMs
        : whole('--redis-timeout-ms', str('redis-timeout-ms')!, 1, 60_000),
    replicate: bool('replicate'),
    embedder,
    embedderMaxConcurrency: maxConcurrency === undefined ? undefined : whole('--embedder-max-concurrency', maxConcurrency, 1, 32),
    pg,
    acceptors: parseAcceptors(str('acceptors') ?? 'auto'),
    adminPort: str('admin-port') === undefined ? undefined : whole('--admin-port', str('admin-port')!, 0, 65_535),
    routes: str('routes'),
    waitForAnn: bool('wait-for-ann'),
  };
}

function parseAcceptors(text: string): ServeConfig['acceptors'] {
  if (text === 'auto' || text === 'main') return text;
  return whole('--acceptors', text, 1, 64);
}

/** How `tidal serve` accepts HTTP: in N acceptor threads, or in the main thread (and why). */
export type AcceptorPlan = { readonly threads: number } | { readonly threads: 0; readonly why: string };

/**
 * The acceptor threads `--acceptors` asks for on this platform. auto: one per query worker where
 * reusePort works, else the main thread; N: N threads (at most the workers), and a clear error
 * where the platform cannot; `--redis` and `--embedder` keep the main thread, whose Redis and
 * embedder clients the acceptor threads would not have.
 */
export function resolveAcceptors(
  config: Pick<ServeConfig, 'acceptors' | 'redis' | 'embedder'>,
  workers: number,
  support: { ok: true } | { ok: false; why: string },
): AcceptorPlan {
  const { acceptors } = config;
  if (acceptors === 'main') return { threads: 0, why: '--acceptors main' };
  const shared = config.redis !== undefined ? '--redis' : config.embedder !== undefined ? '--embedder' : undefined;
  if (acceptors === 'auto') {
    if (shared !== undefined) return { threads: 0, why: `${shared} keeps its clients on the main thread` };
    return support.ok ? { threads: workers } : { threads: 0, why: support.why };
  }
  if (shared !== undefined)
    throw new InvalidInputError('--acceptors', `main or auto with ${shared} (its clients live on the main thread)`, acceptors);
  if (!support.ok) throw new InvalidInputError('--acceptors', `main or auto here: ${support.why}`, acceptors);
  if (acceptors > workers)
    throw new InvalidInputError('--acceptors', `at most the query workers (${workers}): each acceptor is a query worker`, acceptors);
  return { threads: acceptors };
}

/** True for an address that only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$/.test(host);
}

/** What the chain's automatic figures are derived from. */
export interface PoolShape {
  /** Query worker threads. */
  readonly workers: number;
  /** The database's own admission cap (`db.load.admissionLimit`; 0 when off). */
  readonly admissionLimit: number;
  /** @default os.availableParallelism() */
  readonly cores?: number;
  /** The in-flight count from which the database serves its cheapest level (`db.load.thresholds.noDiversity`). @default 128 */
  readonly noDiversityAt?: number;
}

/**
 * `--in-flight-cap auto`. By Little's law the requests in the server at once are L = X × R
 * (throughput × time each spends inside):
 * - queries: the database already bounds them. Its admission cap (`autoAdmissionLimit`:
 *   noDiversity + 192 × workers, 512 on 2 workers, its arithmetic beside it in tidal-core) holds a
 *   3× C burst's backlog and bounds the wait at 10× C; of them the query pool's slots
 *   (`querySlots(workers)`, 8 on 2 workers) are on a worker and the rest queue. Admitting more
 *   HTTP queries than that only buys refusals tidal writes anyway, after paying for the body. With the database's cap off, its auto value is used all the same.
 * - writes: one is in flight for about one group-commit window (maxDelayMs 2 ms + the commit,
 *   ≈ 4 ms); at 16 000 write requests/s per core L = 16 000 × 0.004 = 64 per core.
 * So auto = the database's cap + 64 × cores: 640 with 2 workers on 2 cores.
 */
export function autoInFlightCap(pool: PoolShape): number {
  const cores = pool.cores ?? availableParallelism();
  return queryBound(pool) + 64 * cores;
}

function queryBound(pool: PoolShape): number {
  return pool.admissionLimit > 0
    ? pool.admissionLimit
    : autoAdmissionLimit({ ...DEFAULT_THRESHOLDS, noDiversity: pool.noDiversityAt ?? DEFAULT_THRESHOLDS.noDiversity }, pool.workers);
}

/**
 * The rate bound's floor above the adaptive floor, per worker: the bound counts a query from its
 * request line to its response, the database only while it is inside. Held at the adaptive floor
 * (136) at 10× C, the database counted 115–136 and served 29–49 % of the answers at NoDiversity; at
 * 200, 86 %.
 */
const RATE_FLOOR_SLACK_PER_WORKER = 32;

/**
 * Maps the flags onto the chain's settings:
 * - the cap: `--in-flight-cap` (auto: {@link autoInFlightCap});
 * - the rate bound under it (unless `--queue-wait-ms 0` or no cap), on the query routes: at most
 *   the measured completion rate × `--queue-wait-ms` (250 ms, the 3× C p99 budget) in flight, so
 *   at 10× C the admitted queue stays ≈ 250 ms long and the client's connections turn over; its
 *   floor is the adaptive limit's, for the same reason, + {@link RATE_FLOOR_SLACK_PER_WORKER};
 * - adaptive (unless `--no-adaptive`), on the query routes only (writes have the write path's
 *   backpressure): floor = the in-flight count from which the database serves its cheapest
 *   level (noDiversity, 128) + the query pool's slots (`querySlots`). Below that the limit would
 *   hold the database under its degradation thresholds, so the heaviest load would be served at
 *   Full, the dearest level, exactly when it must be cheapest (measured: with a floor of 8, 10× C
 *   ran 25 % of its answers at Full and goodput fell to 235/s against 391/s with the chain off).
 *   Starting at the cap, congestion above 250 ms (the 3× C p99 budget), windows of 250 ms, × 0.9
 *   on congestion;
 * - tenants: on when keys are configured or `--tenant-rate` says so (without keys every request is
 *   `anonymous`: one bucket would only be a second, blunter global limit), up to 10 000 tenants;
 * - permits: retrieve and search each up to 3/4 of the database's query bound, so a flood of one
 *   query kind leaves room for the other; writes have no pool (the write queue has backpressure);
 * - period: only with `--period-quota`, per tenant, aligned to multiples of `--period-ms`.
 */
export function admissionOptions(config: ServeConfig, pool: PoolShape, hasKeys: boolean): AdmissionOptions {
  const cap = config.inFlightCap === 'auto' ? autoInFlightCap(pool) : config.inFlightCap;
  const floor = Math.max(1, (pool.noDiversityAt ?? 128) + querySlots(pool.workers));
  const rateFloor = floor + RATE_FLOOR_SLACK_PER_WORKER * pool.workers;
  const permits = Math.max(1, Math.ceil((queryBound(pool) * 3) / 4));
  const rates = config.tenantRates;
  const tenantsOn = rates === undefined ? hasKeys : rates !== false;
  return {
    inFlightCap: cap,
    rateBound: cap > 0 && config.queueWaitMs > 0 ? { targetWaitMs: config.queueWaitMs, floor: Math.min(rateFloor, cap) } : false,
    adaptive: config.adaptive
      ? { floor: cap > 0 ? Math.min(floor, cap) : floor, targetLatencyMs: 250, windowMs: 250, backoff: 0.9 }
      : false,
    tenants: tenantsOn ? { tiers: rates ? rates.tiers : {}, overrides: rates ? rates.overrides : {}, maxTenants: 10_000 } : false,
    permits: { retrieve: permits, search: permits },
    period: config.periodQuota === undefined ? false : { quota: config.periodQuota, periodMs: config.periodMs, align: true, key: 'tenant' },
  };
}
