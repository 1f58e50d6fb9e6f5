import {
  AbortedError,
  ClosedError,
  InvalidInputError,
  LocalSlotSource,
  PooledSessionError,
  SlotTimeoutError,
  checkLimitKey,
  checkSlotLimit,
  emitProcessWarning,
  type AcquireOptions,
  type SlotLease,
  type SlotSource,
  type WarningSink,
} from 'tidal-load';
import { PostgresSlots, checkPostgresSlotsOptions, type PostgresSlotsOptions } from './pg-slots.js';

/** Options of {@link SharedSlots.open}. */
export interface SharedSlotsOptions extends PostgresSlotsOptions {
  /** Receives `TIDAL_SHARED_SLOTS_LOCAL` and `TIDAL_SHARED_SLOTS_RESTORED`. @default emitProcessWarning */
  onWarning?: WarningSink;
  /**
   * The replicas alive, which a limit is divided by while the database is away (`tidal serve`
   * passes Redis's heartbeat count when it has one).
   * @default the lock sessions last seen on the database, 1 before any was seen
   */
  replicas?: () => number;
  /**
   * How long `open` waits for the first connection before it starts on slots in this process.
   * @default 2_000
   */
  startWaitMs?: number;
  /**
   * The wait before the first re-connect attempt after the database was lost, in milliseconds;
   * it doubles after each failed attempt, up to `retryMaxMs`.
   * @default 250
   */
  retryMinMs?: number;
  /** @default 5_000 */
  retryMaxMs?: number;
}

export const SHARED_SLOTS_DEFAULTS = Object.freeze({ startWaitMs: 2_000, retryMinMs: 250, retryMaxMs: 5_000, sessionsEveryMs: 5_000 });

export type SlotBackend = 'postgres' | 'local';

/** What {@link SharedSlots} uses of a {@link PostgresSlots}. */
export type SlotConnection = Pick<PostgresSlots, 'acquire' | 'sessions' | 'close'>;

/** Opens one lock connection: {@link PostgresSlots.open}, or a stand-in in the tests. */
export type SlotConnector = (options: PostgresSlotsOptions) => Promise<SlotConnection>;

export interface SharedSlotsStats {
  /** Where slots are taken now. */
  backend: SlotBackend;
  postgresAcquired: number;
  localAcquired: number;
  /** Outages: times the slots went from PostgreSQL to this process. */
  fallbacks: number;
  /** Re-connect attempts that failed. */
  reconnectsFailed: number;
  /** What a limit is divided by while the database is away. */
  replicasLastSeen: number;
}

function int(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
    throw new InvalidInputError(field, `a whole number from ${min} to ${max}`, value);
  return value;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

let openWith: (options: SharedSlotsOptions, connect: SlotConnector) => Promise<SharedSlots>;

/**
 * {@link SharedSlots.open} over another connector. Not exported by the package (its index leaves it
 * out): the tests open the slots over a stand-in connection whose answers they hold.
 */
export function openSharedSlotsWith(options: SharedSlotsOptions, connect: SlotConnector): Promise<SharedSlots> {
  return openWith(options, connect);
}

/**
 * Concurrency slots on PostgreSQL ({@link PostgresSlots}) while it answers, and in this process
 * while it does not, as the shared rate limit does with Redis: a replica whose database is down at
 * start, or goes down later, keeps calling its upstream on local slots (the limit ÷ the replicas
 * last seen, at least 1), with a `TIDAL_SHARED_SLOTS_LOCAL` warning; it re-connects in the
 * background with a doubling backoff, and takes slots on the database again once it answers
 * (`TIDAL_SHARED_SLOTS_RESTORED`). A call never waits on a database that is down: it is refused at
 * once (connection refused) and the call goes to the local slots.
 *
 * The warnings come with the switches, in the same step: `backend` reads `postgres` from the moment
 * `TIDAL_SHARED_SLOTS_RESTORED` is raised (the replicas on the database are counted before, not
 * after), and `local` from the moment `TIDAL_SHARED_SLOTS_LOCAL` is, so whoever sees the new backend
 * has had its warning.
 *
 * While it switches, calls holding slots of one side and calls holding slots of the other can be
 * in flight together, so the upstream may briefly see up to the limit plus the local share.
 */
export class SharedSlots implements SlotSource {
  readonly #options: SharedSlotsOptions;
  readonly #connect: SlotConnector;
  readonly #warn: WarningSink;
  readonly #now: () => number;
  readonly #local: LocalSlotSource;
  readonly #retryMinMs: number;
  readonly #retryMaxMs: number;
  #pg: SlotConnection | null = null;
  #outageSinceMs: number | null = null;
  #retryMs: number;
  #timer: NodeJS.Timeout | null = null;
  #sessionsTimer: NodeJS.Timeout | null = null;
  #connecting: Promise<void> | null = null;
  #sessions = 1;
  #closed: Promise<void> | null = null;
  readonly #stats = { postgresAcquired: 0, localAcquired: 0, fallbacks: 0, reconnectsFailed: 0 };

  private constructor(options: SharedSlotsOptions, connect: SlotConnector) {
    this.#options = options;
    this.#connect = connect;
    this.#warn = options.onWarning ?? emitProcessWarning;
    this.#now = options.now ?? Date.now;
    this.#local = new LocalSlotSource({ now: this.#now });
    this.#retryMinMs = int('options.retryMinMs', options.retryMinMs ?? SHARED_SLOTS_DEFAULTS.retryMinMs, 1, 600_000);
    this.#retryMaxMs = int('options.retryMaxMs', options.retryMaxMs ?? SHARED_SLOTS_DEFAULTS.retryMaxMs, this.#retryMinMs, 600_000);
    this.#retryMs = this.#retryMinMs;
  }

  /**
   * Connects, waiting at most `startWaitMs`: a database that cannot be reached by then is left to
   * the background re-connects, and the slots start in this process.
   * @throws {@link PooledSessionError} when the database answers through a transaction-pooling
   *   proxy (a configuration to fix, not an outage to wait out); {@link InvalidInputError} for a bad option.
   */
  static open(options: SharedSlotsOptions): Promise<SharedSlots> {
    return SharedSlots.#open(options, (o) => PostgresSlots.open(o));
  }

  static {
    openWith = (options, connect) => SharedSlots.#open(options, connect);
  }

  static async #open(options: SharedSlotsOptions, connect: SlotConnector): Promise<SharedSlots> {
    checkPostgresSlotsOptions(options);
    const startWaitMs = int('options.startWaitMs', options.startWaitMs ?? SHARED_SLOTS_DEFAULTS.startWaitMs, 0, 600_000);
    if (options.replicas !== undefined && typeof options.replicas !== 'function')
      throw new InvalidInputError('options.replicas', 'a function returning the replicas alive', options.replicas);
    const slots = new SharedSlots(options, connect);
    const first = connect(options);
    let timer: NodeJS.Timeout | undefined;
    const waited = await Promise.race([
      first.then(
        (pg) => ({ pg }),
        (error: unknown) => ({ error }),
      ),
      new Promise<{ late: true }>((resolve) => (timer = setTimeout(() => resolve({ late: true }), startWaitMs))),
    ]).finally(() => clearTimeout(timer));
    if ('pg' in waited) {
      await slots.#use(waited.pg);
      return slots;
    }
    if ('error' in waited && PooledSessionError.is(waited.error)) throw waited.error;
    // An attempt still under way when the wait ran out finishes in the background, as a re-connect
    // (registered first, so the outage does not schedule a second one beside it).
    if ('late' in waited) slots.#attempt(first);
    slots.#lost('error' in waited ? waited.error : new Error(`no connection within ${startWaitMs} ms`));
    return slots;
  }

  /** Where slots are taken now: on the database, or in this process while it is away. */
  get backend(): SlotBackend {
    return this.#pg === null ? 'local' : 'postgres';
  }

  /** The limit this replica holds in process while the database is away: its share, at least 1. */
  localLimit(limit: number): number {
    return Math.max(1, Math.floor(limit / this.#replicas()));
  }

  #replicas(): number {
    const n = Math.floor(this.#options.replicas?.() ?? this.#sessions);
    return Number.isFinite(n) && n >= 1 ? n : 1;
  }

  /**
   * Takes one of `resource`'s `limit` slots: on the database across every replica while it answers,
   * otherwise one of this replica's share in process. The wait counts against the deadline.
   * @throws {@link SlotTimeoutError}; {@link AbortedError}; {@link ClosedError} after close; {@link InvalidInputError} for a bad limit.
   */
  async acquire(resource: string, limit: number, options: AcquireOptions): Promise<SlotLease> {
    checkLimitKey('resource', resource);
    checkSlotLimit('limit', limit);
    if (this.#closed !== null) throw new ClosedError('acquire a slot');
    const pg = this.#pg;
    if (pg !== null) {
      try {
        const lease = await pg.acquire(resource, limit, options);
        this.#stats.postgresAcquired++;
        return lease;
      } catch (err) {
        if (SlotTimeoutError.is(err) || AbortedError.is(err) || InvalidInputError.is(err)) throw err;
        if (this.#closed !== null) throw new ClosedError('acquire a slot');
        // The lock session failed: the server released whatever it held. Carry on in process.
        if (this.#pg === pg) this.#lost(err);
      }
    }
    const lease = await this.#local.acquire(resource, this.localLimit(limit), options);
    this.#stats.localAcquired++;
    return lease;
  }

  async #use(pg: SlotConnection): Promise<void> {
    if (this.#closed !== null) {
      await pg.close();
      return;
    }
    // Counted before the switch, so that the switch and its warning are one synchronous step.
    const sessions = await pg.sessions().catch(() => null);
    if (this.#closed !== null) {
      await pg.close();
      return;
    }
    if (sessions !== null) this.#sessions = sessions;
    this.#pg?.close().catch(() => {});
    this.#pg = pg;
    this.#retryMs = this.#retryMinMs;
    this.#sessionsTimer ??= setInterval(() => void this.#countSessions(), SHARED_SLOTS_DEFAULTS.sessionsEveryMs);
    this.#sessionsTimer.unref();
    if (this.#outageSinceMs !== null) {
      this.#warn({
        code: 'TIDAL_SHARED_SLOTS_RESTORED',
        message: `postgres answers again: concurrency slots are held on it again, after ${Math.max(0, this.#now() - this.#outageSinceMs)} ms in this process`,
      });
      this.#outageSinceMs = null;
    }
  }

  async #countSessions(): Promise<void> {
    const pg = this.#pg;
    if (pg === null) return;
    try {
      this.#sessions = await pg.sessions();
    } catch {
      // The next acquire meets the failure and falls back; the count stays what it last was.
    }
  }

  #lost(error: unknown): void {
    const pg = this.#pg;
    this.#pg = null;
    pg?.close().catch(() => {});
    if (this.#outageSinceMs === null) {
      this.#outageSinceMs = this.#now();
      this.#stats.fallbacks++;
      this.#warn({
        code: 'TIDAL_SHARED_SLOTS_LOCAL',
        message:
          `postgres cannot be reached (${message(error)}): concurrency slots are held in this process, each limit ÷ ` +
          `${this.#replicas()} replicas last seen (at least 1 slot), until it answers again`,
      });
    }
    this.#schedule();
  }

  #schedule(): void {
    if (this.#closed !== null || this.#timer !== null || this.#connecting !== null) return;
    const delay = this.#retryMs;
    this.#retryMs = Math.min(this.#retryMaxMs, this.#retryMs * 2);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#attempt(this.#connect(this.#options));
    }, delay);
    this.#timer.unref();
  }

  #attempt(connecting: Promise<SlotConnection>): void {
    this.#connecting = connecting.then(
      async (pg) => {
        this.#connecting = null;
        await this.#use(pg);
      },
      () => {
        this.#connecting = null;
        this.#stats.reconnectsFailed++;
        this.#schedule();
      },
    );
  }

  stats(): SharedSlotsStats {
    return { backend: this.backend, ...this.#stats, replicasLastSeen: this.#replicas() };
  }

  /** Stops re-connecting and ends the lock session (its slots are released by the server). Idempotent. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      if (this.#timer !== null) clearTimeout(this.#timer);
      if (this.#sessionsTimer !== null) clearInterval(this.#sessionsTimer);
      this.#timer = this.#sessionsTimer = null;
      await this.#connecting?.catch(() => {});
      const pg = this.#pg;
      this.#pg = null;
      await pg?.close();
    })();
    return this.#closed;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/**
 * The slot source a deployment should use: {@link SharedSlots} (PostgreSQL while it answers, the
 * limit held in this process while it does not) when it has a database, and a
 * {@link LocalSlotSource} (the limit held in this process alone) when it has none.
 * @throws {@link PooledSessionError} when the database answers through a transaction-pooling proxy; {@link InvalidInputError} for a bad option.
 */
export async function openSlotSource(
  connectionString: string | undefined,
  options: Omit<SharedSlotsOptions, 'connectionString'> = {},
): Promise<SlotSource & { close(): Promise<void> }> {
  if (connectionString === undefined || connectionString === '') {
    const local = new LocalSlotSource(options.now ? { now: options.now } : {});
    return Object.assign(local, { close: () => Promise.resolve() });
  }
  return SharedSlots.open({ ...options, connectionString });
}
