/**
 * usearch's native index, the class its JavaScript `Index` wraps, reached directly: the wrapper
 * turns every `Int8Array` it is given into a `Float32Array` before the addon sees it, and the
 * addon's own float → int8 cast scales a vector by its L2 norm (a 128-dimension unit vector's
 * components then use about 11 of the 127 steps). Given int8 rows scaled by their largest
 * component ({@link toInt8} in ann.ts), an int8 index comes within 0.02 of the f16 index's recall:
 * at 100 000 bench vectors, k = 64, recall@10 0.959–0.964 against f16's 0.977–0.982 over three
 * builds (the addon's own cast 0.883–0.892), a search 0.79–0.80× and the file 0.68× f16's
 * (bench/probes/ann-quantization.ts).
 *
 * The addon is loaded the way usearch loads it (node-gyp-build from usearch's own directory), so
 * it is the same module, and the version is pinned in tidal-query's package.json: the methods
 * below are usearch 2.25.3's `CompiledIndex` (javascript/lib.cpp). A test builds, saves, views and
 * searches an index through this module, so a usearch that changed them fails there.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { InternalError } from 'tidal-load';
import { enterNative, leaveNative } from './native-gate.js';

/** usearch's `CompiledIndex`, as javascript/lib.cpp defines it. */
export interface NativeIndex {
  dimensions(): number;
  size(): number;
  capacity(): number;
  /** `vectors`: `keys.length` rows of `dimensions()` int8 values. `threads` 0: every core. */
  add(keys: BigUint64Array, vectors: Int8Array, threads: number): void;
  /** One query: its `k` nearest keys and cosine distances, of which the first `counts[0]` are filled. */
  search(query: Int8Array, k: number, threads: number): [keys: BigUint64Array, distances: Float32Array, counts: BigUint64Array];
  contains(keys: BigUint64Array): boolean[];
  remove(keys: BigUint64Array): number[];
  save(file: string): void;
  load(file: string): void;
  view(file: string): void;
}

type NativeIndexClass = new (
  dimensions: number,
  metric: string,
  quantization: string,
  connectivity: number,
  expansionAdd: number,
  expansionSearch: number,
  multi: boolean,
) => NativeIndex;

function loadAddon(): NativeIndexClass {
  const require = createRequire(import.meta.url);
  // usearch's CommonJS entry: <root>/javascript/dist/cjs/usearch.js.
  const entry = require.resolve('usearch');
  const root = path.resolve(path.dirname(entry), '..', '..', '..');
  const build = createRequire(entry)('node-gyp-build') as (dir: string) => { CompiledIndex?: unknown };
  const addon = build(root);
  if (typeof addon.CompiledIndex !== 'function') {
    throw new InternalError(`usearch's native addon in ${root} has no CompiledIndex: tidal-query needs usearch 2.25.3`);
  }
  return addon.CompiledIndex as NativeIndexClass;
}

const CompiledIndex = loadAddon();

/**
 * An index whose calls go through the process's native gate (native-gate.ts), so an exiting
 * process never terminates a thread inside one. All but `add`: the build thread's batches take
 * seconds, which an exit would then wait for, and `add` makes no JavaScript value once its work
 * is done (the gate's hazard).
 */
class GatedIndex implements NativeIndex {
  readonly #index: NativeIndex;

  constructor(index: NativeIndex) {
    this.#index = index;
  }

  dimensions(): number {
    return gated(() => this.#index.dimensions());
  }
  size(): number {
    return gated(() => this.#index.size());
  }
  capacity(): number {
    return gated(() => this.#index.capacity());
  }
  add(keys: BigUint64Array, vectors: Int8Array, threads: number): void {
    this.#index.add(keys, vectors, threads);
  }
  search(query: Int8Array, k: number, threads: number): [keys: BigUint64Array, distances: Float32Array, counts: BigUint64Array] {
    return gated(() => this.#index.search(query, k, threads));
  }
  contains(keys: BigUint64Array): boolean[] {
    return gated(() => this.#index.contains(keys));
  }
  remove(keys: BigUint64Array): number[] {
    return gated(() => this.#index.remove(keys));
  }
  save(file: string): void {
    gated(() => this.#index.save(file));
  }
  load(file: string): void {
    gated(() => this.#index.load(file));
  }
  view(file: string): void {
    gated(() => this.#index.view(file));
  }
}

/** `call` with this thread counted inside the addon (native-gate.ts). */
export function gated<T>(call: () => T): T {
  enterNative();
  try {
    return call();
  } finally {
    leaveNative();
  }
}

/** An empty int8 cosine HNSW index (connectivity, expansions as given), fed int8 rows. */
export function nativeInt8Index(dims: number, connectivity: number, expansionAdd: number, expansionSearch: number): NativeIndex {
  return new GatedIndex(new CompiledIndex(dims, 'cos', 'i8', connectivity, expansionAdd, expansionSearch, false));
}
