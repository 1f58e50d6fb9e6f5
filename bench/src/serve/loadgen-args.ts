/**
 * The load generator's command line (loadgen.ts): its defaults, `--help`, and the checks of its
 * flags and of the `--requests` file.
 */
import { InvalidInputError } from 'tidal-core';
import { checkPersonalSpec } from './personal-mix.js';
import type { LoadgenConfig, RequestSource, RequestSpec } from './loadgen.js';
export const LOADGEN_DEFAULTS = Object.freeze({
  // Open loop: the client must never be what limits concurrency, or queueing moves from the server
  // into this process. 512 connections cover 10 000 requests/s at 50 ms each (Little: 500 in flight).
  openConnections: 512,
  timeoutMs: 10_000,
  graceMs: 5_000,
  seed: 1,
  maxOutstanding: 100_000,
  /** An hour: a soak's longest run. */
  maxDurationMs: 3_600_000,
  maxRate: 1_000_000,
  maxConnections: 10_000,
  client: 'raw',
  /** A send more than 5 ms behind its schedule is late (`sendLateness.late`). */
  lateMs: 5,
  /** `monitorEventLoopDelay`'s timer period: its delays include it, `loopLagP99Ms` does not. */
  loopResolutionMs: 10,
});

/** `--help`. */
export const LOADGEN_HELP = `tidal load generator: drives a server on loopback and prints one JSON line.

  --url URL             base URL, loopback only (http://127.0.0.1:PORT)          required
  --requests FILE       JSON array of { method, path, body, headers, type? }, picked
                        uniformly; or a drawn mix { "draw": "personal", ... }
                        (personal-mix.ts), one request drawn per arrival          required
  --rate R              open loop: Poisson arrivals at R requests/s          (one of --rate
  --closed N            closed loop: N concurrent request loops               and --closed)
  --duration-ms MS      how long to offer load (≤ ${LOADGEN_DEFAULTS.maxDurationMs})                   required
  --connections N       the pool: at most N keep-alive connections; an arrival that
                        finds them all busy waits for one (default: 512 open, N closed)
  --timeout-ms MS       per-request headers/body timeout (default ${LOADGEN_DEFAULTS.timeoutMs})
  --grace-ms MS         time for the last requests after the schedule ends (default ${LOADGEN_DEFAULTS.graceMs})
  --seed N              arrival and mix seed (default ${LOADGEN_DEFAULTS.seed})
  --max-outstanding N   open loop: drop arrivals past N outstanding (default ${LOADGEN_DEFAULTS.maxOutstanding})
  --count-header NAME   count the values of this response header on 2xx
  --client raw|undici   raw: node:net keep-alive sockets, requests serialized once;
                        undici: Pool.request (default ${LOADGEN_DEFAULTS.client})
  --preconnect N        raw: open N connections (≤ --connections) before the schedule
                        starts, as a load balancer's pool holds them (default 0)
  --late-ms MS          open loop: a send more than MS after its schedule is late
                        (default ${LOADGEN_DEFAULTS.lateMs})
  --window-ms MS        also report the results per window of MS of the schedule
  --help                this text
`;

function integerFlag(flag: string, raw: string | undefined, min: number, max: number): number {
  const n = raw !== undefined && /^-?\d+$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new InvalidInputError(flag, `a whole number from ${min} to ${max}`, raw);
  return n;
}

function numberFlag(flag: string, raw: string | undefined, max: number): number {
  const n = raw !== undefined && raw.trim() !== '' ? Number(raw) : Number.NaN;
  if (!Number.isFinite(n) || n <= 0 || n > max) throw new InvalidInputError(flag, `a number > 0 and ≤ ${max}`, raw);
  return n;
}

/** Refuses anything but an http URL on a loopback address: this tool floods what it is pointed at. */
export function checkLoopbackUrl(raw: unknown): URL {
  let url: URL;
  try {
    url = new URL(String(raw));
  } catch {
    throw new InvalidInputError('--url', 'an http URL', raw);
  }
  const host = url.hostname;
  const loopback = host === 'localhost' || host === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
  if (url.protocol !== 'http:' || !loopback) {
    throw new InvalidInputError('--url', 'an http URL on a loopback address (127.0.0.0/8, [::1], localhost)', raw);
  }
  if (url.search !== '' || url.hash !== '') throw new InvalidInputError('--url', 'a base URL without query or fragment', raw);
  return url;
}

/** Parses the command line. `--help` gives `null`. */
export function parseLoadgenArgs(argv: readonly string[]): { config: LoadgenConfig; requestsFile: string } | null {
  const flags = new Map<string, string>();
  const known = new Set([
    '--url',
    '--requests',
    '--rate',
    '--closed',
    '--duration-ms',
    '--connections',
    '--timeout-ms',
    '--grace-ms',
    '--seed',
    '--max-outstanding',
    '--count-header',
    '--client',
    '--preconnect',
    '--late-ms',
    '--window-ms',
  ]);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') return null;
    const eq = arg.indexOf('=');
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    if (!known.has(name)) throw new InvalidInputError('argument', `one of ${[...known].join(', ')}, --help`, arg);
    const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (value === undefined) throw new InvalidInputError(name, 'followed by a value', undefined);
    if (flags.has(name)) throw new InvalidInputError(name, 'given once', value);
    flags.set(name, value);
  }
  const url = checkLoopbackUrl(flags.get('--url'));
  const requestsFile = flags.get('--requests');
  if (requestsFile === undefined || requestsFile === '') throw new InvalidInputError('--requests', 'a JSON file of requests', requestsFile);
  const rate = flags.get('--rate');
  const closed = flags.get('--closed');
  if ((rate === undefined) === (closed === undefined))
    throw new InvalidInputError('--rate/--closed', 'exactly one of the two', rate ?? closed);
  const mode =
    rate !== undefined
      ? ({ kind: 'open', ratePerSecond: numberFlag('--rate', rate, LOADGEN_DEFAULTS.maxRate) } as const)
      : ({ kind: 'closed', concurrency: integerFlag('--closed', closed, 1, LOADGEN_DEFAULTS.maxConnections) } as const);
  const connections = flags.has('--connections')
    ? integerFlag('--connections', flags.get('--connections'), 1, LOADGEN_DEFAULTS.maxConnections)
    : mode.kind === 'open'
      ? LOADGEN_DEFAULTS.openConnections
      : mode.concurrency;
  const client = flags.get('--client') ?? LOADGEN_DEFAULTS.client;
  if (client !== 'raw' && client !== 'undici') throw new InvalidInputError('--client', 'raw or undici', client);
  const countHeader = flags.get('--count-header') ?? null;
  if (countHeader !== null && !/^[A-Za-z0-9-]+$/.test(countHeader))
    throw new InvalidInputError('--count-header', 'a header name', countHeader);
  const preconnect = flags.has('--preconnect') ? integerFlag('--preconnect', flags.get('--preconnect'), 0, connections) : 0;
  if (preconnect > 0 && client !== 'raw') throw new InvalidInputError('--preconnect', 'given with --client raw', preconnect);
  return {
    requestsFile,
    config: {
      url: url.href,
      client,
      mode,
      durationMs: integerFlag('--duration-ms', flags.get('--duration-ms'), 1, LOADGEN_DEFAULTS.maxDurationMs),
      connections,
      timeoutMs: flags.has('--timeout-ms')
        ? integerFlag('--timeout-ms', flags.get('--timeout-ms'), 1, 600_000)
        : LOADGEN_DEFAULTS.timeoutMs,
      graceMs: flags.has('--grace-ms') ? integerFlag('--grace-ms', flags.get('--grace-ms'), 0, 600_000) : LOADGEN_DEFAULTS.graceMs,
      seed: flags.has('--seed') ? integerFlag('--seed', flags.get('--seed'), 0, 2 ** 32 - 1) : LOADGEN_DEFAULTS.seed,
      maxOutstanding: flags.has('--max-outstanding')
        ? integerFlag('--max-outstanding', flags.get('--max-outstanding'), 1, 10_000_000)
        : LOADGEN_DEFAULTS.maxOutstanding,
      countHeader: countHeader?.toLowerCase() ?? null,
      preconnect,
      lateMs: flags.has('--late-ms') ? numberFlag('--late-ms', flags.get('--late-ms'), 60_000) : LOADGEN_DEFAULTS.lateMs,
      ...(flags.has('--window-ms')
        ? { windowMs: integerFlag('--window-ms', flags.get('--window-ms'), 1, LOADGEN_DEFAULTS.maxDurationMs) }
        : {}),
    },
  };
}

/** Validates a request mix (the parsed JSON file). */
export function checkRequests(value: unknown, field = '--requests'): RequestSpec[] {
  if (!Array.isArray(value) || value.length === 0) throw new InvalidInputError(field, 'a non-empty JSON array of requests', value);
  return value.map((r: unknown, i) => {
    const at = `${field}[${i}]`;
    if (typeof r !== 'object' || r === null) throw new InvalidInputError(at, 'an object { method, path, body, headers }', r);
    const { method, path, headers } = r as Record<string, unknown>;
    if (method !== undefined && (typeof method !== 'string' || !/^[A-Z]+$/.test(method)))
      throw new InvalidInputError(`${at}.method`, 'an upper-case HTTP method', method);
    if (typeof path !== 'string' || !path.startsWith('/')) throw new InvalidInputError(`${at}.path`, 'a path starting with /', path);
    if (headers !== undefined) {
      if (typeof headers !== 'object' || headers === null || Array.isArray(headers))
        throw new InvalidInputError(`${at}.headers`, 'an object of strings', headers);
      for (const [k, v] of Object.entries(headers))
        if (typeof v !== 'string') throw new InvalidInputError(`${at}.headers.${k}`, 'a string', v);
    }
    return r as RequestSpec;
  });
}

/** Checks the parsed `--requests` file: a list of requests, or a drawn mix. */
export function checkSource(value: unknown, field = '--requests'): RequestSource {
  if (typeof value === 'object' && value !== null && !Array.isArray(value) && (value as { draw?: unknown }).draw !== undefined) {
    const draw = (value as { draw?: unknown }).draw;
    if (draw !== 'personal') throw new InvalidInputError(`${field}.draw`, "'personal'", draw);
    return checkPersonalSpec(value, field);
  }
  return checkRequests(value, field);
}
