import type Database from 'better-sqlite3';
import { META, Meta } from './storage/meta.js';

/**
 * Bytes per checkpoint row: 256 slots of 256 bytes. Small enough that a hot working set rewrites few
 * rows, large enough that a full checkpoint of 2 M slots is 32 k rows, not millions.
 */
export const CHECKPOINT_CHUNK_BYTES = 64 * 1024;

/**
 * The checkpoint of a fixed-size slot arena (the signal store) as rows of {@link CHECKPOINT_CHUNK_BYTES}
 * in `signal_checkpoint (chunk, data)`, rewritten incrementally: only the rows whose slots changed
 * since the last checkpoint are written again.
 *
 * Why incremental: a full checkpoint costs ~10 µs per KiB of slots on the main thread (measured
 * with 1 KiB slots: 200 k slots, 200 MB, ~2 s), and the event loop stalls for all of it. With a skewed workload most
 * slots are cold, so the rows actually rewritten are a small share of the arena.
 *
 * Invariant that keeps the rows a byte-for-byte copy of the arena: slot indices only grow, so a row
 * that is followed by another was full when that one was first written; and every row holding a
 * slot allocated since the last checkpoint is rewritten (the checkpoint knows how many slots its
 * rows hold), so a partial row is rewritten in the same checkpoint as any row after it, even when
 * the new slot was only reserved and never marked dirty. Concatenating the rows in order therefore
 * gives `used × slotBytes` bytes with every slot at its index. A reserved slot that never got an
 * event is copied like any other (all-time count 0); the store's import keeps it as an empty
 * reservation. Every method runs inside the caller's transaction, so a crash leaves the old
 * checkpoint or the new one, whole.
 *
 * The rows carry the slot layout they were written in (`checkpoint_slot_layout`, an opaque number
 * the store defines). Rows of another layout are the store's to convert on load
 * ({@link storedLayout}); the first checkpoint after them rewrites every row in the current layout. Its tables are created by the file format (`storage/ddl.ts`), not here.
 */
export class SlotCheckpoint {
  readonly #db: Database.Database;
  readonly #slotsPerChunk: number;
  readonly #dirty: Uint8Array;
  #all: boolean;
  readonly #upsert: Database.Statement;
  readonly #meta: Meta;
  /** Slots the stored rows hold; rows from the one holding slot `#savedSlots` on are new. */
  #savedSlots = 0;
  /** Slots the last {@link write} covered, stored once it commits. */
  #writtenSlots = 0;
  readonly #layout: number;
  /** The slot layout the stored rows are in (1 when the file names none: rows older than the key). */
  readonly storedLayout: number;

  /** `layout` is the slot layout this process writes; `slotBytes` its slot size. */
  constructor(db: Database.Database, slotBytes: number, maxSlots: number, layout: number) {
    this.#db = db;
    this.#slotsPerChunk = CHECKPOINT_CHUNK_BYTES / slotBytes;
    this.#dirty = new Uint8Array(Math.ceil(maxSlots / this.#slotsPerChunk));
    this.#upsert = db.prepare('INSERT OR REPLACE INTO signal_checkpoint (chunk, data) VALUES (?, ?)');
    // Rows written with another chunk size (or by an older version) are not at these indices:
    // the first checkpoint rewrites everything.
    this.#meta = new Meta(db);
    this.#layout = layout;
    this.storedLayout = this.#meta.get(META.checkpointSlotLayout) ?? 1;
    // Rows of another layout hold slots of another size: the same goes for them.
    this.#all = this.#meta.get(META.checkpointChunkBytes) !== CHECKPOINT_CHUNK_BYTES || this.storedLayout !== layout;
    // length() reads a blob's size without its content.
    const bytes = db.prepare('SELECT COALESCE(SUM(length(data)), 0) FROM signal_checkpoint').pluck().get() as number;
    this.#savedSlots = this.#all ? 0 : Math.floor(bytes / slotBytes);
  }

  /** The stored checkpoint: every row in order, concatenated (empty if there is none). */
  load(): Buffer {
    return Buffer.concat(this.#db.prepare('SELECT data FROM signal_checkpoint ORDER BY chunk').pluck().all() as Buffer[]);
  }

  /** Records that `slot` changed (or was allocated) since the last checkpoint. */
  markDirty(slot: number): void {
    this.#dirty[Math.floor(slot / this.#slotsPerChunk)] = 1;
  }

  /** Makes the next {@link write} rewrite every row (for example after slots were renumbered). */
  markAllDirty(): void {
    this.#all = true;
  }

  /**
   * Writes the rows of `usedSlots` slots of `arena` that changed; call inside a transaction, on the
   * only thread that mutates the arena, and call {@link committed} once it has committed (if it
   * rolls back, the rows stay dirty for the next try). Returns the number of rows written.
   */
  write(arena: SharedArrayBuffer, usedSlots: number, slotBytes: number): number {
    const chunks = Math.ceil(usedSlots / this.#slotsPerChunk);
    const end = usedSlots * slotBytes;
    if (this.#all) {
      this.#db.exec('DELETE FROM signal_checkpoint');
      this.#meta.set(META.checkpointChunkBytes, CHECKPOINT_CHUNK_BYTES);
      this.#meta.set(META.checkpointSlotLayout, this.#layout);
    }
    // Rows from the one holding the first slot the stored rows lack, whether or not marked dirty.
    const firstNew = usedSlots > this.#savedSlots ? Math.floor(this.#savedSlots / this.#slotsPerChunk) : chunks;
    let written = 0;
    for (let c = 0; c < chunks; c++) {
      if (!this.#all && this.#dirty[c] === 0 && c < firstNew) continue;
      const off = c * CHECKPOINT_CHUNK_BYTES;
      // Copied: SQLite must not see bytes a later batch changes, and the arena is shared memory.
      this.#upsert.run(c, Buffer.from(new Uint8Array(arena, off, Math.min(CHECKPOINT_CHUNK_BYTES, end - off))));
      written++;
    }
    this.#writtenSlots = usedSlots;
    return written;
  }

  /** The transaction that called {@link write} committed: nothing is dirty any more. */
  committed(): void {
    this.#dirty.fill(0);
    this.#all = false;
    this.#savedSlots = this.#writtenSlots;
  }
}
