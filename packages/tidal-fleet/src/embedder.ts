import {
  AbortedError,
  DependencyUnavailableError,
  InvalidInputError,
  SlotTimeoutError,
  checkSlotLimit,
  type SlotLease,
  type SlotSource,
} from 'tidal-load';
import { Breaker, type BreakerState } from './breaker.js';

/**
 * The bulkhead's default size, by Little's law: calls in flight = call rate × call latency. A replica
 * admitting ≈ 500 searches/s with text, one embedding call each, at an embedder p99 of ≈ 40 ms holds
 * 500 × 1 × 0.040 = 20 calls in flight; × 1.5 headroom for bursts = 30, rounded to 32. Size it below
 * what the embedder itself takes (its `max_concurrent_calls`, held across replicas by the slots).
 */
export const DEFAULT_MAX_IN_FLIGHT = 32;

/** Options of {@link EmbedderClient}. */
export interface EmbedderOptions {
  /** The embedder's base URL; requests go to `${url}/v1/embeddings`. */
  url: string;
  /** Sent as `model` in the request. @default undefined (omitted) */
  model?: string;
  /** Name used in errors and for the slots. @default 'embedder' */
  name?: string;
  /** The bulkhead: calls in flight at once from this replica, past which a call is refused at once. @default {@link DEFAULT_MAX_IN_FLIGHT} */
  maxInFlight?: number;
  /** A call's deadline when the caller gives none, in milliseconds from the call. @default 2_000 */
  timeoutMs?: number;
  /** Attempts per call, first one included: 1 to 3. @default 3 */
  maxAttempts?: number;
  /** Full-jitter backoff: the wait before retry k is uniform in [0, min(maxDelayMs, baseDelayMs × 2^k)). @default 25 */
  baseDelayMs?: number;
  /** @default 500 */
  maxDelayMs?: number;
  /** Retries allowed per call on average, over time: each call earns this fraction of a retry. @default 0.1 */
  retryBudgetRatio?: number;
  /** The most retries saved up (also the budget at start). @default 10 */
  retryBudgetMax?: number;
  /**
   * The breaker in front of the upstream: after `failureThreshold` slow or failed calls in a row it
   * opens, and every call is refused at once (`embedder_open`, nothing sent) for `openMs`; then one
   * call probes, and a good answer closes it. A call is slow when it runs out of its deadline, or
   * answers after more than `slowCallMs` (its vector is still used); failed when it answers 429 or
   * a 5xx, cannot be reached, or answers what is not embeddings. Being shed by this replica's own
   * bulkhead, a caller that left, or a request the upstream refused as bad (another 4xx) counts for
   * nothing.
   */
  breaker?: EmbedderBreakerOptions;
  /** The upstream's `max_concurrent_calls`, held across replicas by `slots.source`. */
  slots?: { source: SlotSource; maxConcurrentCalls: number };
  /** @default globalThis.fetch */
  fetch?: typeof fetch;
  /** @default Math.random */
  random?: () => number;
  /** @default Date.now */
  now?: () => number;
}

/** Options of {@link EmbedderOptions.breaker}. */
export interface EmbedderBreakerOptions {
  /** Slow or failed calls in a row that open the breaker, 1 to 1000. @default 3 */
  failureThreshold?: number;
  /**
   * How long an open breaker refuses every call before one probes, in milliseconds. A probe into a
   * slow upstream costs its caller one deadline: one such search per `openMs`, the others answered
   * at once from BM25 alone.
   * @default 5_000
   */
  openMs?: number;
  /**
   * A call answered after more than this many milliseconds counts as slow. 1 s is 25× the ≈ 40 ms
   * p99 the bulkhead is sized for: far past a healthy call, and still short of a search's half deadline.
   * @default 1_000
   */
  slowCallMs?: number;
}

export const EMBEDDER_BREAKER_DEFAULTS = Object.freeze({ failureThreshold: 3, openMs: 5_000, slowCallMs: 1_000 });

export interface EmbedOptions {
  signal?: AbortSignal;
  /** Absolute, on the client's clock. @default now + timeoutMs */
  deadlineMs?: number;
}

/**
 * What {@link EmbedderClient.tryEmbed} answers: the vector, or why there is none, for a caller that
 * degrades (hybrid search answers from BM25 alone and reports the reason on its result).
 */
export type EmbedAttempt =
  | { readonly vector: Float32Array; readonly degradation: null }
  | {
      readonly vector: null;
      readonly degradation: 'embedder_shed' | 'embedder_open' | 'embedder_timeout' | 'embedder_failed';
      readonly error: DependencyUnavailableError;
    };

export interface EmbedderStats {
  calls: number;
  /** Refused at once by the bulkhead. */
  shed: number;
  /** Retries sent. */
  retries: number;
  /** Retries the budget refused. */
  retriesDenied: number;
  failures: number;
  inFlight: number;
  /** The breaker: `closed`, `open` (every call refused at once) or `halfOpen` (one call probing). */
  breaker: BreakerState;
  /** Times the breaker opened. */
  breakerOpened: number;
  /** Calls the open breaker refused (nothing sent). */
  breakerRefused: number;
}

/** A call the open breaker refused: `shed` (nothing sent), told apart for `embedder_open`. */
class BreakerOpenError extends DependencyUnavailableError {}

/** Transient: worth another attempt. 429 is not: the upstream asked for less load, not more. */
const TRANSIENT_STATUS = new Set([502, 503, 504]);

class AttemptError extends Error {
  constructor(
    message: string,
    readonly transient: boolean,
    readonly deadline = false,
    /** The upstream refused this request itself (a 4xx other than 429): no sign of its health. */
    readonly requestFault = false,
  ) {
    super(message);
  }
}

/** A 4xx other than 429: this request was refused; 429 and 5xx say the upstream is struggling. */
function requestFault(status: number): boolean {
  return status >= 400 && status < 500 && status !== 429;
}

/**
 * A client for an embedding endpoint with the common `/v1/embeddings` shape, protected as a
 * dependency: a bulkhead whose acquire never waits, retries on transient errors only (at most 3
 * attempts, full-jitter backoff, none that would end past the deadline), a retry budget of ≈ 10% of
 * calls, and optionally concurrency slots shared by every replica for the upstream's
 * `max_concurrent_calls`. Every failure is a {@link DependencyUnavailableError}: the caller degrades.
 */
export class EmbedderClient {
  readonly name: string;
  readonly maxInFlight: number;
  readonly #endpoint: string;
  readonly #model: string | undefined;
  readonly #timeoutMs: number;
  readonly #maxAttempts: number;
  readonly #baseDelayMs: number;
  readonly #maxDelayMs: number;
  readonly #ratio: number;
  readonly #budgetMax: number;
  readonly #slots: { source: SlotSource; maxConcurrentCalls: number } | undefined;
  readonly #fetch: typeof fetch;
  readonly #random: () => number;
  readonly #now: () => number;
  readonly #breaker: Breaker;
  readonly #slowCallMs: number;
  #budget: number;
  #inFlight = 0;
  readonly #stats = { calls: 0, shed: 0, retries: 0, retriesDenied: 0, failures: 0, breakerRefused: 0 };

  /** @throws {@link InvalidInputError} for a bad option. */
  constructor(options: EmbedderOptions) {
    if (typeof options?.url !== 'string' || !/^https?:\/\//.test(options.url))
      throw new InvalidInputError('options.url', 'an http:// or https:// URL', options?.url);
    this.#endpoint = `${options.url.replace(/\/+$/, '')}/v1/embeddings`;
    this.#model = options.model;
    this.name = options.name ?? 'embedder';
    this.maxInFlight = int('options.maxInFlight', options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT, 1, 4096);
    this.#timeoutMs = int('options.timeoutMs', options.timeoutMs ?? 2_000, 1, 600_000);
    this.#maxAttempts = int('options.maxAttempts', options.maxAttempts ?? 3, 1, 3);
    this.#baseDelayMs = int('options.baseDelayMs', options.baseDelayMs ?? 25, 0, 60_000);
    this.#maxDelayMs = int('options.maxDelayMs', options.maxDelayMs ?? 500, 0, 60_000);
    const ratio = options.retryBudgetRatio ?? 0.1;
    if (typeof ratio !== 'number' || !(ratio >= 0 && ratio <= 1))
      throw new InvalidInputError('options.retryBudgetRatio', 'a number from 0 to 1', ratio);
    this.#ratio = ratio;
    this.#budgetMax = int('options.retryBudgetMax', options.retryBudgetMax ?? 10, 0, 1_000_000);
    this.#budget = this.#budgetMax;
    if (options.slots !== undefined) checkSlotLimit('options.slots.maxConcurrentCalls', options.slots.maxConcurrentCalls);
    this.#slots = options.slots;
    const breaker = options.breaker ?? {};
    if (typeof breaker !== 'object' || breaker === null)
      throw new InvalidInputError('options.breaker', 'an object ({ failureThreshold, openMs, slowCallMs })', breaker);
    this.#breaker = new Breaker({
      failureThreshold: int(
        'options.breaker.failureThreshold',
        breaker.failureThreshold ?? EMBEDDER_BREAKER_DEFAULTS.failureThreshold,
        1,
        1_000,
      ),
      openMs: int('options.breaker.openMs', breaker.openMs ?? EMBEDDER_BREAKER_DEFAULTS.openMs, 1, 3_600_000),
    });
    this.#slowCallMs = int('options.breaker.slowCallMs', breaker.slowCallMs ?? EMBEDDER_BREAKER_DEFAULTS.slowCallMs, 1, 600_000);
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#random = options.random ?? Math.random;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Embeds `input` (one text or several), in order.
   * @throws {@link DependencyUnavailableError} (`shed` by the bulkhead or the open breaker, `deadline` or `failed`); {@link AbortedError}; {@link InvalidInputError} for empty input.
   */
  async embed(input: string | readonly string[], options: EmbedOptions = {}): Promise<Float32Array[]> {
    const texts = typeof input === 'string' ? [input] : input;
    if (!Array.isArray(texts) || texts.length === 0 || texts.some((t) => typeof t !== 'string'))
      throw new InvalidInputError('input', 'a string or a non-empty array of strings', input);
    this.#stats.calls++;
    // The bulkhead: never waits. A full one means the embedder is already slower than this replica's
    // share of it; queueing would only hand callers answers after they stopped waiting.
    if (this.#inFlight >= this.maxInFlight) {
      this.#stats.shed++;
      throw new DependencyUnavailableError(this.name, 'shed', 0, `${this.#inFlight} calls in flight, bulkhead of ${this.maxInFlight}`);
    }
    const startMs = this.#now();
    // After the bulkhead: a call it sheds never takes the half-open breaker's one probe.
    if (!this.#breaker.allow(startMs)) {
      this.#stats.breakerRefused++;
      throw new BreakerOpenError(
        this.name,
        'shed',
        0,
        `the breaker is open after ${this.#breaker.failureThreshold} slow or failed calls in a row; one call probes ${this.#breaker.openMs} ms after it opened`,
      );
    }
    this.#inFlight++;
    this.#budget = Math.min(this.#budgetMax, this.#budget + this.#ratio);
    const deadlineMs = options.deadlineMs ?? startMs + this.#timeoutMs;
    let attempts = 0;
    let verdict: 'good' | 'bad' | 'none' = 'none';
    let last: AttemptError | undefined;
    try {
      for (;;) {
        if (options.signal?.aborted) throw new AbortedError('embed', options.signal.reason);
        attempts++;
        try {
          const vectors = await this.#attempt(texts, deadlineMs, options.signal);
          verdict = this.#now() - startMs > this.#slowCallMs ? 'bad' : 'good';
          return vectors;
        } catch (err) {
          if (!(err instanceof AttemptError)) throw err;
          last = err;
        }
        if (last.deadline) throw new DependencyUnavailableError(this.name, 'deadline', attempts, last.message);
        if (!last.transient || attempts >= this.#maxAttempts)
          throw new DependencyUnavailableError(this.name, 'failed', attempts, last.message);
        const delay = Math.floor(this.#random() * Math.min(this.#maxDelayMs, this.#baseDelayMs * 2 ** attempts));
        if (this.#now() + delay >= deadlineMs)
          throw new DependencyUnavailableError(this.name, 'deadline', attempts, `${last.message}; no time left for a retry`);
        if (this.#budget < 1) {
          this.#stats.retriesDenied++;
          throw new DependencyUnavailableError(this.name, 'failed', attempts, `${last.message}; the retry budget is spent`);
        }
        this.#budget -= 1;
        this.#stats.retries++;
        if (delay > 0) await new Promise((r) => setTimeout(r, delay));
      }
    } catch (err) {
      this.#stats.failures++;
      // Out of time, failing, answering garbage: the upstream's health. A request it refused as bad
      // (400, 413, 422) says nothing about that, and must not close the embedder to every search.
      if (DependencyUnavailableError.is(err) && last?.requestFault !== true) verdict = 'bad';
      throw err;
    } finally {
      this.#inFlight--;
      if (verdict === 'good') this.#breaker.success();
      else if (verdict === 'bad') this.#breaker.failure(this.#now());
      else this.#breaker.cancel();
    }
  }

  /**
   * {@link embed} for one text, answering a degradation reason instead of throwing when the embedder
   * is shed, slow or down. Still throws `AbortedError` (the caller left) and `InvalidInputError`.
   */
  async tryEmbed(text: string, options: EmbedOptions = {}): Promise<EmbedAttempt> {
    try {
      const [vector] = await this.embed(text, options);
      return { vector: vector!, degradation: null };
    } catch (err) {
      if (!DependencyUnavailableError.is(err)) throw err;
      const degradation =
        err instanceof BreakerOpenError
          ? 'embedder_open'
          : err.reason === 'shed'
            ? 'embedder_shed'
            : err.reason === 'deadline'
              ? 'embedder_timeout'
              : 'embedder_failed';
      return { vector: null, degradation, error: err };
    }
  }

  async #attempt(texts: readonly string[], deadlineMs: number, signal: AbortSignal | undefined): Promise<Float32Array[]> {
    let lease: SlotLease | null = null;
    if (this.#slots !== undefined) {
      try {
        // Waits for a slot: the upstream takes no more, and the wait counts against the deadline.
        lease = await this.#slots.source.acquire(
          this.name,
          this.#slots.maxConcurrentCalls,
          signal ? { deadlineMs, signal } : { deadlineMs },
        );
      } catch (err) {
        if (AbortedError.is(err)) throw err;
        // Out of time waiting for a slot, or the slots themselves failing (their database is down).
        throw new AttemptError(err instanceof Error ? err.message : String(err), false, SlotTimeoutError.is(err));
      }
    }
    const remaining = deadlineMs - this.#now();
    try {
      if (remaining <= 0) throw new AttemptError('the deadline passed before the request was sent', false, true);
      const timeout = AbortSignal.timeout(remaining);
      const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
      let response: Response;
      try {
        response = await this.#fetch(this.#endpoint, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(this.#model === undefined ? { input: texts } : { input: texts, model: this.#model }),
          signal: combined,
        });
      } catch (err) {
        if (signal?.aborted) throw new AbortedError('embed', signal.reason);
        if (timeout.aborted) throw new AttemptError(`no answer within ${remaining} ms`, false, true);
        // A refused or reset connection: transient.
        throw new AttemptError(
          `request failed: ${err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err)}`,
          true,
        );
      }
      let body: unknown;
      try {
        body = await response.json();
      } catch {
        if (signal?.aborted) throw new AbortedError('embed', signal.reason);
        if (timeout.aborted) throw new AttemptError(`no answer within ${remaining} ms`, false, true);
        throw new AttemptError(
          `HTTP ${response.status} with a body that is not JSON`,
          TRANSIENT_STATUS.has(response.status),
          false,
          requestFault(response.status),
        );
      }
      if (!response.ok)
        throw new AttemptError(`HTTP ${response.status}`, TRANSIENT_STATUS.has(response.status), false, requestFault(response.status));
      return decodeEmbeddings(body, texts.length);
    } finally {
      lease?.release();
    }
  }

  stats(): EmbedderStats {
    return { ...this.#stats, inFlight: this.#inFlight, breaker: this.#breaker.state, breakerOpened: this.#breaker.opened };
  }
}

function int(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
    throw new InvalidInputError(field, `a whole number from ${min} to ${max}`, value);
  return value;
}

/** Reads `{ data: [{ index, embedding }] }`, in input order, every vector the same length. */
function decodeEmbeddings(body: unknown, count: number): Float32Array[] {
  const data = (body as { data?: unknown })?.data;
  if (!Array.isArray(data) || data.length !== count)
    throw new AttemptError(`the answer has ${Array.isArray(data) ? data.length : 'no'} embeddings for ${count} inputs`, false);
  const out = new Array<Float32Array>(count);
  let dims = -1;
  for (const [i, entry] of data.entries()) {
    const e = entry as { index?: unknown; embedding?: unknown };
    const index = typeof e.index === 'number' ? e.index : i;
    if (!Number.isInteger(index) || index < 0 || index >= count || out[index] !== undefined)
      throw new AttemptError(`embedding ${i} has a bad index ${String(e.index)}`, false);
    if (!Array.isArray(e.embedding) || e.embedding.length === 0 || !e.embedding.every((v) => typeof v === 'number' && Number.isFinite(v))) {
      throw new AttemptError(`embedding ${i} is not an array of finite numbers`, false);
    }
    if (dims === -1) dims = e.embedding.length;
    else if (e.embedding.length !== dims)
      throw new AttemptError(`embedding ${i} has ${e.embedding.length} dimensions, the first has ${dims}`, false);
    out[index] = Float32Array.from(e.embedding as number[]);
  }
  return out;
}
