import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { CapacityError, ClosedError, InvalidInputError, type TidalError } from 'tidal-core';
import { EVENTS_PATH, PAGE_PATH, loadAssets, type Asset } from './assets.js';
import { HEARTBEAT_FRAME, SampleHistory, configFrame, sampleFrame } from './events.js';
import { resolveDashboardOptions, type DashboardOptions } from './options.js';

/** Counters of a dashboard, for tests and `/stats`. */
export interface DashboardStats {
  /** Event streams open now. */
  readonly clients: number;
  /** Samples held for the backlog. */
  readonly samples: number;
  /** Streams refused because `maxClients` were open. */
  readonly refused: number;
  /** Streams cut because the page stopped reading (`maxBufferedBytes`). */
  readonly dropped: number;
  /** Intervals whose `sample()` threw; that interval sends nothing. */
  readonly sampleErrors: number;
}

/** The live dashboard: a request handler for `/dashboard`, its assets and its event stream. */
export interface Dashboard extends Disposable {
  /**
   * Answers `GET /dashboard`, `/dashboard/assets/*` and `/dashboard/events` and returns true;
   * returns false, writing nothing, for any other path.
   */
  handle(req: IncomingMessage, res: ServerResponse): boolean;
  /** Stops sampling and ends every open stream. Idempotent. */
  close(): void;
  stats(): DashboardStats;
}

// Everything the page loads comes from this server: no CDN, no inline script or style, no frames.
const SECURITY_HEADERS: OutgoingHttpHeaders = Object.freeze({
  'content-security-policy': "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; object-src 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
});

/** Writes a refusal as the server writes every error: `{ code, message, ...fields }`, no stack. */
function sendError(
  res: ServerResponse,
  status: number,
  err: TidalError,
  fields: Record<string, unknown>,
  extra: OutgoingHttpHeaders = {},
): void {
  const text = JSON.stringify({ code: err.code, message: err.message, ...fields });
  res.writeHead(status, {
    ...SECURITY_HEADERS,
    'content-type': 'application/json; charset=utf-8',
    'cache-control': 'no-store',
    'content-length': Buffer.byteLength(text),
    ...extra,
  });
  res.end(text);
}

function sendAsset(req: IncomingMessage, res: ServerResponse, asset: Asset): void {
  const headers: OutgoingHttpHeaders = {
    ...SECURITY_HEADERS,
    'content-type': asset.contentType,
    // Revalidate every time: a cheap 304 keeps an upgraded server's page in step with its events.
    'cache-control': 'no-cache',
    etag: asset.etag,
  };
  if (req.headers['if-none-match'] === asset.etag) {
    res.writeHead(304, headers);
    res.end();
    return;
  }
  res.writeHead(200, { ...headers, 'content-length': asset.body.length });
  res.end(req.method === 'HEAD' ? undefined : asset.body);
}

/**
 * Builds the live dashboard. It samples the server every `intervalMs` from the moment it is
 * created (so a page opened later still gets the last minutes), and pushes each sample to every
 * open page as a server-sent event. The page, its script and the chart library (uPlot, from
 * node_modules) are read once, here; a missing file throws now rather than on the first visit.
 *
 * The handler does not run the admission chain: the server must route these paths past it (a
 * dashboard that is refused under load shows nothing exactly when it is needed).
 *
 * @throws {@link InvalidInputError} for a bad option.
 */
export function createDashboard(options: DashboardOptions): Dashboard {
  const o = resolveDashboardOptions(options);
  const assets = loadAssets();
  const history = new SampleHistory(o.historySeconds, o.intervalMs);
  const config = configFrame({ intervalMs: o.intervalMs, historySeconds: o.historySeconds });
  const clients = new Set<ServerResponse>();
  let heartbeat: NodeJS.Timeout | undefined;
  let closed = false;
  let refused = 0;
  let dropped = 0;
  let sampleErrors = 0;

  const write = (res: ServerResponse, frame: string): void => {
    if (res.writableLength > o.maxBufferedBytes) {
      // The page stopped reading; cutting it frees the buffer, and EventSource reconnects.
      dropped++;
      remove(res);
      res.destroy();
      return;
    }
    res.write(frame);
  };

  const remove = (res: ServerResponse): void => {
    if (!clients.delete(res)) return;
    if (clients.size === 0 && heartbeat !== undefined) {
      clearInterval(heartbeat);
      heartbeat = undefined;
    }
  };

  const sampler = setInterval(() => {
    let frame: string;
    let t: number;
    try {
      const sample = o.sample();
      t = sample.t;
      frame = sampleFrame(sample);
    } catch {
      // A failing recorder must not take the server down with it; the gap shows on the page.
      sampleErrors++;
      return;
    }
    history.push(t, frame, o.clock());
    for (const res of clients) write(res, frame);
  }, o.intervalMs);
  sampler.unref();

  const openStream = (req: IncomingMessage, res: ServerResponse): void => {
    if (closed) {
      // close() runs when the server shuts down, with the database.
      const err = new ClosedError('stream dashboard events');
      sendError(res, 503, err, { operation: err.operation });
      return;
    }
    if (clients.size >= o.maxClients) {
      refused++;
      const err = new CapacityError('dashboard event streams', o.maxClients, 'close a dashboard page and reload, or raise maxClients');
      sendError(res, 503, err, { resource: err.resource, capacity: err.capacity });
      return;
    }
    res.writeHead(200, {
      ...SECURITY_HEADERS,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      // Tells nginx-style proxies not to hold the stream back in a buffer.
      'x-accel-buffering': 'no',
    });
    // A reconnecting page says which sample it saw last; it gets only the ones after it.
    const last = Number(req.headers['last-event-id']);
    res.write(config + history.backlog(Number.isFinite(last) ? last : -Infinity, o.clock()));
    clients.add(res);
    res.once('close', () => remove(res));
    if (heartbeat === undefined) {
      heartbeat = setInterval(() => {
        for (const c of clients) write(c, HEARTBEAT_FRAME);
      }, o.heartbeatMs);
      heartbeat.unref();
    }
  };

  const close = (): void => {
    if (closed) return;
    closed = true;
    clearInterval(sampler);
    for (const res of [...clients]) {
      remove(res);
      res.end();
    }
  };

  return {
    handle(req: IncomingMessage, res: ServerResponse): boolean {
      const url = req.url ?? '';
      const q = url.indexOf('?');
      const path = q < 0 ? url : url.slice(0, q);
      const isEvents = path === EVENTS_PATH;
      const asset = assets.get(path === `${PAGE_PATH}/` ? PAGE_PATH : path);
      if (!isEvents && asset === undefined) return false;
      const allowed = isEvents ? 'GET' : 'GET, HEAD';
      if (req.method !== 'GET' && (isEvents || req.method !== 'HEAD')) {
        const err = new InvalidInputError('method', `${isEvents ? 'GET' : 'GET or HEAD'} for ${path}`, req.method);
        sendError(res, 405, err, { field: err.field, value: err.value }, { allow: allowed });
      } else if (isEvents) {
        openStream(req, res);
      } else {
        sendAsset(req, res, asset!);
      }
      return true;
    },
    close,
    [Symbol.dispose]: close,
    stats(): DashboardStats {
      return { clients: clients.size, samples: history.size, refused, dropped, sampleErrors };
    },
  };
}
