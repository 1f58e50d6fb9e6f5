import type Database from 'better-sqlite3';
import { InvalidInputError, type ForeignBatch, type ReplicatedEvent, type WarningSink, type WriterFailedError } from 'tidal-load';
import { GroupCommit, type AckMark, type MemoryGuard, type SignalLog, type SlotCheckpoint } from 'tidal-wal';
import { ItemsWriter, SLOT_BYTES, type QuerySchema, type SignalStore, type StoredItem } from 'tidal-query';
import { ItemOrdinals } from './item-ordinals.js';
import type { FilledOptions } from './options.js';
import type { SessionRegistry } from './sessions.js';
import type { ItemFacts, UserEvent, UserInput } from './user-types.js';
import type { UserRegistry } from './users.js';
import { META, type Meta } from 'tidal-wal/storage';
import type { ItemInput, SignalInput } from './types.js';
import { checkId, checkMetadata, checkVector } from './validate.js';
import type { ReplicaState, ReplMarkEvent } from './replication.js';
import { foreignWrite, toReplicated, type ForeignTarget } from './replicated-events.js';
import { checkSignals, validateItem, type SessionCall, type SignalEvent, type WriteEvent } from './write-events.js';

export type { DeleteEvent, SessionCall, SignalEvent, UpsertEvent, WriteEvent } from './write-events.js';

/** What {@link WritePath} starts from: the state recovery rebuilt. */
export interface WritePathStart {
  readonly lastSeq: number;
  readonly itemsVersion: number;
  /** Signals in the log after the last checkpoint. */
  readonly eventsSinceCheckpoint: number;
  /** The users and their state, loaded from the user tables. */
  readonly users: UserRegistry;
}

export interface WritePathDeps {
  readonly db: Database.Database;
  readonly meta: Meta;
  readonly log: SignalLog;
  readonly checkpointRows: SlotCheckpoint;
  readonly store: SignalStore;
  readonly sessions: SessionRegistry;
  readonly users: UserRegistry;
  readonly memoryGuard: MemoryGuard | null;
  readonly ackMark: AckMark | null;
  readonly onWarning: WarningSink;
  /** Where the items version is published for other threads, after each commit that moves it. */
  readonly itemsVersionCell?: BigInt64Array;
  /** The replication state, when the database replicates (its own batches go to the outbox). */
  readonly replica?: ReplicaState | null;
}

/**
 * The write path of one database: turns validated calls into events, hands out item ordinals and
 * reserves signal slots at admission, commits batches through the group commit and applies them to
 * the signal store and the sessions afterwards, and checkpoints the signal state.
 *
 * Everything that can refuse a write (validation, capacity, backpressure, the memory guard) runs
 * before the write is queued, so a refused call leaves nothing behind. What runs after a commit
 * cannot refuse anything: the batch is durable by then. If it throws anyway (a bug), the group
 * commit fails closed (see {@link GroupCommit}): the batch's promises still resolve, later writes
 * are refused with `WriterFailedError`, and the in-memory state is never checkpointed again, so
 * the next open rebuilds exactly the acknowledged writes from the log.
 */
export class WritePath {
  readonly #o: FilledOptions;
  readonly #schema: QuerySchema;
  readonly #deps: WritePathDeps;
  readonly #items: ItemsWriter;
  readonly #kindIndex: ReadonlyMap<string, number>;
  readonly #ordinals: ItemOrdinals;
  readonly #gc: GroupCommit<WriteEvent>;
  #itemsVersion: number;
  #eventsSinceCheckpoint: number;
  /** Scratch arrays for the pairs of one call's slot reservation. */
  #reserveOrdinals = new Int32Array(1024);
  #reserveKinds = new Int32Array(1024);

  constructor(o: FilledOptions, deps: WritePathDeps, start: WritePathStart) {
    this.#o = o;
    this.#schema = o.schema;
    this.#deps = deps;
    this.#items = new ItemsWriter(deps.db);
    this.#kindIndex = new Map(o.schema.kinds.map((k, i) => [k.name, i]));
    this.#ordinals = new ItemOrdinals(this.#items, o.capacity.items);
    this.#itemsVersion = start.itemsVersion;
    if (deps.itemsVersionCell !== undefined) Atomics.store(deps.itemsVersionCell, 0, BigInt(start.itemsVersion));
    this.#eventsSinceCheckpoint = start.eventsSinceCheckpoint;
    this.#gc = new GroupCommit<WriteEvent>(
      deps.db,
      { commit: (events, firstSeq) => this.#commit(events, firstSeq), afterCommit: (events) => this.#afterCommit(events) },
      start.lastSeq,
      o.groupCommit,
      { memoryGuard: deps.memoryGuard, ackMark: deps.ackMark, onFailure: (err) => this.#onFailure(err) },
    );
  }

  /** The items version queries must see to include every acknowledged item write. */
  get itemsVersion(): number {
    return this.#itemsVersion;
  }

  get groupCommit(): GroupCommit<WriteEvent> {
    return this.#gc;
  }

  /** The error every write is refused with since the writer failed closed, or null. */
  get failure(): WriterFailedError | null {
    return this.#gc.failure;
  }

  ordinalOf(id: string): number | undefined {
    return this.#ordinals.of(id);
  }

  /** The id an ordinal was handed out to, or undefined. */
  idOf(ordinal: number): string | undefined {
    return this.#ordinals.idOf(ordinal);
  }

  item(id: string): StoredItem | undefined {
    return this.#items.get(id);
  }

  // ---- calls -> events ----------------------------------------------------------------------

  /** Inserts or replaces items, all or none; resolves when they are durable. */
  upsertItems(items: readonly ItemInput[]): Promise<number> {
    // Validated and given ordinals only once the write is admitted (see signals()).
    return this.#gc.enqueue(() => {
      const now = this.#o.clock();
      const valid = items.map((it, i) => validateItem(it, `items[${i}]`, now, this.#schema));
      const mark = this.#ordinals.begin();
      try {
        return valid.map((v): WriteEvent => {
          const { ordinal, known } = this.#ordinals.take(v.id);
          return { type: 'upsert', item: { ...v, ordinal }, replacing: known };
        });
      } catch (err) {
        this.#ordinals.rollback(mark);
        throw err;
      }
    });
  }

  /** Deletes an item by id; resolves at once when the id was never seen. */
  delete(id: string): Promise<number | undefined> {
    const ordinal = this.#ordinals.of(id);
    if (ordinal === undefined) return Promise.resolve(undefined);
    return this.#gc.enqueue([{ type: 'delete', ordinal, id }]);
  }

  /**
   * Records signals, all or none; resolves with the first one's sequence number once durable.
   *
   * The events are built by a function `GroupCommit.enqueue` runs only once the write is admitted:
   * a write refused for backpressure costs no per-signal work (under overload most writes are
   * refused, and validating them first cost about a quarter of the accepted throughput). The whole
   * call is validated before any ordinal is handed out, and ordinals and signal slots are reserved
   * before it is queued, all or none: a store that cannot hold the call refuses it with
   * `CapacityError` here, and nothing after the commit can run out of room.
   */
  signals(batch: readonly SignalInput[], from: SessionCall | null): Promise<number> {
    return this.#gc.enqueue(() => this.#signalEvents(batch, from));
  }

  #signalEvents(batch: readonly SignalInput[], from: SessionCall | null): SignalEvent[] {
    const events = checkSignals(batch, from, this.#o.clock(), this.#kindIndex, (field, user) => this.#checkUser(field, user));
    this.#reserve(events);
    return events;
  }

  /**
   * Hands out the ordinals of new ids and reserves the signal slot of every (ordinal, kind) pair of
   * the call, all or none: on `CapacityError` the new ordinals are taken back and no slot is held.
   */
  #reserve(events: SignalEvent[]): void {
    const n = events.length;
    if (this.#reserveOrdinals.length < n) {
      this.#reserveOrdinals = new Int32Array(n);
      this.#reserveKinds = new Int32Array(n);
    }
    const ordinals = this.#reserveOrdinals;
    const kinds = this.#reserveKinds;
    const ids = this.#ordinals;
    const mark = ids.begin();
    try {
      // Filled in place: this runs for every signal on the hottest path.
      for (let i = 0; i < n; i++) {
        const e = events[i]!;
        e.ordinal = ids.of(e.id) ?? ids.take(e.id).ordinal;
        ordinals[i] = e.ordinal;
        kinds[i] = e.kind;
      }
      this.#deps.store.reserve(ordinals, kinds, n);
    } catch (err) {
      ids.rollback(mark);
      throw err;
    }
  }

  #checkUser(field: string, user: unknown): string {
    const id = checkId(field, user);
    this.#deps.users.checkKnown(field, id);
    return id;
  }

  // ---- users --------------------------------------------------------------------------------

  /** Inserts or replaces users, all or none; resolves when they are durable. */
  upsertUsers(users: readonly UserInput[]): Promise<number> {
    return this.#gc.enqueue(() => {
      const userSchema = { ...this.#schema, metadata: {} };
      const events = users.map((u, i): UserEvent => {
        const at = `users[${i}]`;
        if (typeof u !== 'object' || u === null) throw new InvalidInputError(at, 'a user object', u);
        return {
          type: 'user-upsert',
          id: checkId(`${at}.id`, u.id),
          metadata: checkMetadata(`${at}.metadata`, u.metadata, userSchema),
          embedding:
            u.embedding === undefined || u.embedding === null
              ? null
              : checkVector(`${at}.embedding`, u.embedding, this.#schema.embeddingDims),
        };
      });
      this.#deps.users.declare(
        events.map((e) => (e as { id: string }).id),
        true,
      );
      return events;
    });
  }

  /** Deletes a user and their state; resolves at once when no admitted call wrote the id. */
  deleteUser(id: string): Promise<number | undefined> {
    if (!this.#deps.users.known(id)) return Promise.resolve(undefined);
    return this.#gc.enqueue(() => {
      this.#deps.users.declare([id], false);
      return [{ type: 'user-delete', id }];
    });
  }

  /** Hides an item from a user, or undoes it. The item id gets an ordinal if it has none. */
  hide(op: 'hide' | 'unhide', user: unknown, item: unknown): Promise<number> {
    return this.#gc.enqueue(() => {
      const u = this.#checkUser('user', user);
      const id = checkId('item', item);
      if (op === 'hide') this.#deps.users.checkRoom(u, 'hidden');
      this.#ordinals.begin();
      const ordinal = this.#ordinals.take(id).ordinal;
      return [{ type: op, user: u, ordinal, item: id }];
    });
  }

  /** Blocks or follows a creator for a user, or undoes it. */
  relate(op: 'block' | 'unblock' | 'follow' | 'unfollow', user: unknown, creator: unknown): Promise<number> {
    return this.#gc.enqueue(() => {
      if (this.#schema.creatorField === undefined) {
        throw new InvalidInputError('creator', 'absent: the schema names no creatorField, so items have no creator to ' + op, creator);
      }
      const u = this.#checkUser('user', user);
      const c = checkId('creator', creator);
      if (op === 'block') this.#deps.users.checkRoom(u, 'blocked');
      if (op === 'follow') this.#deps.users.checkRoom(u, 'following');
      return [{ type: op, user: u, creator: c }];
    });
  }

  /** An item's embedding and creator as committed so far in this transaction. */
  #facts(_ordinal: number, id: string): ItemFacts {
    const row = this.#items.get(id);
    if (row === undefined) return { embedding: null, creator: null };
    const field = this.#schema.creatorField;
    const creator = field === undefined ? undefined : row.metadata[field];
    return { embedding: row.embedding, creator: typeof creator === 'string' ? creator : null };
  }

  // ---- foreign batches ----------------------------------------------------------------------

  /**
   * Queues batches of other replicas, each as one write (its mark first, then its events), and
   * resolves with how many were queued once all are durable. A batch not above what was applied of
   * its origin is dropped here, and one whose `prev` was not applied is held back (a gap the
   * origin fills by appending its batches again): the caller queues again only after the previous
   * call settled, so the committed positions are the whole truth.
   */
  async applyForeign(batches: readonly ForeignBatch[]): Promise<number> {
    const replica = this.#deps.replica;
    if (replica === undefined || replica === null)
      throw new InvalidInputError('replication', 'a database opened with a replication link', null);
    const seen = new Map<string, number>();
    const writes: Promise<number>[] = [];
    for (const { batch, position } of batches) {
      if (batch.origin === replica.replicaId) continue;
      const applied = seen.get(batch.origin) ?? replica.appliedSeq(batch.origin);
      if (batch.seq <= applied) continue;
      if (!replica.inOrder(batch.origin, batch.seq, batch.prev, applied)) continue;
      let queued = false;
      writes.push(
        this.#gc.enqueue(() => {
          const events = this.#foreignEvents(batch.origin, batch.seq, applied, batch.at, position, batch.events);
          queued = true;
          return events;
        }),
      );
      // A batch refused (backpressure, capacity) stops the call: a later batch of its origin
      // committing would move the origin's position past the refused one, which would never be applied.
      if (!queued) break;
      seen.set(batch.origin, batch.seq);
    }
    const settled = await Promise.allSettled(writes);
    const failed = settled.find((r) => r.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    return writes.length;
  }

  /** The events one foreign batch becomes here: ordinals and signal slots are this replica's own. */
  #foreignEvents(
    origin: string,
    seq: number,
    after: number,
    at: number,
    position: string,
    events: readonly ReplicatedEvent[],
  ): WriteEvent[] {
    const mark = this.#ordinals.begin();
    try {
      const out = foreignWrite(origin, events, this.#foreignTarget(), this.#deps.store);
      return [{ type: 'repl-mark', origin, seq, at, position, count: out.length, after }, ...out];
    } catch (err) {
      this.#ordinals.rollback(mark);
      throw err;
    }
  }

  // ---- commit -------------------------------------------------------------------------------

  #commit(events: readonly WriteEvent[], firstSeq: number): void {
    let seq = firstSeq;
    let version = this.#itemsVersion;
    const users = this.#deps.users;
    const replica = this.#deps.replica ?? null;
    const now = replica === null ? 0 : this.#o.clock();
    /** Events left of the foreign batch being committed (0: the event is this replica's own). */
    let foreign = 0;
    /** Events left of a foreign batch being dropped. */
    let drop = 0;
    /** What this transaction's marks applied of each origin so far. */
    let applied: Map<string, number> | null = null;
    const facts = (ordinal: number, id: string): ItemFacts => this.#facts(ordinal, id);
    users.begin();
    replica?.beginBatch();
    for (const e of events) {
      if (drop > 0) {
        drop--;
        seq++;
        continue;
      }
      if (e.type === 'repl-mark') {
        if ((applied?.get(e.origin) ?? replica!.appliedSeq(e.origin)) !== e.after) {
          e.dropped = true;
          drop = e.count;
        } else {
          replica!.mark(e, now);
          (applied ??= new Map()).set(e.origin, e.seq);
          foreign = e.count;
        }
        seq++;
        continue;
      }
      const own = foreign === 0;
      if (!own) foreign--;
      let stamp = now;
      if (e.type === 'signal') {
        if (this.#ordinals.unpersisted.has(e.ordinal)) this.#items.ensureKey(e.ordinal, e.id);
        this.#deps.log.appendAt(seq, e);
        // The facts the user's state moves by are the ones the origin read: a follower may not
        // hold the item yet, or hold another version of it, when the signal arrives.
        if (e.user !== null) users.persist(e, e.facts !== undefined ? () => e.facts! : (o, id) => (e.facts = facts(o, id)));
      } else if (e.type === 'upsert') {
        const won = replica === null ? now : replica.itemWrite(e.item.id, now, e.stamp ?? null);
        if (won === null) {
          e.skipped = true;
          if (this.#ordinals.unpersisted.has(e.item.ordinal)) this.#items.ensureKey(e.item.ordinal, e.item.id);
        } else {
          stamp = won;
          this.#items.upsert(e.item, ++version, e.replacing);
        }
      } else if (e.type === 'delete') {
        const won = replica === null ? now : replica.itemWrite(e.id, now, e.stamp ?? null);
        if (won !== null) stamp = won;
        if (won === null || e.ordinal < 0) e.skipped = true;
        else this.#items.delete(e.ordinal, ++version);
      } else {
        if ((e.type === 'hide' || e.type === 'unhide') && this.#ordinals.unpersisted.has(e.ordinal))
          this.#items.ensureKey(e.ordinal, e.item);
        users.persist(e, facts);
      }
      if (own && replica !== null) replica.record(toReplicated(e, stamp, this.#schema.kinds));
      seq++;
    }
    replica?.endBatch(now);
    users.finish();
    this.#deps.sessions.persistBatch(events);
    this.#deps.log.setLastSeq(seq - 1);
    // Log rows a checkpoint covers are deleted here, two per event written: deleting costs about
    // what inserting does, so the backlog a checkpoint leaves drains within half a checkpoint
    // interval, and no single batch pays for a million deletes.
    this.#deps.log.reclaim(2 * events.length);
  }

  /** The ordinals, kinds and users a foreign event is mapped onto (see replicated-events.ts). */
  #foreignTarget(): ForeignTarget {
    return {
      kindIndex: this.#kindIndex,
      existing: (id) => this.#ordinals.of(id),
      ordinal: (id) => this.#ordinals.take(id),
      declareUser: (id, present) => this.#deps.users.declare([id], present),
    };
  }

  #afterCommit(events: readonly WriteEvent[]): void {
    const store = this.#deps.store;
    const rows = this.#deps.checkpointRows;
    this.#deps.sessions.applyBatch(events);
    this.#deps.users.apply();
    let signals = 0;
    let marks: ReplMarkEvent[] | null = null;
    let drop = 0;
    for (const e of events) {
      if (drop > 0) {
        drop--;
        continue;
      }
      if (e.type === 'signal') {
        store.apply(e.ordinal, e.kind, e.weight, e.at);
        rows.markDirty(store.slotOf(e.ordinal, e.kind));
        signals++;
        this.#ordinals.unpersisted.delete(e.ordinal);
      } else if (e.type === 'upsert' || e.type === 'delete') {
        if (e.skipped === true) continue;
        this.#itemsVersion++;
        if (e.type === 'upsert') this.#ordinals.unpersisted.delete(e.item.ordinal);
      } else if (e.type === 'hide' || e.type === 'unhide') {
        this.#ordinals.unpersisted.delete(e.ordinal);
      } else if (e.type === 'repl-mark') {
        if (e.dropped === true) drop = e.count;
        else (marks ??= []).push(e);
      }
    }
    this.#deps.replica?.committed(marks ?? [], this.#o.clock());
    if (this.#deps.itemsVersionCell !== undefined) Atomics.store(this.#deps.itemsVersionCell, 0, BigInt(this.#itemsVersion));
    this.#eventsSinceCheckpoint += signals;
    // The group commit advances nextSeq before this hook runs, so nextSeq − 1 is this batch's last
    // event. A higher number would mark events not yet written as checkpointed, and replay would
    // skip them after the next crash.
    if (this.#eventsSinceCheckpoint >= this.#o.checkpointEveryEvents) this.#tryCheckpoint();
  }

  /**
   * A checkpoint that fails (the disk is full, an I/O error) rolls back whole: the log still covers
   * every event, so nothing is lost, and the next one is tried after another interval.
   */
  #tryCheckpoint(): void {
    try {
      this.checkpoint();
    } catch (err) {
      this.#eventsSinceCheckpoint = 0;
      this.#deps.onWarning({
        code: 'TIDAL_CHECKPOINT_FAILED',
        message: `the signal-state checkpoint failed and was rolled back (${(err as Error).message}); the log still holds every event, and the next checkpoint is tried after another ${this.#o.checkpointEveryEvents} events`,
      });
    }
  }

  /**
   * Writes the signal slots changed since the last checkpoint and marks the log through the last
   * committed event as covered, in one transaction. Runs between batches, when the store reflects
   * exactly the events committed so far; never after the writer failed, when it may not.
   */
  checkpoint(): void {
    if (this.#gc.failure !== null) return;
    const { db, store, checkpointRows, meta, log } = this.#deps;
    const throughSeq = this.#gc.nextSeq - 1;
    db.transaction(() => {
      checkpointRows.write(store.arena.slots, store.slotsUsed(), SLOT_BYTES);
      meta.set(
        META.kinds,
        this.#schema.kinds.map((k) => k.name),
      );
      log.checkpointThrough(throughSeq);
    })();
    checkpointRows.committed();
    this.#eventsSinceCheckpoint = 0;
  }

  #onFailure(err: WriterFailedError): void {
    this.#deps.onWarning({ code: 'TIDAL_WRITER_STOPPED', message: err.message });
  }

  /** Commits every queued write now. */
  flush(): void {
    this.#gc.flushSync();
  }

  /** Reads the stored item ids into the ordinal map after the open (see ItemOrdinals). */
  fillIds(): void {
    this.#ordinals.fillInBackground();
  }

  /**
   * For a caller about to name `count` items by ordinal: reads every stored id now when one pass over
   * the id index (~1.3 µs an id) costs less than `count` indexed reads (~3 µs).
   */
  willName(count: number): void {
    if (!this.#ordinals.complete && count * 3 >= this.#ordinals.size * 1.3) this.#ordinals.fillNow();
  }

  /** Whether every stored id is in the ordinal map. */
  get idsFilled(): boolean {
    return this.#ordinals.complete;
  }

  /** Commits what is queued, refuses new writes, and checkpoints the signal state when asked. */
  close(checkpoint: boolean): void {
    this.#ordinals.stopFilling();
    this.#gc.close();
    if (checkpoint && this.#eventsSinceCheckpoint > 0) this.checkpoint();
  }
}
