/**
 * Item ids and their ordinals on the writer's thread: ordinals are handed out in order, once per
 * id, at admission (before a call is queued), and taken back, all of a call's, when the call is
 * refused after all. An ordinal's `items` row may not be committed yet ({@link unpersisted}).
 */
import { CapacityError } from 'tidal-load';

export class ItemOrdinals {
  readonly #ids: Map<string, number>;
  /** {@link #ids} the other way round: dense, ordinals are handed out in order. */
  readonly #idByOrdinal: (string | undefined)[];
  /** The next ordinal to hand out: above every ordinal ever committed. */
  #next = 0;
  /** The ids given an ordinal by the call being built (see {@link rollback}). */
  readonly #fresh: string[] = [];
  readonly #capacity: number;
  /**
   * Ordinals handed out whose `items` row is not committed yet. A batch that fails to commit leaves
   * them here, so the next write of the same id still inserts the row.
   */
  readonly unpersisted = new Set<number>();

  constructor(ids: Map<string, number>, capacity: number) {
    this.#ids = ids;
    this.#capacity = capacity;
    for (const ordinal of ids.values()) if (ordinal >= this.#next) this.#next = ordinal + 1;
    this.#idByOrdinal = new Array<string | undefined>(this.#next).fill(undefined);
    for (const [id, ordinal] of ids) this.#idByOrdinal[ordinal] = id;
  }

  /** The ordinal of `id`, or undefined. */
  of(id: string): number | undefined {
    return this.#ids.get(id);
  }

  /** The id an ordinal was handed out to, or undefined. */
  idOf(ordinal: number): string | undefined {
    return this.#idByOrdinal[ordinal];
  }

  /** Starts a call: returns the mark {@link rollback} takes back to. */
  begin(): number {
    this.#fresh.length = 0;
    return this.#next;
  }

  /** The ordinal of `id`, handed out now if it has none. @throws CapacityError past `capacity.items`. */
  take(id: string): { ordinal: number; known: boolean } {
    const known = this.#ids.get(id);
    if (known !== undefined) return { ordinal: known, known: true };
    const ordinal = this.#next;
    if (ordinal >= this.#capacity) throw new CapacityError('item ids', this.#capacity, 'raise the capacity.items builder option');
    this.#next++;
    this.#ids.set(id, ordinal);
    this.#idByOrdinal[ordinal] = id;
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
      this.#ids.delete(id);
      this.#idByOrdinal[ordinal] = undefined;
      this.unpersisted.delete(ordinal);
      this.#next--;
    }
    fresh.length = 0;
  }
}
