/**
 * Thread-per-core `tidal serve`, the main thread's side: whether the platform allows it, the port
 * every acceptor shares, the settings each receives, and the main thread's own work (the admin
 * listener with `/metrics`, `/stats`, the dashboard and the probes; the acceptors' reports; the
 * drain on shutdown). The acceptor itself is acceptor.ts.
 */
import { createServer as createNetServer } from 'node:net';
import { BroadcastChannel } from 'node:worker_threads';
import { randomUUID } from 'node:crypto';
import type { Stage } from 'tidal-load';
import type { TidalServer } from '../server.js';
import { CONTROL, CONTROL_BYTES, channelNames, type AcceptorData, type AcceptorReport, type ToAcceptor } from './protocol.js';

/** The worker module every query worker loads when `tidal serve` runs acceptor threads. */
export const ACCEPTOR_MODULE = new URL('./acceptor.js', import.meta.url).href;

/** Whether this process can run acceptor threads on one port, and why not when it cannot. */
export type ReusePortSupport = { readonly ok: true } | { readonly ok: false; readonly why: string };

/**
 * Worker threads of one process can share a listening port only with `reusePort`, which Node
 * accepts from 22.12 and which Linux implements as `SO_REUSEPORT` with connections spread over the
 * listeners. On macOS and Windows the option does not spread connections (and on some versions
 * ends the server, nodejs/node#61018), so only Linux gets acceptor threads; a probe listen checks
 * the option really works here before anything relies on it (see {@link probePort}).
 */
export function reusePortSupport(version = process.versions.node, platform = process.platform): ReusePortSupport {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major < 22 || (major === 22 && minor < 12))
    return { ok: false, why: `Node ${version} has no reusePort for worker-thread listeners (it came in 22.12)` };
  if (platform !== 'linux') return { ok: false, why: `reusePort spreads connections over listeners on Linux only (this is ${platform})` };
  return { ok: true };
}

/**
 * The port the acceptors share: `port` itself, or for 0 one the OS picks now. Two listeners are
 * opened on it with `reusePort` and closed again, so a platform where the option fails says so
 * here, before the database opens.
 */
export function probePort(port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const a = createNetServer();
    a.once('error', reject);
    a.listen({ port, host, reusePort: true } as Parameters<typeof a.listen>[0], () => {
      const got = (a.address() as { port: number }).port;
      const b = createNetServer();
      b.once('error', (err) => a.close(() => reject(err)));
      // A second listener on the same port is what the acceptors will do: it must not fail.
      b.listen({ port: got, host, reusePort: true } as Parameters<typeof b.listen>[0], () => {
        b.close(() => a.close(() => resolve(got)));
      });
    });
  });
}

/** What {@link startAcceptors} needs besides the open database. */
export interface AcceptorsOptions {
  readonly data: AcceptorData;
  /** The main thread's server (admin listener): the acceptors' reports go to its recorder and metrics. */
  readonly admin: TidalServer;
  readonly adminPort: number;
  readonly log: (line: string) => void;
}

/** The acceptor threads once listening, as the shutdown handler sees them. */
export interface Acceptors {
  /** Requests the acceptors have admitted and not answered (from their last reports). */
  readonly inFlight: number;
  /** Each acceptor's requests in flight, by index (for the dashboard). */
  readonly inFlightByAcceptor: ReadonlyMap<number, number>;
  /** Their last reports: queries answered in their threads and sent to the database's. */
  readonly counts: ReadonlyMap<number, { threadId: number; local: number; forwarded: number; queued: number }>;
  /** Their stage totals from their last reports (with `TIDAL_STAGE_TIMES=1`). */
  readonly stages: ReadonlyMap<number, Readonly<Record<Stage, number>>>;
  /** Tells every acceptor to stop taking requests and drain; resolves when all have (or after `drainMs` + 5 s). */
  drain(drainMs: number): Promise<void>;
  close(): void;
}

/** The settings every acceptor receives (its part of the database's worker module). */
export function acceptorData(settings: Omit<AcceptorData, 'control' | 'channel'>): AcceptorData {
  return { ...settings, control: new SharedArrayBuffer(CONTROL_BYTES), channel: `tidal-serve-${randomUUID()}` };
}

/**
 * Opens the main thread's ends of the acceptors' channels. Call before the database opens (the
 * acceptors open theirs in their worker module's start, during the open), then {@link startAcceptors}.
 */
export function openChannels(data: AcceptorData): { up: BroadcastChannel; down: BroadcastChannel }[] {
  return Array.from({ length: data.acceptors }, (_, i) => {
    const names = channelNames(data.channel, i);
    const up = new BroadcastChannel(names.up);
    const down = new BroadcastChannel(names.down);
    up.unref();
    down.unref();
    return { up, down };
  });
}

/** Tells the acceptors to listen; resolves once every one does (rejects with the first failure). */
export async function startAcceptors(
  channels: { up: BroadcastChannel; down: BroadcastChannel }[],
  o: AcceptorsOptions,
): Promise<Acceptors> {
  Atomics.store(new Int32Array(o.data.control), CONTROL.adminPort, o.adminPort);
  const inFlight = new Map<number, number>();
  const counts = new Map<number, { threadId: number; local: number; forwarded: number; queued: number }>();
  const drained = new Set<number>();
  const stages = new Map<number, Readonly<Record<Stage, number>>>();
  let onDrained: (() => void) | undefined;
  const listening = channels.map(
    (ch, index) =>
      new Promise<number>((resolve, reject) => {
        ch.up.onmessage = (ev) => {
          const msg = (ev as MessageEvent).data as AcceptorReport;
          if (msg.op === 'listening') resolve(msg.threadId);
          else if (msg.op === 'failed') reject(new Error(`acceptor ${index} (thread ${msg.threadId}) could not listen: ${msg.message}`));
          else if (msg.op === 'report') {
            for (const [route, status, code, latencyMs, level] of msg.records)
              o.admin.recordFrom(index, route, status, code ?? undefined, latencyMs, level ?? undefined);
            inFlight.set(index, msg.inFlight);
            counts.set(index, { threadId: msg.threadId, local: msg.local, forwarded: msg.forwarded, queued: msg.queued });
            if (msg.stages !== undefined) stages.set(index, msg.stages);
          } else if (msg.op === 'drained') {
            drained.add(index);
            inFlight.set(index, 0);
            if (drained.size === channels.length) onDrained?.();
          }
        };
      }),
  );
  const post = (msg: ToAcceptor) => {
    for (const ch of channels) ch.down.postMessage(msg);
  };
  post({ op: 'listen' });
  const threads = await Promise.all(listening);
  for (let i = 0; i < threads.length; i++) inFlight.set(i, 0);
  o.log(`${threads.length} acceptor threads (${threads.map((t) => `thread ${t}`).join(', ')}) on port ${o.data.port} with reusePort`);
  return {
    get inFlight() {
      let n = 0;
      for (const v of inFlight.values()) n += v;
      return n;
    },
    inFlightByAcceptor: inFlight,
    counts,
    stages,
    async drain(drainMs: number) {
      if (drained.size === channels.length) return;
      const done = new Promise<void>((resolve) => {
        onDrained = resolve;
        const t = setTimeout(resolve, drainMs + 5_000);
        t.unref();
      });
      post({ op: 'drain', drainMs });
      await done;
    },
    close() {
      for (const ch of channels) {
        ch.up.close();
        ch.down.close();
      }
    },
  };
}
