import type Database from 'better-sqlite3';
import { CapacityError, InternalError, InvalidInputError } from 'tidal-load';
import {
  blobToVector,
  decayedAffinities,
  FEED_CANDIDATE_BUDGET,
  FOR_YOU_BUDGETS,
  FOR_YOU_EXPLORE,
  FOR_YOU_WEIGHTS,
  hashString,
  HOT_GRAVITY,
  RECENCY_HALF_LIFE_MS,
  type QuerySchema,
  type RelatedTask,
  type UserQueryState,
} from 'tidal-query';
import { AFFINITY_HALF_LIFE_MS } from './schema.js';
import { CoEngagementIndex, RELATED_HALF_LIFE_MS, RELATED_PARTNERS, RELATED_WINDOW } from './co-engagement.js';
import type { SharedStateSink } from './shared-state.js';
import type { ItemFacts, User, UserEvent, UserSignalEvent } from './user-types.js';
import {
  BLOCKED,
  cloneState,
  ownAffinity,
  ownCreators,
  ownHidden,
  FOLLOWED,
  grow,
  loadUsers,
  MAX_AFFINITIES,
  MAX_USER_EDGES,
  movePreference,
  newUserState,
  recordOf,
  SEEN_LIMIT,
  stateOf,
  vectorBlob,
  type UserState,
} from './user-state.js';

/** The bounds and defaults of user state and of the personalized profiles, as documented (frozen). */
export const USER_DEFAULTS = Object.freeze({
  /** following, hot, rising, top: candidates visited below Full. */
  feedCandidateBudget: FEED_CANDIDATE_BUDGET,
  hotGravity: HOT_GRAVITY,
  /** related: partners kept per item, pairs made per signal, half-life of a pair's count. */
  relatedPartners: RELATED_PARTNERS,
  relatedWindow: RELATED_WINDOW,
  relatedHalfLifeMs: RELATED_HALF_LIFE_MS,
  seenLimit: SEEN_LIMIT,
  maxAffinities: MAX_AFFINITIES,
  maxEdges: MAX_USER_EDGES,
  affinityHalfLifeMs: AFFINITY_HALF_LIFE_MS,
  forYouWeights: FOR_YOU_WEIGHTS,
  /** for_you (a warm user): candidates per source, per level (indexed by `DegradationLevel`). */
  forYouBudgets: FOR_YOU_BUDGETS,
  explore: FOR_YOU_EXPLORE,
  recencyHalfLifeMs: RECENCY_HALF_LIFE_MS,
});

/** What the registry holds for a user whose state the shared records hold. */
const IN_SHARED = Symbol('in the shared records');

/**
 * Users and their state, on the main thread, mirrored in the user tables of the database file.
 *
 * Every change comes from a committed write event. `persistBatch` runs inside the batch's
 * transaction: it computes each touched user's next state on a copy, in event order, and writes
 * the rows; `applyBatch` runs after the commit and publishes the copies. A batch that fails to
 * commit leaves the published state as it was (its copies are dropped with the next batch). So
 * the state in memory is always exactly what the file holds, and an open after a crash loads the
 * state of the last committed batch.
 *
 * Once the state is shared with other threads (a worker module's), a user's published state is
 * its shared record alone: a batch rebuilds the user from it and stores the next one, and the
 * registry keeps the state itself only when the records had no room. Kept here as well, the
 * users of the personalization corpus took ~33 MB of this thread's heap beside their records.
 */
export class UserRegistry {
  readonly #db: Database.Database;
  readonly #schema: QuerySchema;
  readonly #lambda: number;
  readonly #rates: readonly number[];
  /**
   * The published users: their state, or {@link IN_SHARED} for a user whose record the shared
   * records hold (read back from there; see {@link share}).
   */
  readonly #byId = new Map<string, UserState | typeof IN_SHARED>();
  /** Entries of {@link #byId} that are states, not {@link IN_SHARED}. */
  #held = 0;
  /** Ids upserted by calls admitted so far minus those deleted: what a call may name. */
  readonly #declared = new Set<string>();
  /** Copies of the users the batch being committed changed, published after the commit. */
  #staged = new Map<string, UserState | null>();
  #nextKey = 1;
  /** Interned creator strings (one copy however many users hold an affinity to a creator). */
  readonly #creators = new Map<string, string>();
  /** Co-engagement between items, fed by the users' signals (profile `related`). */
  readonly #co: CoEngagementIndex;
  /** Where each batch's changes are published for other threads, once `share` was called. */
  #sink: SharedStateSink | null = null;
  readonly #stmt: {
    insert: Database.Statement;
    update: Database.Statement;
    setPreference: Database.Statement;
    remove: Database.Statement[];
    seenUpsert: Database.Statement;
    seenDelete: Database.Statement;
    hide: Database.Statement;
    unhide: Database.Statement;
    relate: Database.Statement;
    unrelate: Database.Statement;
    affinityUpsert: Database.Statement;
    affinityDelete: Database.Statement;
    idOf: Database.Statement;
    row: Database.Statement;
  };

  constructor(db: Database.Database, schema: QuerySchema) {
    this.#db = db;
    this.#schema = schema;
    this.#lambda = Math.LN2 / (schema.affinityHalfLifeMs ?? AFFINITY_HALF_LIFE_MS);
    this.#rates = schema.preferenceRates ?? schema.kinds.map(() => 0);
    this.#stmt = {
      insert: db.prepare('INSERT INTO users (key, id, metadata, embedding, preference) VALUES (?, ?, ?, ?, NULL)'),
      update: db.prepare('UPDATE users SET metadata = ?, embedding = ? WHERE key = ?'),
      setPreference: db.prepare('UPDATE users SET preference = ? WHERE key = ?'),
      remove: [
        'users WHERE key',
        'user_seen WHERE user',
        'user_hidden WHERE user',
        'user_creators WHERE user',
        'user_affinity WHERE user',
      ].map((t) => db.prepare(`DELETE FROM ${t} = ?`)),
      seenUpsert: db.prepare(
        'INSERT INTO user_seen (user, ordinal, pos) VALUES (?, ?, ?) ON CONFLICT(user, ordinal) DO UPDATE SET pos = excluded.pos',
      ),
      seenDelete: db.prepare('DELETE FROM user_seen WHERE user = ? AND ordinal = ?'),
      hide: db.prepare('INSERT OR IGNORE INTO user_hidden (user, ordinal) VALUES (?, ?)'),
      unhide: db.prepare('DELETE FROM user_hidden WHERE user = ? AND ordinal = ?'),
      relate: db.prepare('INSERT OR IGNORE INTO user_creators (user, relation, creator) VALUES (?, ?, ?)'),
      unrelate: db.prepare('DELETE FROM user_creators WHERE user = ? AND relation = ? AND creator = ?'),
      affinityUpsert: db.prepare(
        'INSERT INTO user_affinity (user, creator, score, at) VALUES (?, ?, ?, ?) ON CONFLICT(user, creator) DO UPDATE SET score = excluded.score, at = excluded.at',
      ),
      affinityDelete: db.prepare('DELETE FROM user_affinity WHERE user = ? AND creator = ?'),
      idOf: db.prepare('SELECT id FROM items WHERE ordinal = ?').pluck(),
      row: db.prepare('SELECT metadata, embedding FROM users WHERE key = ?'),
    };
    this.#load();
    this.#co = new CoEngagementIndex(db);
  }

  /** Loads every user and their state from the file (the recovery of the user tables). */
  #load(): void {
    for (const u of loadUsers(this.#db, this.#schema.embeddingDims, (c) => this.#intern(c))) {
      this.#put(u.id, u);
      this.#declared.add(u.id);
      if (u.key >= this.#nextKey) this.#nextKey = u.key + 1;
    }
  }

  #intern(creator: string): string {
    const known = this.#creators.get(creator);
    if (known !== undefined) return known;
    this.#creators.set(creator, creator);
    return creator;
  }

  get size(): number {
    return this.#byId.size;
  }

  /** Users whose state this registry holds itself: all of them, unless shared (see {@link share}). */
  get held(): number {
    return this.#held;
  }

  /** Sets (or with undefined deletes) a user's entry, keeping {@link held} counted. */
  #put(id: string, u: UserState | typeof IN_SHARED | undefined): void {
    const before = this.#byId.get(id);
    if (before !== undefined && before !== IN_SHARED) this.#held--;
    if (u === undefined) this.#byId.delete(id);
    else {
      this.#byId.set(id, u);
      if (u !== IN_SHARED) this.#held++;
    }
  }

  /** Items with a co-engagement list. */
  get relatedItems(): number {
    return this.#co.size;
  }

  // ---- admission ------------------------------------------------------------------------------

  /** Whether a call may name `id`: upserted by a call admitted earlier and not deleted since. */
  known(id: string): boolean {
    return this.#declared.has(id);
  }

  /** Refuses an id no admitted call upserted. */
  checkKnown(field: string, id: string): void {
    if (!this.#declared.has(id)) throw new InvalidInputError(field, 'the id of a user written with upsertUsers (and not deleted)', id);
  }

  /** Records the ids an admitted upsert or delete call makes known or unknown to later calls. */
  declare(ids: readonly string[], present: boolean): void {
    for (const id of ids) {
      if (present) this.#declared.add(id);
      else this.#declared.delete(id);
    }
  }

  /** Refuses a hide, block or follow that would take a user past {@link MAX_USER_EDGES}. */
  checkRoom(user: string, what: 'hidden' | 'blocked' | 'following'): void {
    const u = this.#byId.get(user);
    if (u === undefined) return;
    const size = u === IN_SHARED ? this.#sharedQuery(user)[what]!.length : u[what].size;
    if (size >= MAX_USER_EDGES) {
      throw new CapacityError(
        `${what === 'hidden' ? 'hidden items' : what === 'blocked' ? 'blocked creators' : 'followed creators'} of user ${user}`,
        MAX_USER_EDGES,
        `undo some first (unhide, unblock, unfollow)`,
      );
    }
  }

  // ---- commit ---------------------------------------------------------------------------------

  /** The state a batch event sees: its staged copy, or a copy of the published one (staged on first touch). */
  #touch(id: string): UserState | null {
    if (this.#staged.has(id)) return this.#staged.get(id)!;
    const u = this.#byId.get(id);
    if (u === undefined) return null;
    const copy = u === IN_SHARED ? this.#sharedState(id) : cloneState(u);
    this.#staged.set(id, copy);
    return copy;
  }

  /** A user the shared records hold, rebuilt from its record: a state of its own. */
  #sharedState(id: string): UserState {
    const r = this.#sink?.readUserRecord(id);
    if (r === undefined) throw new InternalError(`the state of user ${id} is missing from the shared records`);
    return stateOf(id, r, (c) => this.#intern(c));
  }

  /** A user the shared records hold, as a query reads it (decoded once per record version). */
  #sharedQuery(id: string): UserQueryState {
    const q = this.#sink?.readUser(id);
    if (q === undefined) throw new InternalError(`the state of user ${id} is missing from the shared records`);
    return q;
  }

  /** Starts a batch: copies left by a batch that failed to commit are dropped. */
  begin(): void {
    if (this.#staged.size > 0) this.#staged = new Map();
    this.#co.begin();
  }

  /** Ends a batch inside its transaction: writes what it changed of the co-engagement index. */
  finish(): void {
    this.#co.persist();
  }

  /**
   * Writes what one committed event changes, inside the batch's transaction; a signal's user
   * state moves by `facts` (the item as committed). Events that name a user deleted since they were
   * admitted change nothing.
   */
  persist(e: UserEvent | UserSignalEvent, facts: (ordinal: number, id: string) => ItemFacts): void {
    const s = this.#stmt;
    switch (e.type) {
      case 'user-upsert': {
        const u = this.#touch(e.id);
        if (u === null) {
          const key = this.#nextKey++;
          s.insert.run(key, e.id, JSON.stringify(e.metadata), vectorBlob(e.embedding));
          this.#staged.set(e.id, newUserState(key, e.id, e.embedding === null ? null : e.embedding.slice()));
          if (e.embedding !== null) s.setPreference.run(vectorBlob(e.embedding), key);
        } else {
          s.update.run(JSON.stringify(e.metadata), vectorBlob(e.embedding), u.key);
          if (u.preference === null && e.embedding !== null) {
            u.preference = e.embedding.slice();
            s.setPreference.run(vectorBlob(u.preference), u.key);
          }
        }
        return;
      }
      case 'user-delete': {
        const u = this.#touch(e.id);
        if (u === null) return;
        for (const stmt of s.remove) stmt.run(u.key);
        this.#staged.set(e.id, null);
        return;
      }
      case 'hide':
      case 'unhide': {
        const u = this.#touch(e.user);
        if (u === null) return;
        if (e.type === 'hide') {
          ownHidden(u).add(e.ordinal);
          s.hide.run(u.key, e.ordinal);
        } else {
          ownHidden(u).delete(e.ordinal);
          s.unhide.run(u.key, e.ordinal);
        }
        return;
      }
      case 'block':
      case 'unblock':
      case 'follow':
      case 'unfollow': {
        const u = this.#touch(e.user);
        if (u === null) return;
        const relation = e.type === 'block' || e.type === 'unblock' ? BLOCKED : FOLLOWED;
        const set = ownCreators(u, relation === BLOCKED ? 'blocked' : 'following');
        if (e.type === 'block' || e.type === 'follow') {
          set.add(this.#intern(e.creator));
          s.relate.run(u.key, relation, e.creator);
        } else {
          set.delete(e.creator);
          s.unrelate.run(u.key, relation, e.creator);
        }
        return;
      }
      case 'signal': {
        if (e.user === null) return;
        const u = this.#touch(e.user);
        if (u === null) return;
        const rate = this.#rates[e.kind] ?? 0;
        // Pairs with the user's latest other items, before the seen set moves (see RELATED_WINDOW).
        if (rate >= 0) {
          let paired = 0;
          for (let i = u.seenCount - 1; i >= 0 && paired < RELATED_WINDOW; i--) {
            const other = u.seen[i]!;
            if (other === e.ordinal) continue;
            this.#co.record(e.ordinal, other, e.at);
            paired++;
          }
        }
        this.#see(u, e.ordinal);
        if (rate === 0) return;
        const item = facts(e.ordinal, e.id);
        if (item.embedding !== null && movePreference(u, item.embedding, rate)) s.setPreference.run(vectorBlob(u.preference), u.key);
        if (item.creator !== null) this.#moveAffinity(u, item.creator, rate > 0 ? e.weight : -e.weight, e.at);
        return;
      }
    }
  }

  /** Makes `ordinal` the newest of the seen set, dropping the oldest past {@link SEEN_LIMIT}. */
  #see(u: UserState, ordinal: number): void {
    const s = this.#stmt;
    let at = -1;
    for (let i = u.seenCount - 1; i >= 0; i--) {
      if (u.seen[i] === ordinal) {
        at = i;
        break;
      }
    }
    if (at >= 0) {
      u.seen.copyWithin(at, at + 1, u.seenCount);
      u.seenCount--;
    } else if (u.seenCount === SEEN_LIMIT) {
      s.seenDelete.run(u.key, u.seen[0]!);
      u.seen.copyWithin(0, 1, u.seenCount);
      u.seenCount--;
    }
    if (u.seen.length === u.seenCount) u.seen = grow(u.seen);
    u.seen[u.seenCount++] = ordinal;
    s.seenUpsert.run(u.key, ordinal, u.seenPos++);
  }

  /** S ← S·e^(−λ·dt) + w (an earlier event is decayed to the reference time instead); bounded per user. */
  #moveAffinity(u: UserState, creator: string, w: number, at: number): void {
    const s = this.#stmt;
    const c = this.#intern(creator);
    const affinity = ownAffinity(u);
    const i = affinity.indexOf(c);
    if (i < 0) {
      affinity.add(c, w, at);
      if (affinity.size > MAX_AFFINITIES) {
        // The smallest affinity at the latest reference time goes (ties: the first creator by name).
        const ref = affinity.latest();
        let worst = -1;
        let worstValue = Infinity;
        for (let j = 0; j < affinity.size; j++) {
          const v = affinity.score(j) * Math.exp(-this.#lambda * (ref - affinity.at(j)));
          if (v < worstValue || (v === worstValue && worst >= 0 && affinity.creator(j) < affinity.creator(worst))) {
            worst = j;
            worstValue = v;
          }
        }
        const gone = affinity.creator(worst);
        affinity.removeAt(worst);
        s.affinityDelete.run(u.key, gone);
        if (gone === c) return;
      }
      s.affinityUpsert.run(u.key, c, w, at);
      return;
    }
    const score = affinity.score(i);
    const last = affinity.at(i);
    if (at >= last) affinity.set(i, score * Math.exp(-this.#lambda * (at - last)) + w, at);
    else affinity.set(i, score + w * Math.exp(-this.#lambda * (last - at)), last);
    s.affinityUpsert.run(u.key, c, affinity.score(i), affinity.at(i));
  }

  /** Publishes the state the committed batch wrote. */
  apply(): void {
    const sink = this.#sink;
    for (const [id, u] of this.#staged) {
      if (u === null) {
        this.#put(id, undefined);
        sink?.user(id, null);
      } else {
        this.#put(id, sink?.user(id, recordOf(u, this.#lambda)) === true ? IN_SHARED : u);
      }
    }
    this.#staged = new Map();
    this.#co.apply();
  }

  // ---- reads ----------------------------------------------------------------------------------

  /** The stored user and their state, or undefined. */
  get(id: string, nowMs: number): User | undefined {
    const held = this.#byId.get(id);
    if (held === undefined) return undefined;
    const u = held === IN_SHARED ? this.#sharedState(id) : held;
    const row = this.#stmt.row.get(u.key) as { metadata: string; embedding: Buffer | null };
    const embedding =
      row.embedding !== null && row.embedding.byteLength === this.#schema.embeddingDims * 4 ? blobToVector(row.embedding) : null;
    const idOf = (o: number): string => (this.#stmt.idOf.get(o) as string | undefined) ?? `#${o}`;
    const seen: string[] = [];
    for (let i = u.seenCount - 1; i >= 0; i--) seen.push(idOf(u.seen[i]!));
    const affinity: Record<string, number> = {};
    const a = u.affinity;
    const order = Array.from({ length: a.size }, (_, i) => i).sort((x, y) => (a.creator(x) < a.creator(y) ? -1 : 1));
    for (const i of order) affinity[a.creator(i)] = a.score(i) * Math.exp(-this.#lambda * Math.max(0, nowMs - a.at(i)));
    const out: User = {
      id: u.id,
      metadata: JSON.parse(row.metadata) as Record<string, unknown>,
      preference: u.preference === null ? null : u.preference.slice(),
      seen,
      hidden: [...u.hidden].map(idOf).sort(),
      blocked: [...u.blocked].sort(),
      following: [...u.following].sort(),
      affinity,
    };
    if (embedding !== null) out.embedding = embedding;
    return out;
  }

  /** The co-engagement list profile `related` ranks for the item `ordinal`. */
  relatedTask(ordinal: number): RelatedTask {
    return this.#co.task(ordinal);
  }

  /** The item's co-engagement partners (ordinals) and their counts decayed to `nowMs`. */
  coEngagement(ordinal: number, nowMs: number): Map<number, number> {
    return this.#co.partners(ordinal, nowMs);
  }

  /**
   * The state a query for `id` sends its worker; `unseen` and `following` add the seen set and
   * the followed creators. Cached per user until their state changes.
   */
  queryState(field: string, id: string, unseen: boolean, following: boolean): UserQueryState {
    const u = this.#byId.get(id);
    if (u === undefined) throw new InvalidInputError(field, 'the id of a user written with upsertUsers (and not deleted)', id);
    const base = u === IN_SHARED ? this.#sharedQuery(id) : this.#queryBase(u);
    return { ...base, seen: unseen ? base.seen : null, following: following ? base.following : null };
  }

  /** A user's whole query state (seen set and followed creators included), cached until it changes. */
  #queryBase(u: UserState): UserQueryState {
    return (u.query ??= this.#queryStateOf(u));
  }

  /**
   * A user's whole query state, made anew, for a user this registry holds (no worker module, or no
   * room in the shared records). It equals what `decodeUserState` reads from the user's record.
   */
  #queryStateOf(u: UserState): UserQueryState {
    const a = u.affinity;
    return {
      hidden: Int32Array.from(u.hidden),
      blocked: [...u.blocked],
      seen: u.seen.slice(0, u.seenCount),
      following: [...u.following],
      preference: u.preference,
      affinityCreators: a.names(),
      affinityScores: decayedAffinities(a.scores(), a.times(), this.#lambda),
      idHash: hashString(u.id),
    };
  }

  /**
   * Publishes every user's state and every co-engagement list into `sink` (the state other threads
   * read, see shared-state.ts), and from now on what each batch changes, after its commit; a user or
   * a list stored there is dropped here and read back when a batch changes it. `itemId` names an
   * item by its ordinal.
   */
  share(sink: SharedStateSink, itemId: (ordinal: number) => string | undefined): void {
    this.#sink = sink;
    for (const [id, u] of this.#byId) {
      if (u !== IN_SHARED && sink.user(id, recordOf(u, this.#lambda))) this.#put(id, IN_SHARED);
    }
    this.#co.share(
      (ordinal, task) => {
        const id = itemId(ordinal);
        return id !== undefined && sink.related(id, task);
      },
      (ordinal) => {
        const id = itemId(ordinal);
        return id === undefined ? undefined : sink.readRelated(id);
      },
    );
  }
}
