import type { DegradationLevel, RetrieveRequest, SearchRequest, TidalDb } from 'tidal-core';
import type { Corpus } from './corpus.js';

/** One query of the mix, ready to run; resolves with the level it ran at. */
export type Query = (db: TidalDb) => Promise<DegradationLevel>;

/** One query of the mix as data: which call, and its request (vectors are `Float32Array`s; {@link mixRequestJson} turns one into an HTTP body). */
export type MixRequest =
  { readonly kind: 'retrieve'; readonly body: RetrieveRequest } | { readonly kind: 'search'; readonly body: SearchRequest };

/**
 * The query mix of the overload runs (the benchmarks, in process and over HTTP, and the demo): a
 * quarter trending, a tenth newest in a category, 15 % popular around a context vector, a quarter
 * text search, a tenth filtered text search, 15 % hybrid; parameters drawn once, up front, from
 * `rand`.
 */
export function prepareRequests(corpus: Corpus, rand: () => number, n: number): MixRequest[] {
  const out: MixRequest[] = [];
  for (let i = 0; i < n; i++) {
    const r = rand();
    const diversity = { maxPer: { creator: 2 } };
    if (r < 0.25) out.push({ kind: 'retrieve', body: { profile: 'trending', diversity, limit: 20 } });
    else if (r < 0.35) {
      const category = corpus.randomCategory(rand);
      out.push({ kind: 'retrieve', body: { profile: 'new', filter: { category }, diversity, limit: 20 } });
    } else if (r < 0.5) {
      const context = corpus.contextVector(rand);
      out.push({ kind: 'retrieve', body: { profile: 'popular', context, diversity, limit: 20 } });
    } else if (r < 0.75) {
      const text = corpus.textQuery(rand);
      out.push({ kind: 'search', body: { text, diversity, limit: 10 } });
    } else if (r < 0.85) {
      const text = corpus.textQuery(rand);
      const category = corpus.randomCategory(rand);
      out.push({ kind: 'search', body: { text, filter: { category }, limit: 10 } });
    } else {
      const c = Math.floor(rand() * 20);
      const text = corpus.textQuery(rand, c);
      const vector = corpus.contextVector(rand, c);
      out.push({ kind: 'search', body: { text, vector, diversity, limit: 10 } });
    }
  }
  return out;
}

/** {@link prepareRequests}, each ready to run against a database in this process. */
export function prepareQueries(corpus: Corpus, rand: () => number, n: number): Query[] {
  return prepareRequests(corpus, rand, n).map((q): Query =>
    q.kind === 'retrieve'
      ? async (db) => (await db.retrieve(q.body)).degradationLevel
      : async (db) => (await db.search(q.body)).degradationLevel,
  );
}

/** The query types of the mix, by name, each with its share of the mix. */
export const QUERY_TYPES = ['trending', 'new in a category', 'popular around a context vector', 'text', 'text + filter', 'hybrid'] as const;
export type QueryType = (typeof QUERY_TYPES)[number];

/** A query of one type that can be run at a requested level, returning the ids it ranked. */
export interface TypedQuery {
  type: QueryType;
  run(db: TidalDb, level: DegradationLevel): Promise<{ ids: string[]; level: DegradationLevel; serviceMs: number | null }>;
}

/** `perType` queries of every type of the mix, with parameters drawn from `rand`. */
export function prepareTypedQueries(corpus: Corpus, rand: () => number, perType: number): TypedQuery[] {
  const out: TypedQuery[] = [];
  const diversity = { maxPer: { creator: 2 } };
  const retrieve = (type: QueryType, req: Parameters<TidalDb['retrieve']>[0]): TypedQuery => ({
    type,
    run: async (db, level) => {
      const r = await db.retrieve({ ...req, level });
      return { ids: r.items.map((i) => i.id), level: r.degradationLevel, serviceMs: r.explain.serviceMs ?? null };
    },
  });
  const search = (type: QueryType, req: Parameters<TidalDb['search']>[0]): TypedQuery => ({
    type,
    run: async (db, level) => {
      const r = await db.search({ ...req, level });
      return { ids: r.hits.map((h) => h.id), level: r.degradationLevel, serviceMs: r.explain.serviceMs ?? null };
    },
  });
  for (let i = 0; i < perType; i++) {
    out.push(retrieve('trending', { profile: 'trending', diversity, limit: 10 }));
    out.push(retrieve('new in a category', { profile: 'new', filter: { category: corpus.randomCategory(rand) }, diversity, limit: 10 }));
    out.push(
      retrieve('popular around a context vector', { profile: 'popular', context: corpus.contextVector(rand), diversity, limit: 10 }),
    );
    out.push(search('text', { text: corpus.textQuery(rand), diversity, limit: 10 }));
    out.push(search('text + filter', { text: corpus.textQuery(rand), filter: { category: corpus.randomCategory(rand) }, limit: 10 }));
    const c = Math.floor(rand() * 20);
    out.push(search('hybrid', { text: corpus.textQuery(rand, c), vector: corpus.contextVector(rand, c), diversity, limit: 10 }));
  }
  return out;
}

/** The JSON body of a mix request, with its vectors as plain arrays. */
export function mixRequestJson(q: MixRequest): string {
  return JSON.stringify(q.body, (_key, value: unknown) => (value instanceof Float32Array ? Array.from(value) : value));
}

/** A mix request as the load generator sends it to `tidal serve`: POST /retrieve or /search with its JSON body. */
export function mixHttpRequest(q: MixRequest): { method: 'POST'; path: string; body: string; headers: Record<string, string> } {
  return {
    method: 'POST',
    path: q.kind === 'retrieve' ? '/retrieve' : '/search',
    body: mixRequestJson(q),
    headers: { 'content-type': 'application/json' },
  };
}
