import { randomUUID } from 'node:crypto';
import type Database from 'better-sqlite3';
import {
  CapacityError,
  InvalidInputError,
  RateLimitedError,
  RateLimiter,
  RateLimiterConfig,
  SessionClosedError,
  emitProcessWarning,
  type RateLimit,
  type WarningSink,
} from 'tidal-load';
import { CLOSED, CLOSING, OPEN, Session, type SessionRow } from './session.js';
import type { SharedStateSink } from './shared-state.js';
import { SESSION_DEFAULTS, type FilledSessionOptions } from './session-options.js';
import { checkId, checkWhole } from './validate.js';

/**
 * A session as the application holds it: plain data, so it can be stored (as JSON, say) and used
 * again after the database restarts, for as long as the session stays open.
 */
export interface SessionHandle {
  readonly id: string;
  readonly agentId: string;
}

/** Arguments of `openSession`. */
export interface OpenSessionOptions {
  /** The agent the session belongs to: 1 to 512 characters. Rate limits are per (agent, session). */
  agent: string;
  /**
   * Idle time after which the session expires: it is closed (`autoClosed: true`) once this long has
   * passed since it opened or since its last accepted signal, whichever is later.
   * @default `sessions.defaultTtlMs` of the database (30 minutes unless configured)
   */
  ttlMs?: number;
}

/** What `closeSession` returns, and what `onSessionExpired` receives. */
export interface SessionSummary {
  id: string;
  agentId: string;
  /** Milliseconds since the epoch, on the database clock. */
  openedAt: number;
  /** When it was closed; for an expired session, the moment its TTL ran out (its last activity + ttlMs). */
  closedAt: number;
  /** `closedAt − openedAt`. */
  durationMs: number;
  /** Signals written (durable) through the session. */
  signalsWritten: number;
  /**
   * Signals refused by the rate limiter. Counted in memory and persisted with the session's next
   * committed signal and at `close()`; refusals after the last of those are lost if the process
   * crashes.
   */
  rejections: number;
  /** `true` when the TTL closed it (the sweeper, a call that found it expired, or `open()` after a restart). */
  autoClosed: boolean;
}

/** An open session, as `openSessions()` lists it. Usable as a {@link SessionHandle}. */
export interface SessionInfo extends SessionHandle {
  openedAt: number;
  ttlMs: number;
  /** Its opening or its last accepted signal, whichever is later. */
  lastActiveAt: number;
  /** `lastActiveAt + ttlMs`: from then on the session is closed. */
  expiresAt: number;
  signalsWritten: number;
  rejections: number;
  /** Distinct items it has signalled: what a retrieve with the session leaves out. */
  seenItems: number;
}

/** The part of a write event the session hooks read. */
export interface SessionWriteEvent {
  readonly type: string;
  /** When the session call that wrote it was made: its session's activity time once committed. */
  readonly sessionAt?: number;
  readonly ordinal?: number;
  readonly session?: string | null;
}

/**
 * Agent sessions of one database: the open sessions in memory, their rows in SQLite, the rate
 * limiter keyed by (agent, session), and the TTL sweeper.
 *
 * Persistence: `openSession` inserts the session's row at once (on the writer connection, between
 * group-commit batches), so an open session survives a crash as soon as `openSession` returns. A
 * session signal's item goes into `session_items` in the same transaction as the signal itself
 * (`persistBatch`, called from the batch commit), so an acknowledged session signal is never lost
 * from the session's seen set; the signal log alone would not do, as checkpoints truncate it.
 * Closing a session deletes its rows.
 */
export class SessionRegistry {
  readonly #db: Database.Database;
  readonly #o: FilledSessionOptions;
  readonly #clock: () => number;
  readonly #limiter: RateLimiter;
  readonly #byId = new Map<string, Session>();
  readonly #insert: Database.Statement;
  readonly #insertItem: Database.Statement;
  readonly #update: Database.Statement;
  readonly #remove: (key: number) => void;
  #timer: NodeJS.Timeout | undefined;
  readonly #onWarning: WarningSink;
  #closed = false;
  /** Where open sessions are published for other threads, once `share` was called. */
  #sink: SharedStateSink | null = null;

  constructor(
    db: Database.Database,
    options: FilledSessionOptions,
    rateLimit: RateLimit | null,
    clock: () => number,
    onWarning: WarningSink = emitProcessWarning,
  ) {
    this.#onWarning = onWarning;
    this.#db = db;
    this.#o = options;
    this.#clock = clock;
    this.#limiter = new RateLimiter(
      rateLimit === null
        ? RateLimiterConfig.unlimited()
        : RateLimiterConfig.limited(rateLimit.ratePerSecond, rateLimit.burst, { maxBuckets: rateLimit.maxBuckets }),
    );
    this.#insert = db.prepare('INSERT INTO sessions (id, agent, opened_at, ttl_ms, last_active_at) VALUES (?, ?, ?, ?, ?)');
    this.#insertItem = db.prepare('INSERT OR IGNORE INTO session_items (session, ordinal) VALUES (?, ?)');
    this.#update = db.prepare(
      'UPDATE sessions SET signals_written = signals_written + ?, last_active_at = MAX(last_active_at, ?), rejections = ? WHERE key = ?',
    );
    const deleteSession = db.prepare('DELETE FROM sessions WHERE key = ?');
    const deleteItems = db.prepare('DELETE FROM session_items WHERE session = ?');
    this.#remove = db.transaction((key: number) => {
      deleteItems.run(key);
      deleteSession.run(key);
    });
    this.#recover();
  }

  /**
   * Loads the sessions left open by the last run. Those whose TTL ran out while the database was
   * closed are closed now, with `autoClosed: true` and `closedAt` = the moment they expired.
   */
  #recover(): void {
    const now = this.#clock();
    const rows = this.#db.prepare('SELECT * FROM sessions ORDER BY key').all() as SessionRow[];
    const expired: Session[] = [];
    const byKey = new Map<number, Session>();
    for (const r of rows) {
      const s = new Session(
        Object.freeze({ id: r.id, agentId: r.agent }),
        r.key,
        r.opened_at,
        r.ttl_ms,
        r.last_active_at,
        r.signals_written,
        r.rejections,
      );
      if (now >= s.expiresAt) expired.push(s);
      else {
        this.#byId.set(s.handle.id, s);
        byKey.set(s.key, s);
      }
    }
    if (byKey.size > 0) {
      const items = this.#db.prepare('SELECT session, ordinal FROM session_items ORDER BY session').raw().iterate() as IterableIterator<
        [number, number]
      >;
      for (const [key, ordinal] of items) {
        const s = byKey.get(key);
        if (s !== undefined) (s.seen ??= new Set()).add(ordinal);
      }
    }
    this.#db.transaction(() => {
      for (const s of expired) this.#remove(s.key);
    })();
    for (const s of expired) {
      s.state = CLOSED;
      s.closedAt = s.expiresAt;
      s.autoClosed = true;
      this.#notify(this.#summarize(s));
    }
    if (this.#byId.size > 0) this.#startTimer();
  }

  /** Sessions open now. */
  get size(): number {
    return this.#byId.size;
  }

  /**
   * Opens a session; it is durable when this returns.
   * @throws {@link InvalidInputError} for a bad agent or ttlMs; {@link CapacityError} past `maxOpen`.
   */
  open(options: OpenSessionOptions, now: number): SessionHandle {
    if (typeof options !== 'object' || options === null) throw new InvalidInputError('session', 'an object { agent, ttlMs? }', options);
    const agent = checkId('agent', options.agent);
    const ttlMs = options.ttlMs === undefined ? this.#o.defaultTtlMs : checkWhole('ttlMs', options.ttlMs, 1, SESSION_DEFAULTS.maxTtlMs);
    if (this.#byId.size >= this.#o.maxOpen) {
      throw new CapacityError('open sessions', this.#o.maxOpen, 'close sessions, or raise the sessions.maxOpen builder option');
    }
    const handle: SessionHandle = Object.freeze({ id: randomUUID(), agentId: agent });
    const key = Number(this.#insert.run(handle.id, agent, now, ttlMs, now).lastInsertRowid);
    const s = new Session(handle, key, now, ttlMs, now, 0, 0);
    this.#byId.set(handle.id, s);
    this.#share(s);
    this.#startTimer();
    return handle;
  }

  /** Publishes every open session into `sink` (see shared-state.ts), and from now on each change. */
  share(sink: SharedStateSink): void {
    this.#sink = sink;
    for (const s of this.#byId.values()) this.#share(s);
  }

  /** What another thread's query reads of `s`: its agent, expiry and seen items; gone once it is not open. */
  #share(s: Session): void {
    if (this.#sink === null) return;
    if (s.state !== OPEN) this.#sink.session(s.handle.id, null);
    else this.#sink.session(s.handle.id, { agentId: s.handle.agentId, expiresAt: s.expiresAt, seen: Int32Array.from(s.seen ?? []) });
  }

  /**
   * The open session a handle names. A session found past its TTL is closed on the spot (and the
   * application told), then refused like any closed one.
   */
  #lookup(handle: SessionHandle, operation: string, now: number): Session {
    if (typeof handle !== 'object' || handle === null || typeof handle.id !== 'string') {
      throw new InvalidInputError('session', 'a session handle returned by openSession()', handle);
    }
    const s = this.#byId.get(handle.id);
    if (s === undefined || s.state !== OPEN) throw new SessionClosedError(handle.id, operation);
    if (handle.agentId !== s.handle.agentId) {
      throw new InvalidInputError(
        'session.agentId',
        `the agent the session was opened for (${JSON.stringify(s.handle.agentId)})`,
        handle.agentId,
      );
    }
    if (now >= s.expiresAt) {
      void this.#expire(s); // #expire handles its rejection: a TIDAL_SESSION_SWEEP_FAILED warning
      throw new SessionClosedError(handle.id, operation);
    }
    return s;
  }

  /**
   * Admits one session signal: the session must be open and its bucket must have a token. The
   * token is taken before the signal is validated: the check is the cheapest refusal there is, and
   * a malformed signal is a request like any other.
   * @throws {@link SessionClosedError}, {@link RateLimitedError} (counted in `rejections`).
   */
  admit(handle: SessionHandle, now: number): Session {
    const s = this.#lookup(handle, 'write a session signal', now);
    const wait = this.#limiter.tryTake(s.handle.agentId, s.handle.id, now);
    if (wait > 0) {
      s.rejections++;
      const limit = this.#limiter.rateLimit!;
      throw new RateLimitedError(s.handle.agentId, s.handle.id, limit.ratePerSecond, wait, limit.burst);
    }
    return s;
  }

  /**
   * Runs the write of an admitted signal. `enqueue` validates and enqueues it (throwing on bad
   * input, in which case nothing changes); the session then counts it as pending until it commits
   * or fails, so that closing the session waits for it.
   */
  async write(s: Session, enqueue: () => Promise<number>): Promise<number> {
    // The TTL is extended by the commit (persistBatch / applyBatch), not here: a signal refused
    // for backpressure, capacity or bad input is not activity.
    const committed = enqueue();
    s.pending++;
    try {
      return await committed;
    } finally {
      if (--s.pending === 0 && s.drained !== null) s.drained();
    }
  }

  /** Writes the session side of a batch; runs inside the batch's transaction. */
  persistBatch(events: readonly SessionWriteEvent[]): void {
    let touched: Map<Session, { n: number; at: number }> | null = null;
    for (const e of events) {
      if (e.type !== 'signal' || e.session === null || e.session === undefined) continue;
      const s = this.#byId.get(e.session);
      if (s === undefined) continue;
      this.#insertItem.run(s.key, e.ordinal!);
      touched ??= new Map();
      const t = touched.get(s);
      const at = e.sessionAt ?? 0;
      if (t === undefined) touched.set(s, { n: 1, at });
      else {
        t.n++;
        if (at > t.at) t.at = at;
      }
    }
    if (touched !== null) for (const [s, t] of touched) this.#update.run(t.n, Math.max(s.lastActiveAt, t.at), s.rejections, s.key);
  }

  /** Applies a committed batch to the sessions in memory (seen sets, counts). */
  applyBatch(events: readonly SessionWriteEvent[]): void {
    let touched: Set<Session> | null = null;
    for (const e of events) {
      if (e.type !== 'signal' || e.session === null || e.session === undefined) continue;
      const s = this.#byId.get(e.session);
      if (s === undefined) continue;
      if (this.#sink !== null) (touched ??= new Set()).add(s);
      s.signalsWritten++;
      if (e.sessionAt !== undefined && e.sessionAt > s.lastActiveAt) s.lastActiveAt = e.sessionAt;
      const seen = (s.seen ??= new Set());
      if (!seen.has(e.ordinal!)) {
        seen.add(e.ordinal!);
        s.exclude = null;
      }
    }
    if (touched !== null) for (const s of touched) this.#share(s);
  }

  /**
   * The ordinals a retrieve with this session leaves out (the items it signalled), or `null` when
   * no session is given or it has signalled nothing.
   */
  exclude(handle: SessionHandle | undefined, now: number): Int32Array | null {
    if (handle === undefined) return null;
    const s = this.#lookup(handle, 'retrieve with a session', now);
    if (s.seen === null || s.seen.size === 0) return null;
    return (s.exclude ??= Int32Array.from(s.seen));
  }

  /**
   * Closes a session: no signal is accepted from now on; the summary comes once the signals already
   * enqueued have committed, and counts them.
   */
  close(handle: SessionHandle, now: number): Promise<SessionSummary> {
    return this.#end(this.#lookup(handle, 'close a session', now), now, false);
  }

  async #end(s: Session, closedAt: number, autoClosed: boolean): Promise<SessionSummary> {
    s.state = CLOSING;
    this.#share(s);
    s.closedAt = closedAt;
    s.autoClosed = autoClosed;
    this.#limiter.drop(s.handle.agentId, s.handle.id);
    if (s.pending > 0) await new Promise<void>((resolve) => (s.drained = resolve));
    return this.#finish(s);
  }

  #finish(s: Session): SessionSummary {
    if (s.summary !== null) return s.summary;
    if (!this.#closed) this.#remove(s.key);
    s.state = CLOSED;
    this.#byId.delete(s.handle.id);
    if (this.#byId.size === 0) this.#stopTimer();
    return this.#summarize(s);
  }

  #summarize(s: Session): SessionSummary {
    s.summary = {
      id: s.handle.id,
      agentId: s.handle.agentId,
      openedAt: s.openedAt,
      closedAt: s.closedAt,
      durationMs: s.closedAt - s.openedAt,
      signalsWritten: s.signalsWritten,
      rejections: s.rejections,
      autoClosed: s.autoClosed,
    };
    return s.summary;
  }

  /** Closes an expired session in the background and tells the application. */
  #expire(s: Session): Promise<SessionSummary> {
    const done = this.#end(s, s.expiresAt, true);
    done.then(
      (summary) => this.#notify(summary),
      (err: unknown) => this.#warn('TIDAL_SESSION_SWEEP_FAILED', 'closing an expired session failed', err),
    );
    return done;
  }

  /**
   * Closes every open session past its TTL, in the order they were opened. Resolves with their
   * summaries once each is closed (and the application told).
   */
  async sweep(now: number): Promise<SessionSummary[]> {
    const ending: Promise<SessionSummary>[] = [];
    for (const s of this.#byId.values()) if (s.state === OPEN && now >= s.expiresAt) ending.push(this.#expire(s));
    return Promise.all(ending);
  }

  /** The open sessions (those not yet past their TTL), in the order they were opened. */
  list(now: number): SessionInfo[] {
    const out: SessionInfo[] = [];
    for (const s of this.#byId.values()) {
      if (s.state !== OPEN || now >= s.expiresAt) continue;
      out.push({
        id: s.handle.id,
        agentId: s.handle.agentId,
        openedAt: s.openedAt,
        ttlMs: s.ttlMs,
        lastActiveAt: s.lastActiveAt,
        expiresAt: s.expiresAt,
        signalsWritten: s.signalsWritten,
        rejections: s.rejections,
        seenItems: s.seen?.size ?? 0,
      });
    }
    return out;
  }

  #notify(summary: SessionSummary): void {
    const fn = this.#o.onExpired;
    if (fn === null) return;
    try {
      const r = fn(summary);
      if (r !== undefined && typeof r.then === 'function') {
        r.then(undefined, (err: unknown) => this.#warn('TIDAL_SESSION_CALLBACK_FAILED', 'onSessionExpired rejected', err));
      }
    } catch (err) {
      this.#warn('TIDAL_SESSION_CALLBACK_FAILED', 'onSessionExpired threw', err);
    }
  }

  // Not a throw: the sweep runs on a timer, where a throw would end the process.
  #warn(code: 'TIDAL_SESSION_CALLBACK_FAILED' | 'TIDAL_SESSION_SWEEP_FAILED', what: string, err: unknown): void {
    const e = err instanceof Error ? err : new Error(String(err));
    this.#onWarning({ code, message: `${what}: ${e.message}` });
  }

  #startTimer(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setInterval(() => this.#onTimer(), this.#o.sweepIntervalMs);
    // The sweeper must never be what keeps an application's process alive.
    this.#timer.unref();
  }

  #stopTimer(): void {
    if (this.#timer === undefined) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #onTimer(): void {
    // A database whose open() failed after the sessions were loaded has its connection closed.
    if (this.#closed || !this.#db.open) {
      this.#stopTimer();
      return;
    }
    this.sweep(this.#clock()).catch((err: unknown) => this.#warn('TIDAL_SESSION_SWEEP_FAILED', 'the session sweep failed', err));
  }

  /**
   * Closes every session, for `close()`; call after the pending writes were flushed. Closes already
   * under way finish now; sessions still open are closed at `now` with `autoClosed: true` (the
   * caller did not close them). Stops the sweeper and drops every bucket. Only a crash leaves
   * sessions open on disk, for the next open to resume or expire.
   */
  shutdown(now: number): SessionSummary[] {
    if (this.#closed) return [];
    this.#stopTimer();
    const summaries: SessionSummary[] = [];
    try {
      this.#db.transaction(() => {
        for (const s of [...this.#byId.values()]) {
          if (s.state !== CLOSING) {
            s.state = CLOSING;
            s.closedAt = Math.max(now, s.openedAt);
            s.autoClosed = true;
          }
          summaries.push(this.#finish(s));
        }
      })();
    } finally {
      this.#closed = true;
      this.#byId.clear();
      this.#limiter.clear();
    }
    return summaries;
  }
}

export type { Session };
