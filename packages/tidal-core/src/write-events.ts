/*
 * The events the write path queues, logs and commits, and the check an item input passes before it
 * becomes one.
 */
import { InvalidInputError } from 'tidal-load';
import type { QuerySchema, StoredItem } from 'tidal-query';
import type { ItemStamp, ReplMarkEvent } from './replication.js';
import type { ItemInput, SignalInput } from './types.js';
import { MAX_EVENT_MS } from 'tidal-query';
import type { ItemFacts, UserEvent } from './user-types.js';
import { checkId, checkMetadata, checkText, checkTime, checkVector, checkWeight, isValidId, isValidWeight } from './validate.js';

/** A signal to append to the log and apply to the signal store. */
export interface SignalEvent {
  readonly type: 'signal';
  ordinal: number;
  readonly id: string;
  /** The kind's index in the schema. */
  readonly kind: number;
  readonly weight: number;
  readonly at: number;
  readonly session: string | null;
  /** When the session call was made (its activity time once committed); 0 without a session. */
  readonly sessionAt: number;
  /** The user the signal is from: their seen set, preference and creator affinity move with it. */
  readonly user: string | null;
  /**
   * The item's facts the user's state moved by: set by the commit of an own signal (and sent with
   * it), or carried by a foreign one from its origin. Unset: none were read (no move).
   */
  facts?: ItemFacts;
}

/**
 * An item inserted or replaced. `replacing`: the id already had an ordinal (its text row may exist).
 * `stamp`: a foreign write's last-writer-wins stamp; `skipped` is set in the commit when it lost.
 */
export interface UpsertEvent {
  readonly type: 'upsert';
  readonly item: StoredItem;
  readonly replacing: boolean;
  readonly stamp?: ItemStamp;
  skipped?: boolean;
}

/**
 * An item deleted: its row keeps the id and ordinal, loses its content. A foreign delete of an id
 * this replica never saw has ordinal −1: only its stamp (the tombstone) is written.
 */
export interface DeleteEvent {
  readonly type: 'delete';
  readonly ordinal: number;
  readonly id: string;
  readonly stamp?: ItemStamp;
  skipped?: boolean;
}

export type WriteEvent = SignalEvent | UpsertEvent | DeleteEvent | UserEvent | ReplMarkEvent;

/** The session a signal call was made through, and when. */
export interface SessionCall {
  readonly id: string;
  readonly at: number;
}

/** An item input checked field by field (`at` names it in errors), without its ordinal yet. */
export function validateItem(it: ItemInput, at: string, now: number, schema: QuerySchema): Omit<StoredItem, 'ordinal'> {
  if (typeof it !== 'object' || it === null) throw new InvalidInputError(at, 'an item object', it);
  return {
    id: checkId(`${at}.id`, it.id),
    text: checkText(`${at}.text`, it.text),
    metadata: checkMetadata(`${at}.metadata`, it.metadata, schema),
    createdAt: it.createdAt === undefined ? now : checkTime(`${at}.createdAt`, it.createdAt),
    embedding:
      it.embedding === undefined || it.embedding === null ? null : checkVector(`${at}.embedding`, it.embedding, schema.embeddingDims),
  };
}

/**
 * A signal call's inputs as events (ordinals not given yet), each field checked and named in the
 * error (`signal` for a call of one, `signals[i]` otherwise); `now` stands for a missing `at`.
 */
export function checkSignals(
  batch: readonly SignalInput[],
  from: SessionCall | null,
  now: number,
  kindIndex: ReadonlyMap<string, number>,
  checkUser: (field: string, user: unknown) => string,
): SignalEvent[] {
  const session = from?.id ?? null;
  const sessionAt = from?.at ?? 0;
  return batch.map((s, i): SignalEvent => {
    // Fast path for a well-formed signal, accepting exactly what the checks below accept but
    // without building their field names (four strings per signal, ~15 % of ingest time).
    // Anything it does not accept falls through to the checks, which name the bad field.
    if (typeof s === 'object' && s !== null) {
      const kind = kindIndex.get(s.kind);
      const { item, weight, at, user } = s as { item: unknown; weight: unknown; at: unknown; user: unknown };
      if (
        kind !== undefined &&
        user === undefined &&
        isValidId(item) &&
        isValidWeight(weight) &&
        (at === undefined || (typeof at === 'number' && at >= 0 && at < MAX_EVENT_MS))
      ) {
        return { type: 'signal', ordinal: -1, id: item, kind, weight: weight ?? 1, at: at ?? now, session, sessionAt, user: null };
      }
    }
    const at = batch.length === 1 ? 'signal' : `signals[${i}]`;
    if (typeof s !== 'object' || s === null) throw new InvalidInputError(at, 'a signal object', s);
    const kind = kindIndex.get(s.kind);
    if (kind === undefined) {
      throw new InvalidInputError(`${at}.kind`, `a signal kind declared in the schema (${[...kindIndex.keys()].join(', ')})`, s.kind);
    }
    return {
      type: 'signal',
      ordinal: -1,
      id: checkId(`${at}.item`, s.item),
      kind,
      weight: checkWeight(`${at}.weight`, s.weight, 1),
      at: s.at === undefined ? now : checkTime(`${at}.at`, s.at),
      session,
      sessionAt,
      user: s.user === undefined ? null : checkUser(`${at}.user`, s.user),
    };
  });
}
