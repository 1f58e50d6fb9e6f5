import type Database from 'better-sqlite3';
import type { WarningSink } from 'tidal-load';
import type { AckMark, SignalLog, SlotCheckpoint } from 'tidal-wal';
import { ItemsWriter, SLOT_BYTES, SLOT_LAYOUT, type QuerySchema, type SignalStore } from 'tidal-query';
import { META, type Meta } from 'tidal-wal/storage';
import type { WritePathStart } from './write-path.js';
import { UserRegistry } from './users.js';

export interface RecoveryDeps {
  readonly db: Database.Database;
  readonly meta: Meta;
  readonly log: SignalLog;
  readonly checkpointRows: SlotCheckpoint;
  readonly store: SignalStore;
  readonly ackMark: AckMark | null;
  readonly schema: QuerySchema;
  /** Records the schema: called in the transaction that writes the kind names (see schema-store.ts). */
  readonly storeSchema: () => void;
  /** The database file, for messages. */
  readonly file: string;
  readonly onWarning: WarningSink;
}

/**
 * Rebuilds what the write path starts from after an open (under the schema schema-store.ts
 * decided, which it records): restores the signal store from the last checkpoint plus the log after it (kinds
 * remapped by name, so adding, dropping or reordering kinds is safe), and finds the sequence number
 * to continue from. Runs on the writer connection before any write or query.
 */
export function recover(deps: RecoveryDeps): WritePathStart {
  const items = new ItemsWriter(deps.db);
  const eventsSinceCheckpoint = recoverSignals(deps);
  // Users' state is written in the batch that changed it (never behind the acknowledged writes):
  // loading the user tables is its whole recovery.
  const users = new UserRegistry(deps.db, deps.schema);
  return { lastSeq: recoveredLastSeq(deps), itemsVersion: items.maxVersion(), eventsSinceCheckpoint, users };
}

/** Signal state = the last checkpoint + the log after it, with kinds remapped by name. Returns the events replayed. */
function recoverSignals({ db, meta, log, checkpointRows, store, schema, storeSchema }: RecoveryDeps): number {
  const kindIndex = new Map(schema.kinds.map((k, i) => [k.name, i]));
  const storedKinds = meta.get(META.kinds) ?? null;
  const current = schema.kinds.map((k) => k.name);
  const remap = (storedKinds ?? current).map((name) => kindIndex.get(name) ?? -1);
  const saved = checkpointRows.load();
  // Rows of an older slot layout are converted on import (and rewritten below).
  if (saved.length > 0) store.importState(saved, remap, checkpointRows.storedLayout);
  let replayed = 0;
  for (const rec of log.replay(log.checkpointSeq())) {
    const kind = remap[rec.kind] ?? -1;
    if (kind >= 0) {
      store.apply(rec.ordinal, kind, rec.weight, rec.at);
      checkpointRows.markDirty(store.slotOf(rec.ordinal, kind));
    }
    replayed++;
  }
  const changed = storedKinds === null || storedKinds.join('\u0000') !== current.join('\u0000');
  // The log stores kind numbers: after a schema change, checkpoint at once so the log never mixes
  // two numberings. Dropping a kind renumbers slots, so that checkpoint rewrites every row. Rows of
  // an older slot layout are rewritten at once too, so they are converted only once.
  const converted = saved.length > 0 && checkpointRows.storedLayout !== SLOT_LAYOUT;
  if ((changed && (saved.length > 0 || replayed > 0)) || converted) {
    checkpointRows.markAllDirty();
    // The new kind names and the schema go in the same transaction: a crash must not leave a
    // checkpoint in the new numbering under the old names, nor a migrated state under the old schema.
    db.transaction(() => {
      checkpointRows.write(store.arena.slots, store.slotsUsed(), SLOT_BYTES);
      meta.set(META.kinds, current);
      storeSchema();
      log.checkpointThrough(log.lastSeq());
    })();
    checkpointRows.committed();
    return 0;
  }
  db.transaction(() => {
    meta.set(META.kinds, current);
    storeSchema();
  })();
  return replayed;
}

/**
 * The last sequence number to continue from. SQLite recovers a prefix of the commits (it stops at
 * the first torn or corrupt WAL frame), so the only possible loss is at the tail; the ack mark
 * says whether acknowledged commits were in it. If so, warn, and continue numbering after the
 * highest acknowledged number so no number a caller has seen is ever handed out twice.
 */
function recoveredLastSeq({ log, ackMark, file, onWarning }: RecoveryDeps): number {
  const recovered = log.lastSeq();
  const acked = ackMark?.read();
  if (acked === undefined || acked <= recovered) return recovered;
  onWarning({
    code: 'TIDAL_WAL_TAIL_LOST',
    message:
      `${acked - recovered} acknowledged events (sequence numbers ${recovered + 1} to ${acked}) were not recovered from ` +
      `${file}-wal: its tail was torn or corrupt and SQLite kept only the commits before it. ` +
      `The database is consistent as of sequence number ${recovered}; new writes are numbered from ${acked + 1}.`,
  });
  return acked;
}
