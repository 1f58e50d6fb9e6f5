/*
 * The two translations of replication's events: an own event as it travels (ids and kind names
 * instead of this replica's ordinals and kind numbers), and another replica's event as it is
 * written here (this replica's ordinals and kinds). The write path owns the ordinals and the
 * commit; this module only maps one event at a time.
 */
import type { ReplicatedEvent } from 'tidal-load';
import type { SignalStore, StoredItem } from 'tidal-query';
import type { ReplMarkEvent } from './replication.js';
import type { SignalEvent, WriteEvent } from './write-events.js';

/** An own event as it travels: ids and kind names instead of this replica's ordinals and numbers. */
export function toReplicated(e: Exclude<WriteEvent, ReplMarkEvent>, stamp: number, kinds: readonly { name: string }[]): ReplicatedEvent {
  switch (e.type) {
    case 'signal': {
      const out = { t: 'signal' as const, item: e.id, kind: kinds[e.kind]!.name, weight: e.weight, at: e.at, user: e.user };
      if (e.facts === undefined) return out;
      return { ...out, f: { c: e.facts.creator, v: e.facts.embedding === null ? null : vectorText(e.facts.embedding) } };
    }
    case 'upsert': {
      const { ordinal: _ordinal, embedding, ...item } = e.item;
      return { t: 'upsert', item: { ...item, embedding: embedding === null ? null : Array.from(embedding) }, stamp };
    }
    case 'delete':
      return { t: 'delete', id: e.id, stamp };
    case 'user-upsert':
      return { t: 'user-upsert', id: e.id, metadata: e.metadata, embedding: e.embedding === null ? null : Array.from(e.embedding) };
    case 'user-delete':
      return { t: 'user-delete', id: e.id };
    case 'hide':
    case 'unhide':
      return { t: e.type, user: e.user, item: e.item };
    default:
      return { t: e.type, user: e.user, creator: e.creator };
  }
}

/** What mapping a foreign event needs from the write path. */
export interface ForeignTarget {
  /** This replica's kind number of a kind name. */
  readonly kindIndex: ReadonlyMap<string, number>;
  /** The ordinal an id has here, if any. */
  existing(id: string): number | undefined;
  /** The ordinal an id has here, given one if it has none (`known`: it had one). */
  ordinal(id: string): { ordinal: number; known: boolean };
  /** Records that a user exists (or no longer does) before its event commits. */
  declareUser(id: string, present: boolean): void;
}

/**
 * Another replica's event as it is written here, or null for a signal of a kind this replica's
 * schema does not declare (it has no slot here, so it is not applied).
 */
export function fromReplicated(e: ReplicatedEvent, origin: string, to: ForeignTarget): Exclude<WriteEvent, ReplMarkEvent> | null {
  switch (e.t) {
    case 'signal': {
      const kind = to.kindIndex.get(e.kind);
      if (kind === undefined) return null;
      const s: SignalEvent = {
        type: 'signal',
        ordinal: to.existing(e.item) ?? to.ordinal(e.item).ordinal,
        id: e.item,
        kind,
        weight: e.weight,
        at: e.at,
        session: null,
        sessionAt: 0,
        user: e.user,
      };
      if (e.f !== undefined) s.facts = { creator: e.f.c, embedding: e.f.v === null ? null : vectorOf(e.f.v) };
      return s;
    }
    case 'upsert': {
      const { ordinal, known } = to.ordinal(e.item.id);
      const embedding = e.item.embedding === null ? null : Float32Array.from(e.item.embedding);
      const item: StoredItem = { ...e.item, ordinal, embedding };
      return { type: 'upsert', item, replacing: known, stamp: { at: e.stamp, origin } };
    }
    case 'delete':
      return { type: 'delete', ordinal: to.existing(e.id) ?? -1, id: e.id, stamp: { at: e.stamp, origin } };
    case 'user-upsert':
      to.declareUser(e.id, true);
      return {
        type: 'user-upsert',
        id: e.id,
        metadata: e.metadata,
        embedding: e.embedding === null ? null : Float32Array.from(e.embedding),
      };
    case 'user-delete':
      to.declareUser(e.id, false);
      return { type: 'user-delete', id: e.id };
    case 'hide':
    case 'unhide':
      return { type: e.t, user: e.user, ordinal: to.existing(e.item) ?? to.ordinal(e.item).ordinal, item: e.item };
    default:
      return { type: e.t, user: e.user, creator: e.creator };
  }
}

/**
 * One foreign batch's events as written here, in order, with the signal slot of every signal
 * reserved (a `CapacityError` leaves the caller to take back the ordinals it handed out).
 */
export function foreignWrite(
  origin: string,
  events: readonly ReplicatedEvent[],
  to: ForeignTarget,
  store: Pick<SignalStore, 'reserve'>,
): Exclude<WriteEvent, ReplMarkEvent>[] {
  const out: Exclude<WriteEvent, ReplMarkEvent>[] = [];
  const signals: SignalEvent[] = [];
  for (const e of events) {
    const w = fromReplicated(e, origin, to);
    if (w === null) continue;
    if (w.type === 'signal') signals.push(w);
    out.push(w);
  }
  if (signals.length > 0) {
    store.reserve(
      Int32Array.from(signals, (x) => x.ordinal),
      Int32Array.from(signals, (x) => x.kind),
      signals.length,
    );
  }
  return out;
}

/** A vector as it travels in a signal's facts: its Float32 bytes (little-endian), base64. */
function vectorText(v: Float32Array): string {
  return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
}

function vectorOf(text: string): Float32Array {
  const bytes = Buffer.from(text, 'base64');
  const out = new Float32Array(bytes.byteLength >> 2);
  new Uint8Array(out.buffer).set(bytes.subarray(0, out.byteLength));
  return out;
}
