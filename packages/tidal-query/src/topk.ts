/**
 * Keeps the `k` best (ordinal, primary, secondary) entries seen, in a min-heap: O(n log k) over a
 * scan instead of sorting every candidate. Ties on `primary` go to the higher `secondary`, then to
 * the lower ordinal, so results are deterministic.
 */
export class TopK {
  readonly #k: number;
  readonly #ord: Int32Array;
  readonly #p: Float64Array;
  readonly #s: Float64Array;
  #n = 0;

  constructor(k: number) {
    this.#k = Math.max(1, k);
    this.#ord = new Int32Array(this.#k);
    this.#p = new Float64Array(this.#k);
    this.#s = new Float64Array(this.#k);
  }

  get size(): number {
    return this.#n;
  }

  /** true when a beats b. */
  #better(pa: number, sa: number, oa: number, pb: number, sb: number, ob: number): boolean {
    if (pa !== pb) return pa > pb;
    if (sa !== sb) return sa > sb;
    return oa < ob;
  }

  push(ordinal: number, primary: number, secondary = 0): void {
    if (this.#n < this.#k) {
      let i = this.#n++;
      // sift up: the heap root is the worst entry kept.
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (!this.#better(this.#p[parent]!, this.#s[parent]!, this.#ord[parent]!, primary, secondary, ordinal)) break;
        this.#set(i, parent);
        i = parent;
      }
      this.#ord[i] = ordinal;
      this.#p[i] = primary;
      this.#s[i] = secondary;
      return;
    }
    if (!this.#better(primary, secondary, ordinal, this.#p[0]!, this.#s[0]!, this.#ord[0]!)) return;
    let i = 0;
    const n = this.#n;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      let worst = l;
      if (r < n && this.#better(this.#p[l]!, this.#s[l]!, this.#ord[l]!, this.#p[r]!, this.#s[r]!, this.#ord[r]!)) worst = r;
      if (!this.#better(primary, secondary, ordinal, this.#p[worst]!, this.#s[worst]!, this.#ord[worst]!)) break;
      this.#set(i, worst);
      i = worst;
    }
    this.#ord[i] = ordinal;
    this.#p[i] = primary;
    this.#s[i] = secondary;
  }

  #set(to: number, from: number): void {
    this.#ord[to] = this.#ord[from]!;
    this.#p[to] = this.#p[from]!;
    this.#s[to] = this.#s[from]!;
  }

  /** The kept entries, best first. */
  sorted(): { ordinals: number[]; primary: number[] } {
    const idx = Array.from({ length: this.#n }, (_, i) => i);
    idx.sort((a, b) => (this.#better(this.#p[a]!, this.#s[a]!, this.#ord[a]!, this.#p[b]!, this.#s[b]!, this.#ord[b]!) ? -1 : 1));
    return { ordinals: idx.map((i) => this.#ord[i]!), primary: idx.map((i) => this.#p[i]!) };
  }
}

/** The `n` largest numbers pushed, as a min-heap: `min` is the n-th best once `full`. */
export class Floor {
  readonly #heap: Float64Array;
  #size = 0;

  constructor(n: number) {
    this.#heap = new Float64Array(Math.max(1, n));
  }

  get full(): boolean {
    return this.#size === this.#heap.length;
  }

  get min(): number {
    return this.#heap[0]!;
  }

  push(v: number): void {
    const h = this.#heap;
    if (this.#size < h.length) {
      let i = this.#size++;
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (h[p]! <= v) break;
        h[i] = h[p]!;
        i = p;
      }
      h[i] = v;
      return;
    }
    if (v <= h[0]!) return;
    let i = 0;
    const n = this.#size;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && h[r]! < h[l]! ? r : l;
      if (h[c]! >= v) break;
      h[i] = h[c]!;
      i = c;
    }
    h[i] = v;
  }
}
