/**
 * Ids and their ordinals both ways, in typed arrays: the ids' UTF-8 bytes in one arena, per
 * ordinal where its bytes start and how many there are, and an open-addressing table of ordinals
 * placed by the FNV-1a hash of the bytes (linear probing, at most half full). A `Map` of strings and
 * an array of the same strings took 70–77 bytes an id (7.3 MiB at 100 000 demo ids, 66 MiB at
 * 1 000 000) and one heap object or two each for every collection to trace; this ~30 bytes an id
 * and none. What it costs: an id is encoded to look it up, and {@link idAt} decodes a new string.
 */
import { CapacityError } from 'tidal-load';
import { hashBytes as hashOf } from 'tidal-query';

/** No entry in a slot. Slots hold ordinal + 1; a removed entry leaves {@link GONE} for the probes. */
const EMPTY = 0;
const GONE = -1;
/** An id's bytes start below this (Int32Array offsets). */
const MAX_ARENA = 0x7fff_ffff;

export class IdTable {
  #arena: Buffer;
  #used = 0;
  /** Per ordinal, where its id's bytes start in {@link #arena}, or −1 for none. */
  #start: Int32Array;
  /** Per ordinal, its id's byte length (an id is at most 512 UTF-16 units: ≤ 1 536 bytes). */
  #length: Uint16Array;
  #slots: Int32Array;
  readonly #minSlots: number;
  /** Slots not {@link EMPTY}: entries and {@link GONE}s. */
  #taken = 0;
  #size = 0;
  #scratch = Buffer.allocUnsafe(2048);

  /** `initialIds`: what the arrays are first sized for (they grow as needed). */
  constructor(initialIds = 1024) {
    const n = Math.max(4, initialIds);
    this.#arena = Buffer.allocUnsafe(16 * n);
    this.#start = new Int32Array(n).fill(-1);
    this.#length = new Uint16Array(n);
    this.#minSlots = 2 ** Math.ceil(Math.log2(2 * n));
    this.#slots = new Int32Array(this.#minSlots);
  }

  /** Ids held. */
  get size(): number {
    return this.#size;
  }

  /** Bytes of the arrays (for tests and estimates). */
  get bytes(): number {
    return this.#arena.length + this.#start.byteLength + this.#length.byteLength + this.#slots.byteLength + this.#scratch.length;
  }

  /** The ordinal of `id`, or undefined. */
  get(id: string): number | undefined {
    const n = this.#encode(id);
    const slot = this.#find(this.#scratch, 0, n, hashOf(this.#scratch, 0, n));
    return slot < 0 ? undefined : this.#slots[slot]! - 1;
  }

  /** The id held for `ordinal`, or undefined. */
  idAt(ordinal: number): string | undefined {
    if (ordinal < 0 || ordinal >= this.#start.length) return undefined;
    const start = this.#start[ordinal]!;
    return start < 0 ? undefined : this.#arena.toString('utf8', start, start + this.#length[ordinal]!);
  }

  /** Holds `id` for `ordinal`; neither may be held already. */
  set(id: string, ordinal: number): void {
    if (ordinal >= this.#start.length) this.#growOrdinals(ordinal + 1);
    if (this.#start[ordinal]! >= 0) throw new RangeError(`ordinal ${ordinal} is held already`);
    const n = this.#encode(id);
    const hash = hashOf(this.#scratch, 0, n);
    if (this.#find(this.#scratch, 0, n, hash) >= 0) throw new RangeError(`id ${JSON.stringify(id)} is held already`);
    if (this.#used + n > this.#arena.length) this.#growArena(this.#used + n);
    // Before the new entry is in the arrays: a rehash places every entry they hold.
    if (2 * (this.#taken + 1) > this.#slots.length) this.#rehash(this.#size + 1);
    this.#scratch.copy(this.#arena, this.#used, 0, n);
    this.#start[ordinal] = this.#used;
    this.#length[ordinal] = n;
    this.#used += n;
    const mask = this.#slots.length - 1;
    let i = hash & mask;
    while (this.#slots[i]! > 0) i = (i + 1) & mask;
    if (this.#slots[i] === EMPTY) this.#taken++;
    this.#slots[i] = ordinal + 1;
    this.#size++;
  }

  /** Lets go of the id held for `ordinal` (its bytes stay in the arena until nothing else is written after them). */
  delete(ordinal: number): void {
    const start = ordinal < this.#start.length ? this.#start[ordinal]! : -1;
    if (start < 0) return;
    const end = start + this.#length[ordinal]!;
    const slot = this.#find(this.#arena, start, end, hashOf(this.#arena, start, end));
    this.#slots[slot] = GONE;
    this.#start[ordinal] = -1;
    this.#size--;
    if (end === this.#used) this.#used = start;
  }

  /** `id` as UTF-8 in {@link #scratch}; its byte length. */
  #encode(id: string): number {
    if (3 * id.length > this.#scratch.length) this.#scratch = Buffer.allocUnsafe(3 * id.length);
    return this.#scratch.write(id, 0, 'utf8');
  }

  /** The slot holding the id whose bytes are `b[from, to)`, or −1. */
  #find(b: Uint8Array, from: number, to: number, hash: number): number {
    const slots = this.#slots;
    const mask = slots.length - 1;
    const n = to - from;
    for (let i = hash & mask; ; i = (i + 1) & mask) {
      const s = slots[i]!;
      if (s === EMPTY) return -1;
      if (s === GONE) continue;
      const o = s - 1;
      if (this.#length[o] !== n) continue;
      const start = this.#start[o]!;
      let j = 0;
      while (j < n && this.#arena[start + j] === b[from + j]) j++;
      if (j === n) return i;
    }
  }

  #rehash(entries: number): void {
    let size = this.#minSlots;
    while (size < 2 * entries) size *= 2;
    const slots = new Int32Array(size);
    const mask = size - 1;
    for (let o = 0; o < this.#start.length; o++) {
      const start = this.#start[o]!;
      if (start < 0) continue;
      let i = hashOf(this.#arena, start, start + this.#length[o]!) & mask;
      while (slots[i] !== EMPTY) i = (i + 1) & mask;
      slots[i] = o + 1;
    }
    this.#slots = slots;
    this.#taken = this.#size;
  }

  #growOrdinals(atLeast: number): void {
    let size = this.#start.length;
    while (size < atLeast) size *= 2;
    const start = new Int32Array(size).fill(-1);
    start.set(this.#start);
    const length = new Uint16Array(size);
    length.set(this.#length);
    this.#start = start;
    this.#length = length;
  }

  #growArena(atLeast: number): void {
    if (atLeast > MAX_ARENA) throw new CapacityError('bytes of item ids', MAX_ARENA, 'use shorter item ids');
    let size = this.#arena.length;
    while (size < atLeast) size = Math.min(2 * size, MAX_ARENA);
    const arena = Buffer.allocUnsafe(size);
    this.#arena.copy(arena, 0, 0, this.#used);
    this.#arena = arena;
  }
}
