/**
 * Deterministic synthetic corpus for the demo and the benchmark.
 *
 * Every item is derived from `(seed, index)` alone, so any item can be regenerated on demand: the
 * benchmark streams a million items into two databases and builds a brute-force matrix without ever
 * holding a million item objects at once, and the demo and the benchmark agree on what item 123 is.
 * It lives here so that `tidal serve --demo` can load it; the bench imports it from
 * tidal-serve's index.
 */

import { mulberry32 } from './random.js';

// ---------------------------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------------------------

/**
 * Mixes several integers into one 32-bit seed (murmur3 finaliser per step). Streams for different
 * purposes get different `salt`s so that, say, adding a draw to the text of an item does not shift
 * its signals.
 */
export function mixSeed(...parts: number[]): number {
  let h = 0x9e3779b9;
  for (const p of parts) {
    h ^= p >>> 0;
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    h ^= h >>> 16;
  }
  return h >>> 0;
}

/** One uniform draw in [0, 1) from a hashed position, without creating a generator. */
function hashUniform(...parts: number[]): number {
  return mixSeed(...parts) / 4294967296;
}

/** Standard normal draws (Box-Muller, caching the second value). */
export function gaussian(rand: () => number): () => number {
  let spare = Number.NaN;
  return () => {
    if (!Number.isNaN(spare)) {
      const s = spare;
      spare = Number.NaN;
      return s;
    }
    let u = rand();
    while (u <= Number.EPSILON) u = rand();
    const v = rand();
    const r = Math.sqrt(-2 * Math.log(u));
    spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  };
}

const SALT = {
  centroids: 1,
  item: 2,
  signalMembership: 3,
  signalEvents: 4,
  chunkShuffle: 5,
  rising: 6,
} as const;

// ---------------------------------------------------------------------------------------------
// Vocabulary
// ---------------------------------------------------------------------------------------------

/**
 * Twenty categories of forty words each. Real words rather than generated syllables so that the
 * demo's results read like content; every word belongs to exactly one list (checked at load time),
 * which is what makes a text query point at one category.
 */
const CATEGORY_WORDS: Record<string, string> = {
  music:
    'jazz piano guitar melody chord rhythm drummer bass vinyl album concert symphony orchestra violin saxophone lyrics chorus tempo harmony playlist remix vocalist ballad acoustic riff amplifier trumpet cello opera microphone setlist encore synthesizer duet soprano conductor banjo ukulele turntable bluegrass',
  cooking:
    'recipe pasta garlic oven skillet braise sauce dough bake simmer spices oregano basil noodle dumpling broth stew butter flour caramel marinade grill brisket tofu curry risotto pastry sourdough whisk saute chili lentil omelette custard glaze vinaigrette seasoning ferment paprika cinnamon',
  travel:
    'passport airport luggage itinerary hostel island beach backpacking cruise visa sightseeing landmark ferry railway roadtrip campsite glacier desert safari lagoon villa resort souvenir compass jetlag layover boarding terminal embassy canyon volcano fjord harbor archipelago nomad tourist hotel airline postcard motel',
  fitness:
    'workout squat deadlift treadmill cardio protein stretching yoga pilates kettlebell dumbbell barbell marathon sprint endurance muscle calories hydration plank pushup pullup lunges crossfit abs biceps triceps rowing cycling recovery warmup cooldown stamina trainer gym reps lifting mobility hiit posture jogging',
  gaming:
    'console controller joystick speedrun multiplayer esports quest dungeon boss respawn loot shooter platformer rpg arcade pixel leaderboard patch mod sandbox raid guild avatar headset streamer checkpoint combo hitbox lag clan cartridge handheld sidequest inventory crafting gamepad roguelike emulator achievement minecraft',
  science:
    'physics chemistry biology molecule atom quantum telescope galaxy planet experiment hypothesis laboratory microscope genome cell neuron evolution fossil asteroid comet orbit gravity particle electron photon enzyme bacteria virus ecosystem species entropy relativity spectrum isotope catalyst nebula supernova vaccine astronomy geology',
  finance:
    'stocks bonds dividend portfolio budget savings mortgage inflation interest investing crypto bitcoin etf retirement pension taxes credit debt loan equity broker trading hedge valuation earnings revenue venture banking currency forex recession bullish bearish fintech annuity liquidity insurance accounting payroll fiscal',
  fashion:
    'dress denim sneakers runway designer outfit couture tailoring fabric silk leather jacket handbag accessories jewelry necklace earrings makeup lipstick skincare hairstyle streetwear thrift boutique lookbook fragrance perfume heels boots scarf sweater knitwear wardrobe stylist capsule blazer sunglasses tote embroidery cardigan',
  film:
    'movie cinema director screenplay actor actress trailer premiere blockbuster documentary animation sequel franchise boxoffice oscar cinematography soundtrack thriller horror romcom western noir casting scene script storyboard projector popcorn critic remake villain superhero hollywood matinee subtitles cameo stuntman filmmaker dubbing biopic',
  books:
    'novel author poetry fiction nonfiction chapter paperback hardcover library bookshelf memoir biography publisher bestseller mystery fantasy scifi literature bookclub audiobook ebook prose narrator protagonist plot sonnet anthology essay literary paragraph bookstore typewriter quill dystopia fable saga haiku novella epilogue librarian',
  gardening:
    'garden seeds compost soil tomato seedling greenhouse mulch pruning watering perennial bulbs orchid succulent cactus herbs lettuce harvest fertilizer weeds shovel trowel hose sprout vine blossom tulip rose lavender hydrangea pollinator bees orchard lawn trellis planter raised hedgerow zucchini daffodil',
  pets:
    'dog cat puppy kitten leash collar grooming veterinarian aquarium hamster parrot rabbit fetch kibble treats litter shelter breed terrier retriever labrador poodle beagle tabby whiskers paw tail bark meow cage goldfish guineapig ferret turtle obedience crate chew catnip doghouse petsitter',
  tech:
    'software laptop smartphone processor javascript python database cloud kubernetes api browser algorithm compiler gadget chip semiconductor robotics android iphone linux keyboard monitor wifi bluetooth router encryption cybersecurity opensource github framework debugging backend frontend devops firmware smartwatch drone typescript startup programming',
  art:
    'painting canvas sculpture gallery watercolor acrylic sketch portrait easel brush charcoal mural exhibition curator abstract impressionism pottery ceramics clay collage etching lithograph palette pigment fresco mosaic calligraphy illustration graffiti installation artist masterpiece cubism surrealism gouache pastel printmaking origami museum renaissance',
  sports:
    'football soccer basketball baseball tennis golf hockey rugby cricket playoffs championship stadium referee goalkeeper quarterback touchdown homerun slamdunk penalty league season coach athlete olympics medal scoreboard dribble tackle inning wicket offside halftime fans jersey rookie draft umpire tournament racket volleyball',
  history:
    'ancient medieval empire dynasty pharaoh castle knight revolution archaeology artifact civilization monarchy treaty battle colonial viking samurai rome egypt pyramid byzantine crusade feudal parliament chronicle archive heritage monument emperor kingdom siege relic industrial coldwar manuscript chivalry legion gladiator aztec sultan',
  parenting:
    'toddler newborn baby diaper stroller bedtime lullaby nursery preschool homework tantrum breastfeeding pacifier crib milestones siblings teenager playdate daycare babysitter naptime potty kindergarten sleepover allowance chores carseat highchair teething storytime grandparents screentime fatherhood motherhood twins playground adoption parenting pregnancy infant',
  cars:
    'engine sedan suv hatchback horsepower torque transmission turbo brakes tires electric gasoline mileage dealership roadster convertible pickup truck motorsport racing dashboard ignition exhaust radiator clutch gearbox chassis suspension headlights windshield garage mechanic oilchange coupe detailing carwash rally minivan odometer spoiler',
  photography:
    'lens aperture shutter exposure tripod dslr mirrorless landscape bokeh lightroom zoom flash iso focus composition darkroom negative polaroid telephoto macro wideangle histogram sensor megapixel viewfinder panorama timelapse selfie silhouette photographer snapshot filmroll headshot backlight lightbox monochrome photobook reflector gimbal vignette',
  comedy:
    'standup sitcom joke punchline comedian improv satire parody prank meme laughter hilarious sarcasm pun heckler openmic monologue spoof slapstick blooper deadpan comic cartoon skit lampoon wit banter giggle funny absurd goofy clown mime jester riddle limerick roastbattle sketchshow tickle chuckle',
};

/** Words that any item may use; they make texts less artificial and give BM25 common terms. */
const SHARED_WORDS =
  'new best guide tips how why top easy quick daily weekly ultimate beginner advanced story first time life world home week today free simple great little big love ideas secrets inside behind update live video episode part series real honest people things ways look watch try learn perfect classic modern favorite amazing everyday essential complete journey challenge'.split(
    ' ',
  );

export const CATEGORIES: readonly string[] = Object.freeze(Object.keys(CATEGORY_WORDS));
export const VOCABULARY: Readonly<Record<string, readonly string[]>> = Object.freeze(
  Object.fromEntries(Object.entries(CATEGORY_WORDS).map(([c, w]) => [c, Object.freeze(w.split(' '))])),
);
export const SHARED_VOCABULARY: readonly string[] = Object.freeze(SHARED_WORDS);

(function checkVocabulary(): void {
  const seen = new Map<string, string>();
  for (const w of SHARED_WORDS) seen.set(w, 'shared');
  for (const [cat, words] of Object.entries(VOCABULARY)) {
    if (words.length !== 40) throw new Error(`vocabulary of ${cat} has ${words.length} words, expected 40`);
    for (const w of words) {
      if (!/^[a-z]+$/.test(w)) throw new Error(`vocabulary word ${JSON.stringify(w)} is not one lowercase token`);
      const other = seen.get(w);
      if (other !== undefined) throw new Error(`vocabulary word ${w} is in both ${other} and ${cat}`);
      seen.set(w, cat);
    }
  }
})();

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
      words[k] = SHARED_WORDS[skewedIndex(rand, SHARED_WORDS.length)]!;
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
