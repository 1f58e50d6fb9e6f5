import type { ServeSample } from '../admission/types.js';

// Server-sent events framing (https://html.spec.whatwg.org/multipage/server-sent-events.html).
// JSON.stringify never emits a raw newline, so a sample always fits on one `data:` line.

/** One sample as an event; its `id` is the sample's time, so a reconnecting page resumes after it. */
export function sampleFrame(sample: ServeSample): string {
  return `id: ${sample.t}\ndata: ${JSON.stringify(sample)}\n\n`;
}

/** The first event of a stream: how to read what follows. */
export function configFrame(config: { intervalMs: number; historySeconds: number }): string {
  // `retry` tells EventSource how long to wait before it reconnects after a dropped stream.
  return `retry: 2000\nevent: config\ndata: ${JSON.stringify(config)}\n\n`;
}

/** A comment line: ignored by EventSource, but it proves the connection is alive. */
export const HEARTBEAT_FRAME = ': heartbeat\n\n';

/**
 * The last `historySeconds` of samples, already framed, so a connecting page's backlog costs one
 * join and no JSON work. Bounded by time (the clock) and by count (the interval), so a clock that
 * stands still cannot grow it either.
 */
export class SampleHistory {
  readonly #frames: { t: number; frame: string }[] = [];
  readonly #historyMs: number;
  readonly #maxFrames: number;

  constructor(historySeconds: number, intervalMs: number) {
    this.#historyMs = historySeconds * 1000;
    this.#maxFrames = Math.ceil(this.#historyMs / intervalMs) + 1;
  }

  get size(): number {
    return this.#frames.length;
  }

  push(t: number, frame: string, nowMs: number): void {
    this.#frames.push({ t, frame });
    if (this.#frames.length > this.#maxFrames) this.#frames.shift();
    this.#trim(nowMs);
  }

  /** The framed samples newer than `afterT` and within the history window, oldest first. */
  backlog(afterT: number, nowMs: number): string {
    this.#trim(nowMs);
    let out = '';
    for (const f of this.#frames) if (f.t > afterT) out += f.frame;
    return out;
  }

  #trim(nowMs: number): void {
    const oldest = nowMs - this.#historyMs;
    let drop = 0;
    while (drop < this.#frames.length && this.#frames[drop]!.t < oldest) drop++;
    if (drop > 0) this.#frames.splice(0, drop);
  }
}
