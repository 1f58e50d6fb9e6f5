/**
 * The HTTP server: a `node:http` listener that runs the admission chain on the request line and
 * headers alone and writes refusals itself, then hands what it admits to fastify for routing and
 * body parsing. A one-off probe (serve-refusal.ts, in git history; its table is in docs/serve.md)
 * measured why: a refusal written here costs what plain node:http costs, one answered from a fastify
 * `onRequest` hook 1.12–1.18× that.
 */

import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { Registry } from 'prom-client';
import { levelName, type DbCalls, type TidalDb } from 'tidal-core';
import { STAGE, STAGE_CLOCK, STAGE_TIMES_ON, stageEnd, stageStart, stageTotals, type Stage } from 'tidal-load';
import { createAdmissionChain } from './admission/chain.js';
import { JSON_TYPE, errorJson, refusalBody, refusalHeaders, refusalSendsDate } from './admission/refusal.js';
import { isSharedStats } from './admission/shared-limits.js';
import type { AdmissionChain, AdmissionOptions, Clock, Refusal, ServeSample, Ticket } from './admission/types.js';
import { attachContext, connectionSignal, findContext, type RequestContext } from './context.js';
import { CLIENT_CLOSED } from './errors.js';
import type { KeyRing } from './keys.js';
import { createServeMetrics, createSharedDecisionMetric, type ServeMetrics } from './metrics.js';
import { createQueryPath, queryBodyLength } from './query-path.js';
import { Recorder } from './recorder.js';
import { setReplyHandlers } from './replies.js';
import { LEVEL_HEADER, registerRoutes, routeName } from './routes.js';

/**
 * The calls of the database the server makes: the methods a worker thread's handle has (tidal-core's
 * one table, `DbCalls`), plus `signal`, the load view and the closed flag. A `TidalDb` is one, and
 * so is the thread-local `ThreadDb` an HTTP acceptor thread has (its calls that cross to the
 * database's thread answer with a promise where `TidalDb` may answer at once).
 */
export type ServeDb = DbCalls & {
  signal: TidalDb['signal'];
  readonly load: TidalDb['load'];
  readonly closed: boolean;
  /** Absent on a handle that does not own the database (an acceptor thread's). */
  close?(): Promise<void>;
};

/**
 * An application's own routes, loaded into the server beside tidal's: a fastify plugin,
 * registered with `{ db }` (the server's database handle: in an acceptor thread, the thread-local
 * one). Its requests pass the admission chain as route `other`, like any path tidal does not know.
 */
export type RoutesPlugin = (app: FastifyInstance, options: { db: ServeDb }) => Promise<void> | void;

/** What the dashboard module gives the server: it answers `/dashboard` and its assets. */
export interface DashboardHandler {
  /** True when it answered the request; false sends it on to the routes (a 404). */
  handle(req: IncomingMessage, res: ServerResponse): boolean;
  close(): void;
}

/** Builds the dashboard from the server's sample source (`createDashboard` of `src/dashboard`). */
export type DashboardFactory = (deps: { sample: () => ServeSample }) => DashboardHandler;

/** Settings of {@link createServer}; everything but `db` is optional. */
export interface ServerOptions {
  /** An open database (open and warm: `/readyz` answers 200 until it closes or the server drains). */
  readonly db: ServeDb;
  /**
   * The admission chain: a chain (tests pass a fake), its settings (built with
   * `createAdmissionChain`), or `false` for none.
   * @default false
   */
  readonly admission?: AdmissionChain | AdmissionOptions | false;
  /** API keys; when given, every request but the exempt paths needs `Authorization: Bearer <key>`. */
  readonly keys?: KeyRing;
  /** A query's deadline when the request has no `x-tidal-timeout-ms` header; `0` for none. @default 10000 */
  readonly timeoutMs?: number;
  /** Largest request body, in bytes; a larger one is answered 413. @default 1048576 */
  readonly bodyLimitBytes?: number;
  /**
   * Served at `/metrics`. Open the database with `builder.metrics(registry)` on the same registry to
   * see tidal's own metrics beside the server's. @default a new Registry
   */
  readonly registry?: Registry;
  /** @default Date.now */
  readonly clock?: Clock;
  /** The dashboard at `/dashboard`; without it the path answers 404. */
  readonly dashboard?: DashboardFactory;
  /** Close the database when the server closes. @default false */
  readonly closeDb?: boolean;
  /**
   * `/readyz` answers 503 `TIDAL_SERVE_ANN_BUILDING` while the database answers vector searches
   * exactly (its ANN index is being built, `stats().vectorSearch === 'exact'`), so a load balancer
   * sends traffic only once the index is in use (`tidal serve --wait-for-ann`). @default false
   */
  readonly readyRequiresAnn?: boolean;
  /** Added to `/stats` as `fleet`: the shared limits' and the embedder's own counters. */
  readonly fleetStats?: () => Record<string, unknown>;
  /** Runs last when the server closes (the CLI closes its Redis and PostgreSQL connections here). */
  readonly onClose?: () => Promise<void>;
  /** Added to `/stats` as `acceptors`: what each acceptor thread reported. */
  readonly acceptorStats?: () => unknown;
  /** The acceptors' stage totals from their last reports (with `TIDAL_STAGE_TIMES=1`), summed into `/stats` `stages`. */
  readonly acceptorStages?: () => Iterable<Readonly<Record<Stage, number>>>;
  /** Each acceptor thread's requests in flight (the main thread's server when acceptors answer). */
  readonly acceptorsInFlight?: () => ReadonlyMap<number, number>;
  /** The application's own routes (see {@link RoutesPlugin}). */
  readonly routes?: RoutesPlugin;
  /**
   * Asked first for every exempt path (probes, `/metrics`, `/stats`, `/dashboard`): true when it
   * answered the request. An acceptor thread sends `/metrics`, `/stats` and the dashboard to the
   * main thread's server this way.
   */
  readonly exempt?: (req: IncomingMessage, res: ServerResponse, path: string) => boolean;
  /** Called with every answered request, after the server's own recorder (an acceptor reports them). */
  readonly onResponse?: (route: string, status: number, code: string | undefined, latencyMs: number, level: string | undefined) => void;
}

/** Filled-in defaults of {@link ServerOptions}. */
/**
 * `backlog` 4 096, not Node's 511: a burst of new connections that finds the accept queue full
 * has its SYNs dropped, and each client waits out a 1 s (then 3 s, 7 s) retransmission before it
 * can even be refused. Measured with `bench:serve` at 10× C: the kernel counted
 * hundreds of thousands of listen-queue overflows, and refusals reached their clients after 1.3 s
 * at p99 (docs/serve.md).
 */
export const SERVER_DEFAULTS = Object.freeze({ timeoutMs: 10_000, bodyLimitBytes: 1_048_576, backlog: 4096 });

export interface ListenOptions {
  /**
   * `SO_REUSEPORT`: several listeners (one per acceptor thread) share the port and the kernel
   * spreads connections over them. Node 22.12+ on Linux; see docs/serve.md.
   * @default false
   */
  readonly reusePort?: boolean;
}

export interface CloseOptions {
  /** How long in-flight requests may take to finish before their connections are cut. @default 10000 */
  readonly drainMs?: number;
}

/** A running (or not yet listening) tidal server. */
export interface TidalServer {
  /**
   * Starts listening; resolves with `http://host:port` (the port the OS gave for port 0).
   * `backlog`: connections the kernel queues before they are accepted (default
   * {@link SERVER_DEFAULTS}.backlog; the kernel caps it at `net.core.somaxconn`).
   */
  listen(port: number, host: string, backlog?: number, options?: ListenOptions): Promise<string>;
  /** The URL once listening. */
  readonly url: string | undefined;
  /** Admitted requests not yet answered. */
  readonly inFlight: number;
  /** False once draining or the database closed: what `/readyz` says. */
  readonly ready: boolean;
  readonly recorder: Recorder;
  readonly chain: AdmissionChain | undefined;
  /** Counts a request an acceptor thread answered (from its report) in the recorder and the metrics. */
  recordFrom(acceptor: number, route: string, status: number, code: string | undefined, latencyMs: number, level: string | undefined): void;
  /**
   * Stops accepting, answers new requests on open connections 503 (`/readyz` too), waits up to
   * `drainMs` for the in-flight ones, cuts what is left, then closes the database when `closeDb`.
   * Idempotent: every call returns the first call's promise.
   */
  close(options?: CloseOptions): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Paths never refused nor asked for a key: probes and scrapes must see the server as it is, and
 * `/stats` is what an operator (and the dashboard's poller) reads exactly when the server is
 * refusing, so a tenant over its quota must still get it.
 */
export function isExempt(path: string): boolean {
  return (
    path === '/healthz' ||
    path === '/readyz' ||
    path === '/metrics' ||
    path === '/stats' ||
    path === '/dashboard' ||
    path.startsWith('/dashboard/')
  );
}

const NO_ACCEPTORS: ReadonlyMap<number, number> = new Map();

/**
 * Writes a JSON answer of this module's own (refusals, 401): the headers as one flat list, which
 * `writeHead` copies as they are instead of walking an object (with the refusals' missing `Date`,
 * 0.82x the main thread per refusal: docs/serve.md, "The refusal path").
 */
function writeJson(res: ServerResponse, status: number, text: string, headers: string[]): void {
  headers.push('content-type', JSON_TYPE, 'content-length', String(Buffer.byteLength(text)));
  res.writeHead(status, headers);
  res.end(text);
}

/** A refusal, as the fastify plugin writes it too (`admission/refusal.ts`). */
function writeRefusal(res: ServerResponse, r: Refusal): void {
  res.sendDate = refusalSendsDate(r);
  writeJson(res, r.status, refusalBody(r), refusalHeaders(r));
}

/** One admitted request, from its ticket to its response's `'close'`. */
class Admitted implements RequestContext {
  readonly route: string;
  readonly tenant: string;
  code: string | undefined = undefined;
  /** Wall time it was admitted at, in the server's clock. */
  readonly start: number;
  readonly ticket: Ticket | undefined;
  readonly #socket: Socket;
  /** Set once its response closed (and the ticket was released). */
  closed = false;

  constructor(route: string, tenant: string, start: number, ticket: Ticket | undefined, socket: Socket) {
    this.route = route;
    this.tenant = tenant;
    this.start = start;
    this.ticket = ticket;
    this.#socket = socket;
  }

  signal(): AbortSignal {
    return connectionSignal(this.#socket);
  }
}

function checkWhole(name: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`options.${name} must be a whole number from ${min} to ${max}, got ${String(value)} (${typeof value})`);
  }
  return value;
}

/** Stage totals of several threads, added up, in ms. */
function sumStages(parts: Iterable<Readonly<Record<Stage, number>>>): Record<Stage, number> {
  const out = stageTotals();
  for (const k of Object.keys(out) as Stage[]) out[k] = 0;
  for (const p of parts) for (const k of Object.keys(out) as Stage[]) out[k] += p[k];
  return out;
}

/** With stage times on (tidal-load's stage-times.ts): the response's `end`, where its bytes are written, timed as the write. */
function timeWrite(res: ServerResponse): void {
  const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
  res.end = function (...args: unknown[]) {
    const t = stageStart();
    try {
      return end(...args);
    } finally {
      stageEnd(STAGE.write, t);
    }
  } as ServerResponse['end'];
}

/**
 * Builds a tidal server over an open database. Nothing listens until `listen()`.
 * @throws RangeError for an option out of range.
 */
export function createServer(options: ServerOptions): TidalServer {
  const db = options.db;
  const clock = options.clock ?? Date.now;
  const timeoutMs = checkWhole('timeoutMs', options.timeoutMs ?? SERVER_DEFAULTS.timeoutMs, 0, 2_147_483_647);
  const bodyLimit = checkWhole('bodyLimitBytes', options.bodyLimitBytes ?? SERVER_DEFAULTS.bodyLimitBytes, 1, 1 << 30);
  const admission = options.admission ?? false;
  const chain: AdmissionChain | undefined =
    admission === false ? undefined : 'admit' in admission ? admission : createAdmissionChain(admission, clock);
  const keys = options.keys;
  const registry = options.registry ?? new Registry();

  let inFlight = 0;
  let draining = false;
  let onIdle: (() => void) | undefined;
  let url: string | undefined;

  // The level from the load view (a read of two counters), not from stats(), which sorts every
  // latency window: the sample is taken every second for the dashboard and on each /stats.
  const recorder = new Recorder({
    clock,
    inFlight: () => {
      let n = inFlight;
      for (const v of (options.acceptorsInFlight?.() ?? NO_ACCEPTORS).values()) n += v;
      return n;
    },
    level: () => levelName(db.load.level),
    ...(options.acceptorsInFlight ? { acceptorsInFlight: options.acceptorsInFlight } : {}),
  });
  const metrics: ServeMetrics = createServeMetrics(registry, { stages: () => chain?.stats() ?? [], inFlight: () => inFlight });
  const dashboard = options.dashboard?.({ sample: () => recorder.sample() });
  if (chain?.stats().some(isSharedStats)) createSharedDecisionMetric(registry, chain);

  let route: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const app: FastifyInstance = Fastify({
    logger: false,
    bodyLimit,
    // The raw listener answers during a drain; fastify's own 503 would not have tidal's error shape.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    serverFactory: (handler) => {
      route = handler;
      return createHttpServer(listener);
    },
  });

  const queryPath = createQueryPath({ db, bodyLimit, defaultTimeoutMs: timeoutMs });
  const onResponse = options.onResponse;
  function finish(ctx: { route: string; code: string | undefined }, status: number, latencyMs: number, level?: string): void {
    recorder.record(ctx.route, status, ctx.code, latencyMs, level);
    onResponse?.(ctx.route, status, ctx.code, latencyMs, level);
    metrics.response(ctx.route, status);
    if ((status === 429 || status === 503) && ctx.code !== undefined) metrics.refused(ctx.code);
  }

  function listener(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    if (isExempt(path)) {
      if (options.exempt?.(req, res, path) === true) return;
      // Dashboard hook: `/dashboard` and everything under it goes to the dashboard module when one
      // is configured (options.dashboard); it is exempt like the probes, never refused.
      if (dashboard !== undefined && path.startsWith('/dashboard') && dashboard.handle(req, res)) return;
      route!(req, res);
      return;
    }
    const name = routeName(req.method ?? 'GET', path);
    if (draining) {
      res.setHeader('connection', 'close');
      writeJson(res, 503, errorJson('TIDAL_SERVE_DRAINING', 'the server is shutting down; retry on another instance'), [
        'retry-after',
        '1',
        'x-retry-after-ms',
        '1000',
      ]);
      finish({ route: name, code: 'TIDAL_SERVE_DRAINING' }, 503, 0);
      return;
    }
    let tenant = 'anonymous';
    let tier: 'free' | 'pro' = 'free';
    if (keys !== undefined) {
      const grant = keys.authorize(req.headers.authorization);
      if (grant === undefined) {
        const message =
          req.headers.authorization === undefined ? 'an API key is required: Authorization: Bearer <key>' : 'the API key is not valid';
        writeJson(res, 401, errorJson('TIDAL_SERVE_UNAUTHORIZED', message), ['www-authenticate', 'Bearer']);
        finish({ route: name, code: 'TIDAL_SERVE_UNAUTHORIZED' }, 401, 0);
        return;
      }
      tenant = grant.tenant;
      tier = grant.tier;
    }
    const start = clock();
    let ticket: Ticket | undefined;
    if (chain !== undefined) {
      const t = stageStart();
      const answer = chain.admit({ route: name, tenant, tier }, start);
      stageEnd(STAGE.admission, t);
      if (!answer.admitted) {
        writeRefusal(res, answer);
        finish({ route: name, code: answer.reason }, answer.status, 0);
        return;
      }
      ticket = answer;
      const headers = answer.headers;
      if (headers !== undefined) for (const k in headers) res.setHeader(k, headers[k]!);
    }
    inFlight++;
    attachContext(req, new Admitted(name, tenant, start, ticket, req.socket));
    res.on('close', onResponseClose);
    if (draining) res.setHeader('connection', 'close');
    if (STAGE_TIMES_ON) timeWrite(res);
    if (queryBodyLength(req, name, url, path, bodyLimit) > 0) queryPath(name as 'retrieve' | 'search', req, res);
    else route!(req, res);
  }

  // 'close' fires however the response ends: written in full, or the client went away first (then
  // `writableFinished` is false, and the connection's signal has aborted the query). The ticket is
  // released here, exactly once. One function for every response, which finds its request's
  // context, rather than a closure per request.
  function onResponseClose(this: ServerResponse): void {
    const ctx = findContext(this.req);
    if (!(ctx instanceof Admitted) || ctx.closed) return;
    ctx.closed = true;
    inFlight--;
    const latencyMs = clock() - ctx.start;
    const status = this.writableFinished ? this.statusCode : CLIENT_CLOSED;
    // A timeout, tidal's own 503 and a 500 say the server is congested; a client error, a quota
    // refusal and a client that went away say nothing about capacity.
    const t = stageStart();
    ctx.ticket?.release({ latencyMs, ok: status !== 500 && status !== 503 && status !== 504 });
    stageEnd(STAGE.admission, t);
    finish(ctx, status, latencyMs, this.getHeader(LEVEL_HEADER) as string | undefined);
    if (inFlight === 0) onIdle?.();
  }

  setReplyHandlers(app, bodyLimit);
  // The application's routes first, so a path of its own is not shadowed by tidal's 404.
  const routesReady: Promise<unknown> =
    options.routes === undefined ? Promise.resolve() : Promise.resolve(app.register(async (scope) => options.routes!(scope, { db })));
  registerRoutes(app, {
    db,
    defaultTimeoutMs: timeoutMs,
    ready: () => !draining && !db.closed,
    readyRequiresAnn: options.readyRequiresAnn ?? false,
    stats: async () => ({
      db: await db.stats(),
      chain: chain?.stats() ?? [],
      sample: recorder.sample(),
      server: { inFlight, draining },
      ...(options.fleetStats === undefined ? {} : { fleet: options.fleetStats() }),
      ...(options.acceptorStats === undefined ? {} : { acceptors: options.acceptorStats() }),
      ...(STAGE_TIMES_ON ? { stagesClock: STAGE_CLOCK, stages: sumStages([stageTotals(), ...(options.acceptorStages?.() ?? [])]) } : {}),
    }),
    registry,
  });

  let closing: Promise<void> | undefined;
  const server: TidalServer = {
    async listen(port, host, backlog = SERVER_DEFAULTS.backlog, listenOptions = {}) {
      checkWhole('backlog', backlog, 1, 65_535);
      await routesReady;
      if (listenOptions.reusePort === true) {
        // fastify's listen() has no reusePort: start its ready server ourselves.
        await app.ready();
        await new Promise<void>((resolve, reject) => {
          app.server.once('error', reject);
          app.server.listen({ port, host, backlog, reusePort: true } as Parameters<Server['listen']>[0], () => {
            app.server.off('error', reject);
            resolve();
          });
        });
      } else await app.listen({ port, host, backlog });
      const address = app.server.address() as AddressInfo;
      url = `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`;
      return url;
    },
    get url() {
      return url;
    },
    get inFlight() {
      return inFlight;
    },
    get ready() {
      return !draining && !db.closed;
    },
    recorder,
    chain,
    recordFrom(acceptor, route, status, code, latencyMs, level) {
      recorder.record(route, status, code, latencyMs, level, acceptor);
      metrics.response(route, status);
      if ((status === 429 || status === 503) && code !== undefined) metrics.refused(code);
    },
    close(closeOptions = {}) {
      closing ??= (async () => {
        draining = true;
        const drainMs = closeOptions.drainMs ?? 10_000;
        const http: Server = app.server;
        // fastify's close stops accepting and closes idle keep-alive connections; it resolves
        // once every connection has ended.
        const closed = app.close();
        if (inFlight > 0) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, drainMs);
            timer.unref();
            onIdle = () => {
              clearTimeout(timer);
              resolve();
            };
          });
        }
        http.closeAllConnections();
        await closed;
        dashboard?.close();
        if (options.closeDb === true) await db.close?.();
        await options.onClose?.();
      })();
      return closing;
    },
    [Symbol.asyncDispose]() {
      return server.close();
    },
  };
  return server;
}

/** Options of {@link startServer}: the server's, plus where to listen. */
export interface StartOptions extends ServerOptions {
  /** @default 7070 */
  readonly port?: number;
  /** @default '127.0.0.1' */
  readonly host?: string;
}

/** {@link createServer}, then `listen()`: resolves with the listening server. */
export async function startServer(options: StartOptions): Promise<TidalServer> {
  const server = createServer(options);
  await server.listen(options.port ?? 7070, options.host ?? '127.0.0.1');
  return server;
}
