import { randomInt } from 'node:crypto';
import pg from 'pg';
import {
  AbortedError,
  ClosedError,
  InternalError,
  InvalidInputError,
  PooledSessionError,
  SlotTimeoutError,
  checkLimitKey,
  checkSlotLimit,
  type AcquireOptions,
  type SlotLease,
  type SlotSource,
} from 'tidal-load';

/** Options of {@link PostgresSlots.open}. */
export interface PostgresSlotsOptions {
  /** `postgres://user@host:port/db`. Connect directly or through a session-mode pool, never a transaction-mode one. */
  connectionString: string;
  /**
   * The channel releases are announced on, so waiters in every replica try again at once.
   * @default 'tidal_slots'
   */
  channel?: string;
  /**
   * A waiter also tries again after a jittered `pollMs` (× 0.5–1.5) even without an announcement:
   * a replica that dies holding slots frees them without announcing it. Bounded, never a busy loop.
   * @default 250
   */
  pollMs?: number;
  /** The clock deadlines are read on. @default Date.now */
  now?: () => number;
}

/** What a query function returns: enough of pg's result for the session check. */
export interface QueryResultLike {
  rows: Record<string, unknown>[];
}
export type QueryFn = (text: string, values?: unknown[]) => Promise<QueryResultLike>;

/**
 * 31-bit FNV-1a of the resource name: the first key of its slots' advisory locks (the slot number is
 * the second). Kept positive so it reads back unchanged from pg_locks' unsigned `classid`.
 */
export function slotKey(resource: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < resource.length; i++) {
    h ^= resource.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) & 0x7fffffff;
}

/**
 * Refuses a connection that does not keep one server session across statements: two statements
 * must be answered by the same backend, and an advisory lock taken by one must be seen held by that
 * backend from the next. Behind a transaction-pooling proxy either fails, and session-level locks
 * would be stranded on whatever session the proxy handed out.
 * @throws {@link PooledSessionError}
 */
export async function checkSessionPinned(query: QueryFn): Promise<void> {
  const pid = async (): Promise<number> => Number((await query('SELECT pg_backend_pid() AS pid')).rows[0]?.pid);
  const pids = [await pid(), await pid(), await pid()];
  if (new Set(pids).size !== 1) throw new PooledSessionError(`backend pid ${pids.join(', then ')} across three statements`);
  const probe = randomInt(1, 0x7fffffff);
  await query('SELECT pg_advisory_lock($1::int, 0)', [probe]);
  try {
    const seen = await query(
      "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND classid = $1::bigint::oid AND objid = 0 AND objsubid = 2",
      [probe],
    );
    if (Number(seen.rows[0]?.n) !== 1)
      throw new PooledSessionError(`advisory lock (${probe}, 0) taken by one statement is not held by the session of the next`);
  } finally {
    await query('SELECT pg_advisory_unlock($1::int, 0)', [probe]);
  }
}

/**
 * Checks {@link PostgresSlotsOptions} before anything connects.
 * @throws {@link InvalidInputError} naming the option.
 */
export function checkPostgresSlotsOptions(options: PostgresSlotsOptions): void {
  if (typeof options?.connectionString !== 'string' || !/^postgres(ql)?:\/\//.test(options.connectionString)) {
    throw new InvalidInputError('options.connectionString', 'a postgres:// URL', options?.connectionString);
  }
  const channel = options.channel ?? 'tidal_slots';
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(channel)) throw new InvalidInputError('options.channel', 'a lower-case SQL identifier', channel);
  const pollMs = options.pollMs ?? 250;
  if (!Number.isInteger(pollMs) || pollMs < 1 || pollMs > 60_000)
    throw new InvalidInputError('options.pollMs', 'a whole number of milliseconds from 1 to 60000', pollMs);
}

interface Waiter {
  wake(): void;
}

/**
 * A client that sends one statement at a time, in the order they were asked for: pg 8 queues a
 * statement sent while another is in flight but deprecates it (pg 9 drops the queue). A failed
 * statement does not hold up the next. Not a pool: advisory locks belong to the session, so a lock
 * and its unlock must go over the same connection.
 */
export class SerialClient {
  readonly client: pg.Client;
  #tail: Promise<unknown> = Promise.resolve();

  constructor(client: pg.Client) {
    this.client = client;
  }

  query<R extends pg.QueryResultRow = Record<string, unknown>>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    const run = this.#tail.then(() => this.client.query<R>(text, values));
    this.#tail = run.catch(() => {});
    return run;
  }
}

/**
 * Concurrency slots shared by every replica through PostgreSQL: slot n of a resource is the
 * session-level advisory lock (hash of the resource, n), held on this process's dedicated lock
 * connection for the length of the call. The server releases a session's locks when the session
 * ends, so a replica that dies holding slots frees them. A release is announced with NOTIFY, and a
 * waiter also re-tries on a bounded jittered timer, which is what finds slots a dead replica freed.
 */
export class PostgresSlots implements SlotSource {
  #session: SerialClient;
  readonly #options: PostgresSlotsOptions;
  readonly #channel: string;
  readonly #pollMs: number;
  readonly #now: () => number;
  /**
   * Slot numbers this process holds or is trying, per resource: a session's advisory locks are
   * re-entrant, so the server would grant this session a slot it already holds. Replaced, not
   * cleared, when the session is lost, so a lease of the old session can never free a slot of the new.
   */
  #mine = new Map<string, Set<number>>();
  readonly #waiters = new Map<string, Set<Waiter>>();
  #broken: Error | null = null;
  #reconnecting: Promise<void> | null = null;
  #retryAtMs = 0;
  #closed: Promise<void> | null = null;

  private constructor(client: pg.Client, options: PostgresSlotsOptions) {
    this.#session = new SerialClient(client);
    this.#options = options;
    this.#channel = options.channel ?? 'tidal_slots';
    this.#pollMs = options.pollMs ?? 250;
    this.#now = options.now ?? Date.now;
    this.#attach(client);
  }

  #attach(client: pg.Client): void {
    client.on('notification', (msg) => {
      if (msg.channel === this.#channel && msg.payload !== undefined) this.#wake(msg.payload);
    });
    const lost = (err: Error): void => {
      if (this.#session.client !== client || this.#broken !== null || this.#closed !== null) return;
      // The session is gone, and with it every lock it held: the server has released them.
      this.#broken = err;
      this.#mine = new Map();
      client.end().catch(() => {});
    };
    client.on('error', lost);
    client.on('end', () => lost(new Error('the lock session ended')));
  }

  static async #connect(options: PostgresSlotsOptions): Promise<pg.Client> {
    const channel = options.channel ?? 'tidal_slots';
    const client = new pg.Client({
      connectionString: options.connectionString,
      application_name: 'tidal-slots',
      connectionTimeoutMillis: 5_000,
    });
    client.on('error', () => {});
    try {
      await client.connect();
      await checkSessionPinned((text, values) => client.query(text, values));
      await client.query(`LISTEN ${channel}`);
    } catch (err) {
      await client.end().catch(() => {});
      if (PooledSessionError.is(err)) throw err;
      throw new InternalError(`the slot lock connection failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    return client;
  }

  /**
   * Opens the lock connection, checks that it keeps one session ({@link checkSessionPinned}) and
   * listens for releases. A lock session lost later (a database restart, a terminated backend) is
   * opened again, checked again, by the next call that needs it; the slots it held were released by
   * the server.
   * @throws {@link PooledSessionError} behind a transaction-pooling proxy; {@link InternalError} when the database cannot be reached.
   */
  static async open(options: PostgresSlotsOptions): Promise<PostgresSlots> {
    checkPostgresSlotsOptions(options);
    return new PostgresSlots(await PostgresSlots.#connect(options), options);
  }

  /** Reopens a lost lock session, at most once a second; the calls that meet the outage fail meanwhile. */
  async #ensure(): Promise<void> {
    if (this.#closed !== null) throw new ClosedError('acquire a slot');
    if (this.#broken === null) return;
    if (this.#reconnecting === null) {
      const lost = this.#broken;
      if (this.#now() < this.#retryAtMs) throw new InternalError(`the slot lock connection failed: ${lost.message}`, { cause: lost });
      this.#reconnecting = PostgresSlots.#connect(this.#options).then(
        (client) => {
          this.#reconnecting = null;
          if (this.#closed !== null) {
            client.end().catch(() => {});
            return;
          }
          this.#session = new SerialClient(client);
          this.#attach(client);
          this.#broken = null;
        },
        (err: unknown) => {
          this.#reconnecting = null;
          this.#retryAtMs = this.#now() + 1_000;
          throw err;
        },
      );
    }
    await this.#reconnecting;
    if (this.#closed !== null) throw new ClosedError('acquire a slot');
  }

  /** The backend pid of the lock session (for operators: `pg_locks.pid`). */
  async backendPid(): Promise<number> {
    return Number((await this.#session.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
  }

  /**
   * Lock sessions open on the server now, this one included: one per replica holding slots on this
   * database (every one names itself `tidal-slots`). What a replica divides a limit by while the
   * database is away.
   */
  async sessions(): Promise<number> {
    const r = await this.#session.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'tidal-slots'",
    );
    return Math.max(1, Number(r.rows[0]?.n ?? 1));
  }

  /** Slots of `resource` this process holds now. */
  held(resource: string): number {
    return this.#mine.get(resource)?.size ?? 0;
  }

  /**
   * Takes a free slot of `resource` without waiting, or `null` when all `limit` are held (here or
   * by another replica).
   */
  async tryAcquire(resource: string, limit: number): Promise<SlotLease | null> {
    checkLimitKey('resource', resource);
    checkSlotLimit('limit', limit);
    await this.#ensure();
    const key = slotKey(resource);
    const session = this.#session;
    let mine = this.#mine.get(resource);
    if (mine === undefined) {
      mine = new Set();
      this.#mine.set(resource, mine);
    }
    for (let slot = 0; slot < limit; slot++) {
      if (mine.has(slot)) continue;
      // Claimed before the round trip: another call in this process must not try the same slot,
      // which the server would grant this session a second time.
      mine.add(slot);
      let got: boolean;
      try {
        const locked = await session.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1::int, $2::int) AS ok', [key, slot]);
        got = locked.rows[0]!.ok === true;
      } catch (err) {
        mine.delete(slot);
        throw new InternalError(`the slot lock connection failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      if (got) return this.#lease(session, resource, key, slot, mine);
      mine.delete(slot);
    }
    return null;
  }

  #lease(session: SerialClient, resource: string, key: number, slot: number, mine: Set<number>): SlotLease {
    let released = false;
    return {
      backend: 'postgres',
      resource,
      slot,
      release: () => {
        if (released) return;
        released = true;
        // A lease of a lost session has nothing left to unlock: the server released it with the session.
        if (session !== this.#session || this.#broken !== null || this.#closed !== null) {
          mine.delete(slot);
          return;
        }
        session
          .query('SELECT pg_advisory_unlock($1::int, $2::int), pg_notify($3, $4)', [key, slot, this.#channel, resource])
          .catch(() => {})
          .finally(() => {
            mine.delete(slot);
            this.#wake(resource);
          });
      },
    };
  }

  /**
   * Takes one of `resource`'s `limit` slots, across every replica on this database, waiting for one
   * when all are held. The wait counts against the deadline.
   * @throws {@link SlotTimeoutError} naming the limit and the wait; {@link AbortedError}; {@link ClosedError} after close; {@link InvalidInputError} for a bad limit.
   */
  async acquire(resource: string, limit: number, options: AcquireOptions): Promise<SlotLease> {
    checkLimitKey('resource', resource);
    checkSlotLimit('limit', limit);
    const deadlineMs = options?.deadlineMs;
    if (typeof deadlineMs !== 'number' || Number.isNaN(deadlineMs))
      throw new InvalidInputError('options.deadlineMs', 'a number (milliseconds on the source clock)', deadlineMs);
    const signal = options.signal;
    const startMs = this.#now();
    for (;;) {
      if (signal?.aborted) throw new AbortedError('acquire', signal.reason);
      const lease = await this.tryAcquire(resource, limit);
      if (lease !== null) return lease;
      const remaining = deadlineMs - this.#now();
      if (remaining <= 0) throw new SlotTimeoutError(resource, limit, Math.max(0, Math.round(this.#now() - startMs)));
      // Jittered so waiters in many replicas do not all retry in step.
      await this.#sleep(resource, Math.min(remaining, Math.round(this.#pollMs * (0.5 + Math.random()))), signal);
    }
  }

  #sleep(resource: string, ms: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve) => {
      let waiters = this.#waiters.get(resource);
      if (waiters === undefined) {
        waiters = new Set();
        this.#waiters.set(resource, waiters);
      }
      const set = waiters;
      const waiter: Waiter = { wake: done };
      const timer = setTimeout(done, ms);
      signal?.addEventListener('abort', done, { once: true });
      set.add(waiter);
      function done(): void {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        set.delete(waiter);
        resolve();
      }
    });
  }

  #wake(resource: string): void {
    const waiters = this.#waiters.get(resource);
    if (waiters === undefined) return;
    for (const w of [...waiters]) w.wake();
  }

  /**
   * Ends the lock session: every slot it holds is released by the server, and calls waiting for a
   * slot fail at once with a `ClosedError`. Idempotent.
   */
  close(): Promise<void> {
    if (this.#closed === null) {
      this.#closed = this.#session.client.end().catch(() => {});
      for (const resource of [...this.#waiters.keys()]) this.#wake(resource);
    }
    return this.#closed;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
