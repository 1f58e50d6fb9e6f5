import { InvalidInputError } from 'tidal-core';
import type { Clock, ServeSample } from '../admission/types.js';

/** Settings of the live dashboard (`/dashboard`). Only `sample` is required. */
export interface DashboardOptions {
  /** Reads the server's current second; called once per interval, on the main thread. */
  readonly sample: () => ServeSample;
  /**
   * How often a sample is taken and pushed to every open page.
   * @default 1000
   */
  readonly intervalMs?: number;
  /**
   * How much history a page that connects receives at once, so it draws the last minutes
   * immediately instead of starting empty.
   * @default 300
   */
  readonly historySeconds?: number;
  /**
   * The clock the history is trimmed by (the same one the samples' `t` comes from).
   * @default Date.now
   */
  readonly clock?: Clock;
  /**
   * Open event streams allowed at once; one more is refused with a 503.
   * @default 16
   */
  readonly maxClients?: number;
  /**
   * A comment line is written this often, so proxies and browsers see a live connection even
   * when sampling fails for a while.
   * @default 15000
   */
  readonly heartbeatMs?: number;
  /**
   * A page that has this many bytes unread in its socket is disconnected (it reconnects and gets
   * the backlog again), so a stalled tab cannot grow the server's memory.
   * @default 1048576
   */
  readonly maxBufferedBytes?: number;
}

export interface FilledDashboardOptions {
  readonly sample: () => ServeSample;
  readonly intervalMs: number;
  readonly historySeconds: number;
  readonly clock: Clock;
  readonly maxClients: number;
  readonly heartbeatMs: number;
  readonly maxBufferedBytes: number;
}

export const DASHBOARD_DEFAULTS = Object.freeze({
  intervalMs: 1000,
  // "The last minutes": five of them. At one sample a second that is a 300-point backlog of
  // ~300 bytes each (a framed sample with its level mix; ~470 with two acceptors), ~90 KB
  // (~140 KB) written once per page load.
  historySeconds: 300,
  // Each stream costs a socket and one small write per interval. A dashboard is for people, not
  // for fleets of scrapers (those use /metrics): a handful of open tabs per operator, with room.
  maxClients: 16,
  heartbeatMs: 15_000,
  // ~7 backlogs' worth even with acceptors: a page that has not read 1 MiB is more than half an
  // hour behind at ~470 B/s.
  maxBufferedBytes: 1_048_576,
} as const);

function positiveInteger(field: string, value: unknown, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw new InvalidInputError(field, `an integer from 1 to ${max}`, value);
  }
  return value;
}

/**
 * Fills in the defaults and checks every field.
 * @throws {@link InvalidInputError} naming the field and its value.
 */
export function resolveDashboardOptions(options: DashboardOptions): FilledDashboardOptions {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidInputError('options', 'a dashboard options object', options);
  }
  if (typeof options.sample !== 'function') {
    throw new InvalidInputError('options.sample', 'a function returning a ServeSample', options.sample);
  }
  if (options.clock !== undefined && typeof options.clock !== 'function') {
    throw new InvalidInputError('options.clock', 'a function returning milliseconds', options.clock);
  }
  const intervalMs = positiveInteger('options.intervalMs', options.intervalMs ?? DASHBOARD_DEFAULTS.intervalMs, 3_600_000);
  const historySeconds = positiveInteger('options.historySeconds', options.historySeconds ?? DASHBOARD_DEFAULTS.historySeconds, 86_400);
  return {
    sample: options.sample,
    intervalMs,
    historySeconds,
    clock: options.clock ?? Date.now,
    maxClients: positiveInteger('options.maxClients', options.maxClients ?? DASHBOARD_DEFAULTS.maxClients, 10_000),
    heartbeatMs: positiveInteger('options.heartbeatMs', options.heartbeatMs ?? DASHBOARD_DEFAULTS.heartbeatMs, 3_600_000),
    maxBufferedBytes: positiveInteger('options.maxBufferedBytes', options.maxBufferedBytes ?? DASHBOARD_DEFAULTS.maxBufferedBytes, 1 << 30),
  };
}
