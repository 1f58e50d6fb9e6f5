/**
 * The personalized mix of `bench:serve --mix personal`: users with histories and follows, and a
 * request drawn per arrival from a seeded generator (never a loop over a fixed list), reads and
 * writes naming those users.
 *
 * Every user is a pure function of its index and the corpus: user u likes category u % 20, starts
 * from an embedding near one of that category's sub-centres, has viewed `history` items of the
 * category and follows `follows` creators of it. The server is built from the same functions
 * (personal-users.ts), and the generator draws from them, so a `related` query names an item some
 * user engaged with and a `following` query a user who follows someone.
 */
import { InvalidInputError } from 'tidal-core';
import { CATEGORIES, Corpus, mixSeed } from '../corpus.js';
import { mulberry32 } from '../random.js';
import type { RequestSpec } from './loadgen.js';

/** What the generator needs to draw the personal mix; JSON, the file `--requests` names. */
export interface PersonalMixSpec {
  readonly draw: 'personal';
  /** The demo corpus the server loaded (seed 42, 128 dimensions). */
  readonly items: number;
  readonly users: number;
  /** Items each user viewed before the run. */
  readonly history: number;
  /** Share of arrivals that are writes naming a user (signals, hides, follows), from 0 to 1. */
  readonly writeShare: number;
  /** Item indexes by category (the corpus's `metadata.category`), in `CATEGORIES` order. */
  readonly byCategory: readonly (readonly number[])[];
  /** One read type only, no writes (`--stages`: each type measured alone). */
  readonly only?: ReadType;
  /** The `level` every read asks for (`--stages`: each level forced in turn). */
  readonly level?: (typeof LEVEL_NAMES)[number];
}

/** The mix over `corpus` (the demo's): `users` users with the default history, `writeShare` of writes. */
export function personalSpec(corpus: Corpus, users: number, writeShare: number): PersonalMixSpec {
  return {
    draw: 'personal',
    items: corpus.size,
    users,
    history: PERSONAL_DEFAULTS.history,
    writeShare,
    byCategory: itemsByCategory(corpus),
  };
}

/** The degradation levels by name, best first; a read may ask for one (`level`, docs/api.md). */
export const LEVEL_NAMES = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const;

/** Reads and their shares of the reads; writes and their shares of the writes. */
export const PERSONAL_READS = Object.freeze({
  for_you: 0.35,
  'for_you+unseen': 0.1,
  following: 0.1,
  related: 0.1,
  trending: 0.15,
  text: 0.1,
  hybrid: 0.1,
});
export const PERSONAL_WRITES = Object.freeze({ signal: 0.8, hide: 0.1, follow: 0.1 });
export type ReadType = keyof typeof PERSONAL_READS;
export type PersonalType = ReadType | `write:${keyof typeof PERSONAL_WRITES}`;

export const PERSONAL_DEFAULTS = Object.freeze({ users: 10_000, history: 20, follows: 4, writeShare: 0.1 });

/** A request of the mix with the type it was drawn as. */
export type TypedRequest = RequestSpec & { readonly type: PersonalType };

const SALT_USER = 0x75736572;
const DIVERSITY = { maxPer: { creator: 2 } };
const JSON_HEADERS = Object.freeze({ 'content-type': 'application/json' });

export function userId(u: number): string {
  return `user-${String(u).padStart(5, '0')}`;
}

/** The category index user `u` likes. */
export function userCategory(u: number): number {
  return u % CATEGORIES.length;
}

/** Item indexes for `byCategory`: every item's category, in one pass over the corpus. */
export function itemsByCategory(corpus: Corpus): number[][] {
  const out: number[][] = CATEGORIES.map(() => []);
  for (let i = 0; i < corpus.size; i++) {
    const c = CATEGORIES.indexOf(corpus.item(i).metadata.category);
    out[c]!.push(i);
  }
  return out;
}

/**
 * User `u` as it is built before the run: its embedding, the items of its history (indexes, in
 * order) and the creators it follows. Pure: the generator rebuilds a user's history to draw a
 * `related` item from it.
 */
export function personalUser(
  corpus: Corpus,
  spec: Pick<PersonalMixSpec, 'history' | 'byCategory'>,
  u: number,
  follows: number,
): { id: string; embedding: Float32Array; history: number[]; follows: string[] } {
  const rand = mulberry32(mixSeed(corpus.seed, SALT_USER, u));
  const c = userCategory(u);
  const pool = spec.byCategory[c]!;
  const embedding = corpus.contextVector(rand, c);
  const history = historyOf(rand, pool, spec.history);
  const creators = new Set<string>();
  for (let k = 0; k < follows * 4 && creators.size < follows; k++)
    creators.add(corpus.item(pool[Math.floor(rand() * pool.length)]!).metadata.creator);
  return { id: userId(u), embedding, history, follows: [...creators] };
}

function historyOf(rand: () => number, pool: readonly number[], n: number): number[] {
  const out: number[] = [];
  for (let k = 0; k < n && pool.length > 0; k++) out.push(pool[Math.floor(rand() * pool.length)]!);
  return out;
}

/** The history items of user `u` (the same draws as {@link personalUser}, without the follows). */
function historyItems(corpus: Corpus, spec: PersonalMixSpec, u: number): number[] {
  const rand = mulberry32(mixSeed(corpus.seed, SALT_USER, u));
  const c = userCategory(u);
  corpus.contextVector(rand, c); // the embedding's draws come first
  return historyOf(rand, spec.byCategory[c]!, spec.history);
}

/** Checks a spec read from JSON. */
export function checkPersonalSpec(value: unknown, field = '--requests'): PersonalMixSpec {
  const s = value as Partial<PersonalMixSpec>;
  const whole = (name: keyof PersonalMixSpec, min: number) => {
    const n = s[name];
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < min)
      throw new InvalidInputError(`${field}.${name}`, `a whole number ≥ ${min}`, n);
  };
  whole('items', 1);
  whole('users', 1);
  whole('history', 1);
  if (typeof s.writeShare !== 'number' || !(s.writeShare >= 0 && s.writeShare <= 1))
    throw new InvalidInputError(`${field}.writeShare`, 'a share from 0 to 1', s.writeShare);
  if (!Array.isArray(s.byCategory) || s.byCategory.length !== CATEGORIES.length || s.byCategory.some((l) => !Array.isArray(l)))
    throw new InvalidInputError(`${field}.byCategory`, `${CATEGORIES.length} lists of item indexes`, s.byCategory);
  if (s.only !== undefined && !Object.hasOwn(PERSONAL_READS, s.only))
    throw new InvalidInputError(`${field}.only`, `one of ${Object.keys(PERSONAL_READS).join(', ')}`, s.only);
  if (s.level !== undefined && !LEVEL_NAMES.includes(s.level))
    throw new InvalidInputError(`${field}.level`, `one of ${LEVEL_NAMES.join(', ')}`, s.level);
  return s as PersonalMixSpec;
}

function pick<K extends string>(shares: Readonly<Record<K, number>>, r: number): K {
  let acc = 0;
  const keys = Object.keys(shares) as K[];
  for (const k of keys) {
    acc += shares[k];
    if (r < acc) return k;
  }
  return keys[keys.length - 1]!;
}

/** A request of the mix as objects (a vector as a Float32Array): its route, its body and its type. */
export interface PersonalRequest {
  readonly path: string;
  readonly body: Record<string, unknown>;
  readonly type: PersonalType;
}

function json(r: PersonalRequest): TypedRequest {
  const text = JSON.stringify(r.body, (_k, v: unknown) =>
    v instanceof Float32Array ? Array.from(v, (x) => Math.round(x * 1e5) / 1e5) : v,
  );
  return { method: 'POST', path: r.path, body: text, headers: JSON_HEADERS, type: r.type };
}

/** Draws requests of the personal mix as HTTP requests (see {@link personalRequests}). */
export function personalDrawer(spec: PersonalMixSpec, rand: () => number): () => TypedRequest {
  const next = personalRequests(spec, rand);
  return () => json(next());
}

/**
 * Draws requests of the personal mix, one per call, from `rand`: the type by its share, then its
 * user, item, words or vector. The same draws as {@link personalDrawer}, as objects: what an
 * embedded caller passes to `db.retrieve` / `db.search` (`/retrieve`, `/search`) and to the writes.
 */
export function personalRequests(spec: PersonalMixSpec, rand: () => number): () => PersonalRequest {
  const corpus = new Corpus({ items: spec.items, dims: 128, seed: 42 });
  const anyUser = () => Math.floor(rand() * spec.users);
  const categoryItem = (u: number) => {
    const pool = spec.byCategory[userCategory(u)]!;
    return pool[Math.floor(rand() * pool.length)]!;
  };
  const level = spec.level;
  const read = (path: string, body: Record<string, unknown>, type: ReadType): PersonalRequest => ({
    path,
    body: level === undefined ? body : { ...body, level },
    type,
  });
  const write = (path: string, body: Record<string, unknown>, type: PersonalType): PersonalRequest => ({ path, body, type });
  return () => {
    if (spec.only === undefined && rand() < spec.writeShare) {
      const u = anyUser();
      const user = userId(u);
      switch (pick(PERSONAL_WRITES, rand())) {
        case 'signal':
          return write('/signals', { item: corpus.id(categoryItem(u)), kind: rand() < 0.8 ? 'view' : 'like', user }, 'write:signal');
        case 'hide':
          return write(`/users/${user}/hide`, { item: corpus.id(categoryItem(u)) }, 'write:hide');
        case 'follow':
          return write(`/users/${user}/follow`, { creator: corpus.item(categoryItem(u)).metadata.creator }, 'write:follow');
      }
    }
    const type = spec.only ?? pick(PERSONAL_READS, rand());
    switch (type) {
      case 'for_you':
        return read('/retrieve', { profile: 'for_you', user: userId(anyUser()), limit: 20 }, type);
      case 'for_you+unseen':
        return read('/retrieve', { profile: 'for_you', user: userId(anyUser()), userFilter: { unseen: true }, limit: 20 }, type);
      case 'following':
        return read('/retrieve', { profile: 'following', user: userId(anyUser()), limit: 20 }, type);
      case 'related': {
        const u = anyUser();
        const history = historyItems(corpus, spec, u);
        const item = corpus.id(history[Math.floor(rand() * history.length)]!);
        return read('/retrieve', { profile: 'related', item, user: userId(u), diversity: DIVERSITY, limit: 20 }, type);
      }
      case 'trending':
        return read('/retrieve', { profile: 'trending', diversity: DIVERSITY, limit: 20 }, type);
      case 'text':
        return read('/search', { text: corpus.textQuery(rand), diversity: DIVERSITY, limit: 10 }, type);
      case 'hybrid': {
        const c = Math.floor(rand() * CATEGORIES.length);
        return read(
          '/search',
          { text: corpus.textQuery(rand, c), vector: corpus.contextVector(rand, c), diversity: DIVERSITY, limit: 10 },
          type,
        );
      }
    }
  };
}
