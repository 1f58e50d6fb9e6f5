/**
 * The user API's types (a user as written and as stored) and the write events a user call becomes,
 * shared by the write path and the user registry (users.ts).
 */

/** A user as written. */
export interface UserInput {
  /** 1 to 512 characters. */
  id: string;
  /** Any JSON object up to 64 KiB. */
  metadata?: Record<string, unknown>;
  /**
   * `schema.embeddingDims` finite numbers, not all zero: where the user's preference vector starts
   * (the signals then move it); without one, the first signal of a positive kind on an item with an
   * embedding sets it.
   */
  embedding?: readonly number[] | Float32Array | null;
}

/** A user as stored, with the state their writes built. */
export interface User {
  id: string;
  metadata: Record<string, unknown>;
  embedding?: Float32Array;
  /** The preference vector, or null when nothing set it yet (the `for_you` cold start). */
  preference: Float32Array | null;
  /** The seen set, newest first (item ids). At most `USER_DEFAULTS.seenLimit` (512). */
  seen: string[];
  /** Hidden item ids, sorted. */
  hidden: string[];
  /** Blocked creators, sorted. */
  blocked: string[];
  /** Followed creators, sorted. */
  following: string[];
  /** Affinity per creator, decayed to the database clock's now. */
  affinity: Record<string, number>;
}

/** The write events a user call becomes (see write-path.ts). */
export interface UserUpsertEvent {
  readonly type: 'user-upsert';
  readonly id: string;
  readonly metadata: Record<string, unknown>;
  readonly embedding: Float32Array | null;
}

export interface UserDeleteEvent {
  readonly type: 'user-delete';
  readonly id: string;
}

export interface UserItemEvent {
  readonly type: 'hide' | 'unhide';
  readonly user: string;
  ordinal: number;
  readonly item: string;
}

export interface UserCreatorEvent {
  readonly type: 'block' | 'unblock' | 'follow' | 'unfollow';
  readonly user: string;
  readonly creator: string;
}

export type UserEvent = UserUpsertEvent | UserDeleteEvent | UserItemEvent | UserCreatorEvent;

/** What a committed signal brings the user registry. */
export interface UserSignalEvent {
  readonly type: 'signal';
  readonly ordinal: number;
  readonly id: string;
  readonly kind: number;
  readonly weight: number;
  readonly at: number;
  readonly user: string | null;
}

/** An item's embedding and creator, as committed, for a user signal on it. */
export interface ItemFacts {
  readonly embedding: Float32Array | null;
  readonly creator: string | null;
}
