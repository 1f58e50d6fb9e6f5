/**
 * A set of item ordinals for one query, as stamps in an array reused across queries: clearing is
 * one increment, and a test is one load (a Set cost a trending walk over 10 000 slots about a
 * third of its time, and `for_you`'s candidates a set of their own per query). One per walk that
 * needs it, kept by its owner for the thread's life (a query runs to the end before the next
 * starts on this thread); 4 bytes per item.
 */
export class OrdinalSet {
  #stamps = new Uint32Array(1024);
  #epoch = 1;

  /** Empties the set; `size`, when given, makes room for ordinals below it at once. */
  reset(size = 0): this {
    if (this.#stamps.length < size) {
      this.#stamps = new Uint32Array(Math.max(size, 2 * this.#stamps.length));
      this.#epoch = 0;
    }
    if (++this.#epoch === 0xffffffff) {
      this.#stamps.fill(0);
      this.#epoch = 1;
    }
    return this;
  }

  has(o: number): boolean {
    return o < this.#stamps.length && this.#stamps[o] === this.#epoch;
  }

  /** Adds `o`; false if it was already in. */
  add(o: number): boolean {
    let stamps = this.#stamps;
    if (o >= stamps.length) {
      let n = stamps.length;
      while (n <= o) n *= 2;
      const grown = new Uint32Array(n);
      grown.set(stamps);
      this.#stamps = stamps = grown;
    }
    if (stamps[o] === this.#epoch) return false;
    stamps[o] = this.#epoch;
    return true;
  }
}
