/**
 * Item ids and their ordinals on the writer's thread: ordinals are handed out in order, once per
 * id, at admission (before a call is queued), and taken back, all of a call's, when the call is
 * refused after all. An ordinal's `items` row may not be committed yet ({@link unpersisted}).
 *
 * The ids already stored are not read at open: reading all of them took 1.25 s of a 4.0 s reopen at
 * 1 000 000 items (a CPU profile of the calling thread). The map starts empty and {@link fill} adds
 * them a page at a time after the open; until it has seen them all, an id or an ordinal the map does
 * not have is looked up in the items table (one indexed read) and kept. Correct either way because
 * a stored id's ordinal never changes (a deleted item keeps its row), and every id handed out since
 * the open is in the map before its row is written.
 */
import { CapacityError } from 'tidal-load';
import { IdTable } from './id-table.js';

/** Stored ids {@link ItemOrdinals.fillInBackground} reads a turn: ~2.5 ms at 1 000 000 items, the most a query waits for it. */
const FILL_SLICE = 2048;

/** Where the ids already stored are read from (the items table: `ItemsWriter`). */
export interface StoredOrdinals {
  /** One past the highest ordinal stored. */
  nextOrdinal(): number;
  ordinalOf(id: string): number | undefined;
  idAt(ordinal: number): string | undefined;
  /** Up to `limit` stored [id, ordinal] pairs in id order, after `after` (from the first with null). */
  keysAfter(after: string | null, limit: number): [string, number][];
}

export class ItemOrdinals {
  /** The ids known, both ways (ordinals are dense: handed out in order). */
  readonly #ids: IdTable;
  /** The next ordinal to hand out: above every ordinal ever committed. */
  #next: number;
  /** The ids given an ordinal by the call being built (see {@link rollback}). */
  readonly #fresh: string[] = [];
  readonly #capacity: number;
  /** The stored ids not all in {@link #ids} yet: misses are looked up there. Null once they are. */
  #stored: StoredOrdinals | null;
  /** The last stored id {@link fill} read (they come in id order). */
  #filledTo: string | null = null;
  /** The next slice of {@link fillInBackground}, while one is scheduled. */
  #filling: NodeJS.Immediate | null = null;
  /**
   * Ordinals handed out whose `items` row is not committed yet. A batch that fails to commit leaves
   * them here, so the next write of the same id still inserts the row.
   */
  readonly unpersisted = new Set<number>();

  constructor(stored: StoredOrdinals, capacity: number) {
    this.#stored = stored;
    this.#capacity = capacity;
    this.#next = stored.nextOrdinal();
    this.#ids = new IdTable(Math.min(this.#next, capacity) + 1024);
  }

  /** Ordinals handed out: one past the highest. */
  get size(): number {
    return this.#next;
  }

  /**
   * Runs {@link fill} {@link FILL_SLICE} ids a turn of the event loop until every stored id is in
   * the map, so an open does not wait for them. A slice that fails (the file gone bad) stops it:
   * misses keep reading the items table, which reports that failure to the write that needs it.
   */
  fillInBackground(): void {
    if (this.#stored === null || this.#filling !== null) return;
    const slice = (): void => {
      this.#filling = null;
      let done = true;
      try {
        done = this.fill(FILL_SLICE);
      } catch {
        // See above.
      }
      if (!done) this.#filling = setImmediate(slice);
    };
    this.#filling = setImmediate(slice);
  }

  /** Reads every stored id now. */
  fillNow(): void {
    this.stopFilling();
    while (!this.fill(65_536));
  }

  /** Stops {@link fillInBackground} (at close). */
  stopFilling(): void {
    if (this.#filling !== null) clearImmediate(this.#filling);
    this.#filling = null;
  }

  /** Whether every stored id is in the map (no miss reads the items table any more). */
  get complete(): boolean {
    return this.#stored === null;
  }

  /**
   * Adds up to `limit` stored ids to the map (the next ones in id order); returns whether all are
   * in. ~1.3 µs an id at 1 000 000 items: the caller runs it in slices between other work.
   */
  fill(limit: number): boolean {
    const stored = this.#stored;
    if (stored === null) return true;
    const rows = stored.keysAfter(this.#filledTo, limit);
    for (const [id, ordinal] of rows) if (this.#ids.get(id) === undefined) this.#learn(id, ordinal);
    if (rows.length > 0) this.#filledTo = rows[rows.length - 1]![0];
    if (rows.length < limit) this.#stored = null;
    return this.#stored === null;
  }

  /** The ordinal of `id`, or undefined. */
  of(id: string): number | undefined {
    const known = this.#ids.get(id);
    if (known !== undefined || this.#stored === null) return known;
    const ordinal = this.#stored.ordinalOf(id);
    if (ordinal !== undefined) this.#learn(id, ordinal);
    return ordinal;
  }

  /** The id an ordinal was handed out to, or undefined. */
  idOf(ordinal: number): string | undefined {
    const known = this.#ids.idAt(ordinal);
    if (known !== undefined || this.#stored === null || ordinal >= this.#next) return known;
    const id = this.#stored.idAt(ordinal);
    if (id !== undefined) this.#learn(id, ordinal);
    return id;
  }

  /** Starts a call: returns the mark {@link rollback} takes back to. */
  begin(): number {
    this.#fresh.length = 0;
    return this.#next;
  }

  /** The ordinal of `id`, handed out now if it has none. @throws CapacityError past `capacity.items`. */
  take(id: string): { ordinal: number; known: boolean } {
    const known = this.of(id);
    if (known !== undefined) return { ordinal: known, known: true };
    const ordinal = this.#next;
    if (ordinal >= this.#capacity) throw new CapacityError('item ids', this.#capacity, 'raise the capacity.items builder option');
    this.#next++;
    this.#learn(id, ordinal);
    this.unpersisted.add(ordinal);
    this.#fresh.push(id);
    return { ordinal, known: false };
  }

  /**
   * Takes back the ordinals handed out from `mark` on, for a call that was refused after all. The
   * ids are the last `next − mark` handed out (they are contiguous): only those are looked at, so a
   * refusal costs the size of the call, not of the id map.
   */
  rollback(mark: number): void {
    const fresh = this.#fresh;
    for (let i = fresh.length - 1; i >= 0 && this.#next > mark; i--) {
      const id = fresh[i]!;
      const ordinal = this.#ids.get(id)!;
      this.#ids.delete(ordinal);
      this.unpersisted.delete(ordinal);
      this.#next--;
    }
    fresh.length = 0;
  }

  #learn(id: string, ordinal: number): void {
    this.#ids.set(id, ordinal);
  }
}
