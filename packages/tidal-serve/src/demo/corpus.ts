/**
 * Deterministic synthetic corpus for the demo and the benchmark.
 *
 * Every item is derived from `(seed, index)` alone, so any item can be regenerated on demand: the
 * benchmark streams a million items into two databases and builds a brute-force matrix without ever
 * holding a million item objects at once, and the demo and the benchmark agree on what item 123 is.
 * It lives here so that `tidal serve --demo` can load it; the bench imports it from
 * tidal-serve's index.
 */

import { gaussian, hashUniform, mixSeed, mulberry32 } from './random.js';
import { CATEGORIES, SHARED_VOCABULARY, VOCABULARY } from './vocabulary.js';

const SALT = {
  centroids: 1,
  item: 2,
  signalMembership: 3,
  signalEvents: 4,
  chunkShuffle: 5,
  rising: 6,
} as const;

// ---------------------------------------------------------------------------------------------
// Public shapes
// ---------------------------------------------------------------------------------------------

export interface CorpusItem {
  id: string;
  text: string;
  embedding: Float32Array;
  metadata: { category: string; creator: string };
  createdAt: number;
}

export type SignalKind = 'view' | 'like';
export const SIGNAL_KINDS: readonly SignalKind[] = ['view', 'like'];

export interface CorpusSignal {
  item: string;
  kind: SignalKind;
  weight: number;
  at: number;
}

/** Signals in columns: 13 bytes an event, so a million-item corpus's ~3.3 M events fit in ~45 MB. */
export interface SignalColumns {
  length: number;
  /** Item index (see {@link Corpus.id}). */
  item: Int32Array;
  /** Index into {@link SIGNAL_KINDS}. */
  kind: Uint8Array;
  /** Epoch milliseconds. */
  at: Float64Array;
}

export interface CorpusOptions {
  items: number;
  dims?: number;
  seed?: number;
  /** The fixed "now" every timestamp is relative to; pass the same value to tidal's clock. */
  now?: number;
}

/** 2025-06-01T12:00:00Z: fixed so that runs are comparable and windows are meaningful. */
export const DEFAULT_NOW = Date.UTC(2025, 5, 1, 12, 0, 0);

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** The tidal schema the corpus is meant for. */
export function tidalSchema(dims: number) {
  return {
    signals: [
      { name: 'view', halfLifeMs: 6 * HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true },
      { name: 'like', halfLifeMs: 24 * HOUR, windows: ['24h', '7d', 'all'], velocity: false },
    ],
    metadata: { category: 'string', creator: 'string' },
    embeddingDims: dims,
  } as const;
}

// ---------------------------------------------------------------------------------------------
// Corpus
// ---------------------------------------------------------------------------------------------

const SUBCLUSTERS = 4;
/** Spread of sub-cluster centres around their category centroid (relative to a unit vector). */
const SUBCLUSTER_SPREAD = 0.55;
/** Per-dimension noise; at 128 dims the noise vector has norm ~0.9, so clusters overlap a little. */
const NOISE_PER_DIM_AT_128 = 0.08;

const VIEWED_FRACTION = 0.1;
const LIKED_FRACTION = 0.05;
const VIEWS_PER_VIEWED_ITEM = 30;
const LIKES_PER_LIKED_ITEM = 5;
/** Zipf exponent of per-item signal counts: at 100 k items the hottest item gets ~19 k views. */
const SIGNAL_ZIPF = 0.9;
/** Share of viewed items that are "rising": most of their views arrived in the last few hours. */
const RISING_FRACTION = 0.03;
const SIGNAL_SPAN = 7 * DAY;
const ITEM_SPAN = 30 * DAY;

interface SignalPlan {
  viewed: number;
  liked: number;
  viewScale: number;
  likeScale: number;
  expectedViews: number;
  expectedLikes: number;
}

export class Corpus {
  readonly size: number;
  readonly dims: number;
  readonly seed: number;
  readonly now: number;
  readonly creators: number;
  /** Row-major `[category][dims]`, unit vectors. */
  readonly centroids: Float32Array;
  /** Row-major `[category * SUBCLUSTERS + sub][dims]`, unit vectors. */
  readonly subCentroids: Float32Array;
  private readonly idWidth: number;
  private readonly creatorsPerCategory: number;
  private readonly creatorCdf: Float64Array;
  private readonly noise: number;
  private plan: SignalPlan | undefined;

  constructor(options: CorpusOptions) {
    if (!Number.isInteger(options.items) || options.items < 1) throw new Error('items must be a positive integer');
    this.size = options.items;
    this.dims = options.dims ?? 128;
    this.seed = options.seed ?? 42;
    this.now = options.now ?? DEFAULT_NOW;
    this.idWidth = Math.max(6, String(this.size - 1).length);
    this.noise = NOISE_PER_DIM_AT_128 * Math.sqrt(128 / this.dims);

    this.creators = Math.max(CATEGORIES.length, Math.round(this.size / 50));
    this.creatorsPerCategory = Math.ceil(this.creators / CATEGORIES.length);
    // Creator c belongs to category c % 20, so a category filter still has a few dominant creators
    // for the diversity pass to spread out.
    this.creatorCdf = zipfCdf(this.creatorsPerCategory, 1.0);

    const rand = mulberry32(mixSeed(this.seed, SALT.centroids));
    const gauss = gaussian(rand);
    const d = this.dims;
    this.centroids = new Float32Array(CATEGORIES.length * d);
    this.subCentroids = new Float32Array(CATEGORIES.length * SUBCLUSTERS * d);
    for (let c = 0; c < CATEGORIES.length; c++) {
      const centre = this.centroids.subarray(c * d, (c + 1) * d);
      for (let k = 0; k < d; k++) centre[k] = gauss();
      normalize(centre);
      for (let s = 0; s < SUBCLUSTERS; s++) {
        const sub = this.subCentroids.subarray((c * SUBCLUSTERS + s) * d, (c * SUBCLUSTERS + s + 1) * d);
        const spread = SUBCLUSTER_SPREAD / Math.sqrt(d);
        for (let k = 0; k < d; k++) sub[k] = centre[k]! + spread * gauss();
        normalize(sub);
      }
    }
  }

  id(index: number): string {
    return `item-${String(index).padStart(this.idWidth, '0')}`;
  }

  /** Inverse of {@link id}; -1 when the id is not one of this corpus's. */
  indexOf(id: string): number {
    if (!id.startsWith('item-')) return -1;
    const n = Number(id.slice(5));
    return Number.isInteger(n) && n >= 0 && n < this.size ? n : -1;
  }

  item(index: number): CorpusItem {
    const rand = mulberry32(mixSeed(this.seed, SALT.item, index));
    const gauss = gaussian(rand);
    const category = Math.floor(rand() * CATEGORIES.length);
    const sub = Math.floor(rand() * SUBCLUSTERS);
    const creatorRank = sampleCdf(this.creatorCdf, rand());
    const creator = creatorRank * CATEGORIES.length + category;
    const createdAt = Math.floor(this.now - rand() * ITEM_SPAN);

    const d = this.dims;
    const embedding = new Float32Array(d);
    const base = (category * SUBCLUSTERS + sub) * d;
    for (let k = 0; k < d; k++) embedding[k] = this.subCentroids[base + k]! + this.noise * gauss();
    normalize(embedding);

    const catName = CATEGORIES[category]!;
    return {
      id: this.id(index),
      text: composeText(rand, catName),
      embedding,
      metadata: { category: catName, creator: `creator-${String(creator).padStart(5, '0')}` },
      createdAt,
    };
  }

  /** Items `[start, end)` in batches, generated lazily. */
  *items(batchSize = 1000, start = 0, end = this.size): Generator<CorpusItem[]> {
    for (let i = start; i < end; i += batchSize) {
      const stop = Math.min(end, i + batchSize);
      const batch = new Array<CorpusItem>(stop - i);
      for (let j = i; j < stop; j++) batch[j - i] = this.item(j);
      yield batch;
    }
  }

  /** All embeddings in one row-major matrix, for exact nearest-neighbour ground truth. */
  embeddingMatrix(): Float32Array {
    const m = new Float32Array(this.size * this.dims);
    for (let i = 0; i < this.size; i++) m.set(this.item(i).embedding, i * this.dims);
    return m;
  }

  // -------------------------------------------------------------------------------------------
  // Signals
  // -------------------------------------------------------------------------------------------

  /**
   * Which items get signals, and the Zipf scales. Membership and hotness come from one hashed
   * uniform per item: below 0.10 the item is viewed, below 0.05 also liked, and the smaller the
   * value the hotter the item, so the most viewed items are also the most liked ones.
   */
  private signalPlan(): SignalPlan {
    if (this.plan) return this.plan;
    const viewedU: number[] = [];
    const likedU: number[] = [];
    for (let i = 0; i < this.size; i++) {
      const u = this.membership(i);
      if (u < VIEWED_FRACTION) viewedU.push(u / VIEWED_FRACTION);
      if (u < LIKED_FRACTION) likedU.push(u / LIKED_FRACTION);
    }
    const viewed = viewedU.length;
    const liked = likedU.length;
    const viewScale = solveZipfScale(viewedU, viewed, VIEWS_PER_VIEWED_ITEM * viewed);
    const likeScale = solveZipfScale(likedU, liked, LIKES_PER_LIKED_ITEM * liked);
    let expectedViews = 0;
    for (const r of viewedU) expectedViews += zipfCount(viewScale, r, viewed);
    let expectedLikes = 0;
    for (const r of likedU) expectedLikes += zipfCount(likeScale, r, liked);
    this.plan = { viewed, liked, viewScale, likeScale, expectedViews, expectedLikes };
    return this.plan;
  }

  private membership(index: number): number {
    return hashUniform(this.seed, SALT.signalMembership, index);
  }

  /** Counts the signal generator will produce, without generating them. */
  signalSummary(): { viewedItems: number; likedItems: number; views: number; likes: number; total: number } {
    const p = this.signalPlan();
    return {
      viewedItems: p.viewed,
      likedItems: p.liked,
      views: p.expectedViews,
      likes: p.expectedLikes,
      total: p.expectedViews + p.expectedLikes,
    };
  }

  /** Per-item signal counts (views, likes); zero for items without signals. */
  signalCounts(index: number): { views: number; likes: number } {
    const p = this.signalPlan();
    const u = this.membership(index);
    return {
      views: u < VIEWED_FRACTION ? zipfCount(p.viewScale, u / VIEWED_FRACTION, p.viewed) : 0,
      likes: u < LIKED_FRACTION ? zipfCount(p.likeScale, u / LIKED_FRACTION, p.liked) : 0,
    };
  }

  /**
   * Signals as column chunks of at most `batchSize` events. Items are taken `itemsPerChunk` at a
   * time; the events of a chunk are shuffled together so that a batch mixes items and timestamps
   * the way live traffic does, while memory stays bounded by the hottest chunk.
   */
  *signalChunks(batchSize = 1000, itemsPerChunk = 2000): Generator<SignalColumns> {
    const p = this.signalPlan();
    let cap = 1 << 14;
    let item = new Int32Array(cap);
    let kind = new Uint8Array(cap);
    let at = new Float64Array(cap);
    const grow = (need: number) => {
      if (need <= cap) return;
      while (cap < need) cap *= 2;
      const ni = new Int32Array(cap);
      ni.set(item);
      item = ni;
      const nk = new Uint8Array(cap);
      nk.set(kind);
      kind = nk;
      const na = new Float64Array(cap);
      na.set(at);
      at = na;
    };

    for (let start = 0; start < this.size; start += itemsPerChunk) {
      const stop = Math.min(this.size, start + itemsPerChunk);
      let n = 0;
      for (let i = start; i < stop; i++) {
        const u = this.membership(i);
        if (u >= VIEWED_FRACTION) continue;
        const rand = mulberry32(mixSeed(this.seed, SALT.signalEvents, i));
        const rising = hashUniform(this.seed, SALT.rising, i) < RISING_FRACTION;
        const views = zipfCount(p.viewScale, u / VIEWED_FRACTION, p.viewed);
        const likes = u < LIKED_FRACTION ? zipfCount(p.likeScale, u / LIKED_FRACTION, p.liked) : 0;
        // Hotness in (0, 1]: 1 for the hottest item, falling off like the counts do.
        const hot = Math.pow(1 + (u / VIEWED_FRACTION) * p.viewed, -SIGNAL_ZIPF / 2);
        grow(n + views + likes);
        for (let e = 0; e < views + likes; e++) {
          item[n] = i;
          kind[n] = e < views ? 0 : 1;
          at[n] = Math.floor(this.now - 1 - signalAge(rand, hot, rising));
          n++;
        }
      }
      if (n === 0) continue;
      const rand = mulberry32(mixSeed(this.seed, SALT.chunkShuffle, start));
      for (let k = n - 1; k > 0; k--) {
        const j = Math.floor(rand() * (k + 1));
        const ti = item[k]!;
        item[k] = item[j]!;
        item[j] = ti;
        const tk = kind[k]!;
        kind[k] = kind[j]!;
        kind[j] = tk;
        const ta = at[k]!;
        at[k] = at[j]!;
        at[j] = ta;
      }
      for (let off = 0; off < n; off += batchSize) {
        const end = Math.min(n, off + batchSize);
        // Copies, so the consumer may keep a chunk after the generator moves on.
        yield { length: end - off, item: item.slice(off, end), kind: kind.slice(off, end), at: at.slice(off, end) };
      }
    }
  }

  /** Signals as object batches, the shape `db.signals()` takes. */
  *signalBatches(batchSize = 1000): Generator<CorpusSignal[]> {
    for (const chunk of this.signalChunks(batchSize)) yield this.toSignals(chunk);
  }

  toSignals(chunk: SignalColumns): CorpusSignal[] {
    const out = new Array<CorpusSignal>(chunk.length);
    for (let k = 0; k < chunk.length; k++) {
      out[k] = { item: this.id(chunk.item[k]!), kind: SIGNAL_KINDS[chunk.kind[k]!]!, weight: 1, at: chunk.at[k]! };
    }
    return out;
  }

  // -------------------------------------------------------------------------------------------
  // Queries
  // -------------------------------------------------------------------------------------------

  /** A random context vector: a sub-cluster centre of `category` plus item-like noise. */
  contextVector(rand: () => number, category?: number): Float32Array {
    const c = category ?? Math.floor(rand() * CATEGORIES.length);
    const sub = Math.floor(rand() * SUBCLUSTERS);
    const gauss = gaussian(rand);
    const d = this.dims;
    const v = new Float32Array(d);
    const base = (c * SUBCLUSTERS + sub) * d;
    for (let k = 0; k < d; k++) v[k] = this.subCentroids[base + k]! + this.noise * gauss();
    return normalize(v);
  }

  /** 1–3 distinct words from one category's vocabulary. */
  textQuery(rand: () => number, category?: number): string {
    const c = CATEGORIES[category ?? Math.floor(rand() * CATEGORIES.length)]!;
    const words = VOCABULARY[c]!;
    const n = 1 + Math.floor(rand() * 3);
    const picked = new Set<string>();
    while (picked.size < n) picked.add(words[skewedIndex(rand, words.length)]!);
    return [...picked].join(' ');
  }

  /** A category name chosen uniformly: as a filter it keeps ~5% of the items. */
  randomCategory(rand: () => number): string {
    return CATEGORIES[Math.floor(rand() * CATEGORIES.length)]!;
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

export function normalize(v: Float32Array): Float32Array {
  let s = 0;
  for (let k = 0; k < v.length; k++) s += v[k]! * v[k]!;
  const inv = s > 0 ? 1 / Math.sqrt(s) : 0;
  for (let k = 0; k < v.length; k++) v[k]! *= inv;
  return v;
}

/**
 * Index into a word list, biased toward the front (density ~ x^-0.23), so a few words of each
 * category are common and most are rare: BM25 then sees a realistic spread of document frequencies.
 */
function skewedIndex(rand: () => number, n: number): number {
  return Math.min(n - 1, Math.floor(n * Math.pow(rand(), 1.3)));
}

function composeText(rand: () => number, category: string): string {
  const own = VOCABULARY[category]!;
  const len = 8 + Math.floor(rand() * 13);
  const words = new Array<string>(len);
  for (let k = 0; k < len; k++) {
    const r = rand();
    if (r < 0.72) {
      words[k] = own[skewedIndex(rand, own.length)]!;
    } else if (r < 0.97) {
      words[k] = SHARED_VOCABULARY[skewedIndex(rand, SHARED_VOCABULARY.length)]!;
    } else {
      // A stray word from another category, as real titles have.
      const other = VOCABULARY[CATEGORIES[Math.floor(rand() * CATEGORIES.length)]!]!;
      words[k] = other[Math.floor(rand() * other.length)]!;
    }
  }
  return words.join(' ');
}

function zipfCdf(n: number, s: number): Float64Array {
  const cdf = new Float64Array(n);
  let sum = 0;
  for (let r = 0; r < n; r++) {
    sum += Math.pow(r + 1, -s);
    cdf[r] = sum;
  }
  for (let r = 0; r < n; r++) cdf[r]! /= sum;
  return cdf;
}

function sampleCdf(cdf: Float64Array, u: number): number {
  let lo = 0;
  let hi = cdf.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (cdf[mid]! < u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** `r` in [0, 1) is the item's position in the hotness order, `n` the number of such items. */
function zipfCount(scale: number, r: number, n: number): number {
  return Math.max(1, Math.round(scale * Math.pow(1 + r * n, -SIGNAL_ZIPF)));
}

/** The scale that makes the rounded, floored-at-one counts add up to `target` (bisection). */
function solveZipfScale(ranks: number[], n: number, target: number): number {
  if (n === 0) return 0;
  const total = (scale: number) => {
    let t = 0;
    for (const r of ranks) t += zipfCount(scale, r, n);
    return t;
  };
  let lo = 0;
  let hi = target;
  for (let it = 0; it < 50; it++) {
    const mid = (lo + hi) / 2;
    if (total(mid) < target) lo = mid;
    else hi = mid;
  }
  return hi;
}

/**
 * Age of one event in ms, within the last 7 days. Cold items are spread evenly; the hotter the
 * item the more its events crowd toward now (the exponent grows with hotness); rising items got
 * most of their events in the last few hours, which is what a trending ranking should surface.
 */
function signalAge(rand: () => number, hot: number, rising: boolean): number {
  if (rising && rand() < 0.8) {
    const age = -Math.log(1 - rand()) * 3 * HOUR;
    return Math.min(age, SIGNAL_SPAN - 1);
  }
  return Math.pow(rand(), 1 + 3 * hot) * (SIGNAL_SPAN - 1);
}
