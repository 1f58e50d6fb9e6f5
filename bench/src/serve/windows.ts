/**
 * The load generator's results cut into windows of its schedule (`--window-ms`): each request
 * counts in the window its SCHEDULED time falls in, so a stall shows in the minute whose arrivals
 * it delayed, whenever their answers came. No clock here: the generator adds each request's
 * outcome as it ends, and the windows are summarized once the run is over.
 */
import { InvalidInputError } from 'tidal-core';
import { summarize } from '../harness/index.js';

/** One request's outcome, in ms since the run started. */
export interface WindowSample {
  readonly scheduledMs: number;
  readonly endMs: number;
  /** `0`: no response (connection error, timeout). */
  readonly status: number;
  /** The counted header's value on a 2xx response (the degradation level), if any. */
  readonly counted?: string | undefined;
  /** The request's `type` in the mix, or `(none)`. */
  readonly type?: string;
}

/** Latency percentiles in ms; `null` when the window had no such response. */
export interface WindowLatency {
  readonly n: number;
  readonly p50: number | null;
  readonly p99: number | null;
  readonly max: number | null;
}

/** What one window of the schedule got. */
export interface LoadWindow {
  /** The window's start, in ms of the schedule. */
  readonly startMs: number;
  /** Requests scheduled in it that were sent (arrivals dropped past `maxOutstanding` are not). */
  readonly sent: number;
  readonly ok: number;
  /** 429 and 503 answers. */
  readonly refused: number;
  /** Other non-2xx answers. */
  readonly failed: number;
  /** No answer. */
  readonly errors: number;
  /** Requests still unanswered when the run ended (abandoned after the grace period). */
  readonly unanswered: number;
  /** From the scheduled time: 2xx answers. */
  readonly okLatency: WindowLatency;
  /** From the scheduled time: 429 and 503 answers. */
  readonly refusedLatency: WindowLatency;
  /** 2xx answers by the counted header's value (`(none)` without it). */
  readonly counted: Record<string, number>;
  /** 2xx answers by request type: writes and reads apart. */
  readonly okByType: Record<string, number>;
}

function latencyOf(samples: readonly number[]): WindowLatency {
  if (samples.length === 0) return { n: 0, p50: null, p99: null, max: null };
  const s = summarize(samples);
  return { n: s.n, p50: s.p50, p99: s.p99, max: s.max };
}

interface Open {
  sent: number;
  ok: number[];
  refused: number[];
  failed: number;
  errors: number;
  counted: Record<string, number>;
  okByType: Record<string, number>;
}

/** Adds requests to the window of their scheduled time; `windows()` summarizes them. */
export class WindowAccumulator {
  readonly #windowMs: number;
  readonly #open: Open[] = [];

  constructor(windowMs: number) {
    if (!Number.isFinite(windowMs) || windowMs <= 0) throw new InvalidInputError('windowMs', 'a number of ms > 0', windowMs);
    this.#windowMs = windowMs;
  }

  #at(scheduledMs: number): Open {
    const i = Math.max(0, Math.floor(scheduledMs / this.#windowMs));
    for (let k = this.#open.length; k <= i; k++)
      this.#open.push({ sent: 0, ok: [], refused: [], failed: 0, errors: 0, counted: {}, okByType: {} });
    return this.#open[i]!;
  }

  /** A request handed to the client (counted as unanswered until `add` sees its end). */
  sent(scheduledMs: number): void {
    this.#at(scheduledMs).sent++;
  }

  /** A request's end. */
  add(s: WindowSample): void {
    const w = this.#at(s.scheduledMs);
    const latency = s.endMs - s.scheduledMs;
    if (s.status === 0) w.errors++;
    else if (s.status >= 200 && s.status < 300) {
      w.ok.push(latency);
      const level = s.counted ?? '(none)';
      w.counted[level] = (w.counted[level] ?? 0) + 1;
      const type = s.type ?? '(none)';
      w.okByType[type] = (w.okByType[type] ?? 0) + 1;
    } else if (s.status === 429 || s.status === 503) w.refused.push(latency);
    else w.failed++;
  }

  /** Every window from the schedule's start to the last one a request fell in. */
  windows(): LoadWindow[] {
    return this.#open.map((w, i) => ({
      startMs: i * this.#windowMs,
      sent: w.sent,
      ok: w.ok.length,
      refused: w.refused.length,
      failed: w.failed,
      errors: w.errors,
      unanswered: Math.max(0, w.sent - w.ok.length - w.refused.length - w.failed - w.errors),
      okLatency: latencyOf(w.ok),
      refusedLatency: latencyOf(w.refused),
      counted: w.counted,
      okByType: w.okByType,
    }));
  }
}
