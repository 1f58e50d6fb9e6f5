/**
 * An HTTP acceptor: `tidal serve`'s server in a query worker thread (loaded as the database's
 * worker module, see `TidalDbBuilder.workerModule`). Every acceptor listens on the one port with
 * `reusePort`, so the kernel spreads connections over the threads; each answers the reads it
 * receives in its own thread (the thread-local `ThreadDb`), decides admission from state in shared
 * memory, and sends writes to the database's thread, batched per turn of its event loop.
 *
 * The main thread (acceptors.ts) keeps the writer, the metrics, the dashboard and an admin
 * listener; an acceptor sends `/metrics`, `/stats` and `/dashboard` there, and reports what it
 * answered every {@link REPORT_INTERVAL_MS}.
 */
import { request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { BroadcastChannel, threadId } from 'node:worker_threads';
import type { ThreadDb } from 'tidal-core';
import { STAGE_TIMES_ON, stageTotals } from 'tidal-load';
import { createAdmissionChain } from '../admission/chain.js';
import { KeyRing } from '../keys.js';
import { createServer, type RoutesPlugin, type TidalServer } from '../server.js';
import { CONTROL, channelNames, type AcceptorData, type AcceptorReport, type ResponseRecord, type ToAcceptor } from './protocol.js';

/** How often an acceptor tells the main thread what it answered (its dashboard and metrics). */
const REPORT_INTERVAL_MS = 100;

let server: TidalServer | undefined;
let up: BroadcastChannel | undefined;
let down: BroadcastChannel | undefined;
let flushReport: (() => void) | undefined;

/** Sends `/metrics`, `/stats` and the dashboard to the main thread's admin listener, as they are. */
function proxy(adminPort: number, host: string, req: IncomingMessage, res: ServerResponse): void {
  const upstream = httpRequest({ host, port: adminPort, method: req.method, path: req.url, headers: req.headers }, (answer) => {
    res.writeHead(answer.statusCode ?? 502, answer.headers);
    answer.pipe(res);
  });
  upstream.on('error', (err) => {
    if (res.headersSent) {
      res.destroy(err);
      return;
    }
    const text = JSON.stringify({ code: 'TIDAL_SERVE_INTERNAL', message: `the main thread did not answer: ${err.message}` });
    res.writeHead(502, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  });
  req.pipe(upstream);
}

async function loadRoutes(url: string): Promise<RoutesPlugin> {
  const mod = (await import(url)) as { default?: unknown };
  if (typeof mod.default !== 'function')
    throw new TypeError(`the routes module ${url} has no default export that is a fastify plugin function`);
  return mod.default as RoutesPlugin;
}

export async function start(db: ThreadDb, data: AcceptorData): Promise<void> {
  const control = new Int32Array(data.control);
  const index = Atomics.add(control, CONTROL.nextIndex, 1);
  // Workers beyond the acceptor count only run queries.
  if (index >= data.acceptors) return;
  const names = channelNames(data.channel, index);
  up = new BroadcastChannel(names.up);
  down = new BroadcastChannel(names.down);
  const send = (msg: AcceptorReport) => up?.postMessage(msg);

  let records: ResponseRecord[] = [];
  let timer: NodeJS.Timeout | undefined;
  flushReport = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    send({
      op: 'report',
      index,
      threadId,
      records,
      inFlight: server?.inFlight ?? 0,
      queued: db.queued,
      local: db.counts.local,
      forwarded: db.counts.forwarded,
      ...(STAGE_TIMES_ON ? { stages: stageTotals() } : {}),
    });
    records = [];
  };
  const onResponse = (route: string, status: number, code: string | undefined, latencyMs: number, level: string | undefined) => {
    records.push([route, status, code ?? null, latencyMs, level ?? null]);
    if (timer === undefined) {
      timer = setTimeout(flushReport!, REPORT_INTERVAL_MS);
      timer.unref();
    }
  };

  const routes = data.routes === undefined ? undefined : await loadRoutes(data.routes);
  server = createServer({
    db,
    admission:
      data.admission === false
        ? false
        : createAdmissionChain(data.admission, Date.now, data.admissionState === undefined ? {} : { shared: data.admissionState }),
    ...(data.keysFile === undefined ? {} : { keys: KeyRing.fromFile(data.keysFile) }),
    timeoutMs: data.timeoutMs,
    bodyLimitBytes: data.bodyLimitBytes,
    readyRequiresAnn: data.readyRequiresAnn,
    exempt: (req, res, path) => {
      if (path === '/healthz' || path === '/readyz') return false;
      proxy(Atomics.load(control, CONTROL.adminPort), data.host, req, res);
      return true;
    },
    onResponse,
    ...(routes === undefined ? {} : { routes }),
  });

  const listen = async () => {
    try {
      await server!.listen(data.port, data.host, data.backlog, { reusePort: true });
      send({ op: 'listening', index, threadId });
    } catch (err) {
      send({ op: 'failed', index, threadId, message: (err as Error)?.message ?? String(err) });
    }
  };
  // start() returns at once, so the database's open() completes; the acceptor listens when the
  // main thread says (the database is loaded and the admin listener is up).
  down.onmessage = (ev) => {
    const msg = (ev as MessageEvent).data as ToAcceptor;
    if (msg.op === 'listen') void listen();
    else if (msg.op === 'drain') {
      void server!.close({ drainMs: msg.drainMs }).then(() => {
        flushReport?.();
        send({ op: 'drained', index, threadId });
      });
    }
  };
}

/** The database is closing: stop taking requests (what a drain left), then close the channels. */
export async function stop(): Promise<void> {
  await server?.close({ drainMs: 0 });
  flushReport?.();
  up?.close();
  down?.close();
}
