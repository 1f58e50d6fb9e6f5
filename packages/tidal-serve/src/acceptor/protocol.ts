/**
 * What the main thread of `tidal serve` and its acceptor threads tell each other: the acceptor's
 * settings (its worker module data), a few cells of shared memory, and the messages on each
 * acceptor's pair of channels (`up`: acceptor → main; `down`: main → acceptor).
 */
import type { Stage } from 'tidal-load';
import type { SharedAdmissionState } from '../admission/shared-memory.js';
import type { AdmissionOptions } from '../admission/types.js';

/** Int32 cells of {@link AcceptorData.control}. */
export const CONTROL = Object.freeze({
  /** Each acceptor takes the next index (0, 1, ...) with one atomic add. */
  nextIndex: 0,
  /** The main thread's admin listener's port, for /metrics, /stats and the dashboard. */
  adminPort: 1,
});

/** Bytes of the control buffer. */
export const CONTROL_BYTES = 16;

/** An acceptor thread's settings (structured-cloned into each query worker). */
export interface AcceptorData {
  readonly port: number;
  readonly host: string;
  readonly backlog: number;
  /** Workers that accept HTTP; the others (index ≥ this) only run queries. */
  readonly acceptors: number;
  /** {@link CONTROL} cells, shared by the main thread and every acceptor. */
  readonly control: SharedArrayBuffer;
  /** The base name of the acceptors' channels (see {@link channelNames}). */
  readonly channel: string;
  readonly admission: AdmissionOptions | false;
  /** The chain's state in shared memory, made once on the main thread: every acceptor decides as one server. */
  readonly admissionState?: SharedAdmissionState;
  readonly keysFile?: string;
  readonly timeoutMs: number;
  readonly bodyLimitBytes: number;
  /** `--wait-for-ann`: `/readyz` answers 503 while vector searches are exact. */
  readonly readyRequiresAnn: boolean;
  /** A module whose default export is a fastify plugin of the application's routes (`--routes`). */
  readonly routes?: string;
}

/** One answered request: route, status, error code, latency (ms), degradation level. */
export type ResponseRecord = readonly [route: string, status: number, code: string | null, latencyMs: number, level: string | null];

export type AcceptorReport =
  | { readonly op: 'listening'; readonly index: number; readonly threadId: number }
  | { readonly op: 'failed'; readonly index: number; readonly threadId: number; readonly message: string }
  | {
      readonly op: 'report';
      readonly index: number;
      readonly threadId: number;
      readonly records: readonly ResponseRecord[];
      /** Requests admitted and not answered, now. */
      readonly inFlight: number;
      /** Queries taken and not run yet, now. */
      readonly queued: number;
      /** Queries answered in the thread, and sent to the database's thread, so far. */
      readonly local: number;
      readonly forwarded: number;
      /** The thread's stage totals in ms, with `TIDAL_STAGE_TIMES=1` (tidal-load's stage-times.ts). */
      readonly stages?: Readonly<Record<Stage, number>>;
    }
  | { readonly op: 'drained'; readonly index: number; readonly threadId: number };

/** `listen`: the database is loaded and the admin listener is up; `drain`: the server is shutting down. */
export type ToAcceptor = { readonly op: 'listen' } | { readonly op: 'drain'; readonly drainMs: number };

export function channelNames(base: string, index: number): { up: string; down: string } {
  return { up: `${base}:${index}:up`, down: `${base}:${index}:down` };
}
