/**
 * The read state of users, sessions and co-engagement, once per process: the database's thread
 * publishes it into shared records (tidal-query's `SharedRecordsWriter`) after each commit, before
 * the commit's promises resolve; every other thread reads it without a message, so a query naming
 * a user, a session or an item (`for_you`, `following`, `related`, `unseen`, a session's retrieve)
 * is answered in the thread that took it. An acknowledged write is visible to the next read in any
 * thread, as on the database's thread.
 *
 * Keys: `u:<user id>` (the user's query state), `s:<session id>` (agent, expiry, seen ordinals),
 * `r:<item id>` (the item's co-engagement list). A reader caches what it decoded per key and
 * reuses it while the key points at the same record.
 */
import {
  SharedRecordsReader,
  SharedRecordsWriter,
  decodeRelated,
  decodeSession,
  decodeUserRecord,
  decodeUserState,
  encodeRelated,
  encodeSession,
  encodeUserState,
  type FoundRecord,
  type RelatedTask,
  type SessionRecord,
  type SharedRecordsBuffers,
  type SharedRecordsStats,
  type UserQueryState,
  type UserRecord,
} from 'tidal-query';

/** What the registries publish into (the database's thread only); each says whether the record was stored. */
export interface SharedStateSink {
  user(id: string, state: UserRecord | null): boolean;
  /** A user `user` stored, as a query reads it (decoded once per record version). */
  readUser(id: string): UserQueryState | undefined;
  /** A user `user` stored, read back whole as a copy of its own (the registry keeps no other copy). */
  readUserRecord(id: string): UserRecord | undefined;
  session(id: string, record: SessionRecord | null): boolean;
  related(itemId: string, task: RelatedTask | null): boolean;
  /** A list `related` stored, read back (the co-engagement index keeps no copy of what is stored). */
  readRelated(itemId: string): RelatedTask | undefined;
}

/** The writer: the database's thread. */
export class SharedStateWriter implements SharedStateSink {
  readonly #records = new SharedRecordsWriter();
  /** This thread's own reads of what it stored (never inside a write: the writer holds no section open between calls). */
  readonly #reader: SharedStateReader;
  /** Called once when a record finds no room: reads of missing keys then go to the database's thread. */
  #onFull: (() => void) | null;

  constructor(onFull: () => void) {
    this.#onFull = onFull;
    this.#reader = new SharedStateReader(this.#records.buffers);
  }

  get buffers(): SharedRecordsBuffers {
    return this.#records.buffers;
  }

  get stats(): SharedRecordsStats {
    return this.#records.stats;
  }

  /** Stores `value` under `key` (removes the key for null); false when it was not stored. */
  #set(key: string, value: Uint8Array | null): boolean {
    if (value === null) {
      this.#records.delete(key);
      return false;
    }
    if (this.#records.set(key, value)) return true;
    if (this.#onFull !== null) {
      const onFull = this.#onFull;
      this.#onFull = null;
      onFull();
    }
    return false;
  }

  user(id: string, state: UserRecord | null): boolean {
    return this.#set(`u:${id}`, state === null ? null : encodeUserState(state));
  }

  readUser(id: string): UserQueryState | undefined {
    return this.#reader.user(id);
  }

  readUserRecord(id: string): UserRecord | undefined {
    return this.#reader.userRecord(id);
  }

  session(id: string, record: SessionRecord | null): boolean {
    return this.#set(`s:${id}`, record === null ? null : encodeSession(record));
  }

  related(itemId: string, task: RelatedTask | null): boolean {
    return this.#set(`r:${itemId}`, task === null || task.n === 0 ? null : encodeRelated(task));
  }

  readRelated(itemId: string): RelatedTask | undefined {
    return this.#reader.related(itemId);
  }
}

/** A decoded record kept beside the record it came from. */
interface Cached<T> {
  found: FoundRecord;
  value: T;
}

/** Decoded records kept per reader thread; past this many the cache starts again. */
const CACHE_LIMIT = 4096;

/** A reader: any thread. */
export class SharedStateReader {
  readonly #records: SharedRecordsReader;
  readonly #cache = new Map<string, Cached<unknown>>();

  constructor(buffers: SharedRecordsBuffers) {
    this.#records = new SharedRecordsReader(buffers);
  }

  /** Whether a record once found no room: a key missing here may exist on the database's thread. */
  get incomplete(): boolean {
    return this.#records.full;
  }

  #get<T>(key: string, decode: (b: Uint8Array) => T): T | undefined {
    const cached = this.#cache.get(key) as Cached<T> | undefined;
    const found = this.#records.get(key, cached?.found);
    if (found === undefined) {
      if (cached !== undefined) this.#cache.delete(key);
      return undefined;
    }
    if (cached !== undefined && cached.found === found) return cached.value;
    const value = decode(found.value);
    if (this.#cache.size >= CACHE_LIMIT) this.#cache.clear();
    this.#cache.set(key, { found, value });
    return value;
  }

  user(id: string): UserQueryState | undefined {
    return this.#get(`u:${id}`, decodeUserState);
  }

  /** The whole user record, decoded anew (not cached: the caller changes it). */
  userRecord(id: string): UserRecord | undefined {
    const found = this.#records.get(`u:${id}`);
    return found === undefined ? undefined : decodeUserRecord(found.value);
  }

  session(id: string): SessionRecord | undefined {
    return this.#get(`s:${id}`, decodeSession);
  }

  related(itemId: string): RelatedTask | undefined {
    return this.#get(`r:${itemId}`, decodeRelated);
  }
}
