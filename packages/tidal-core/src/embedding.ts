/**
 * Semantic search from text alone: `search({ text, semantic: true })` turns the text into a vector
 * through the configured embedder and runs hybrid (BM25 + ANN, fused by RRF). The embedder is a
 * dependency that can be slow, down or shedding: then the search runs on the text alone and says
 * why on its result (`semanticFallback`), it does not fail. tidal-fleet's `EmbedderClient` is one
 * (its `tryEmbed`); any object with that method is.
 */
import { AbortedError, InvalidInputError } from 'tidal-load';
import type { TidalWarning } from 'tidal-load';
import type { ItemInput, SearchRequest, SearchResults } from './types.js';
import { checkText, checkVector } from './validate.js';

/** What an embedder is called with. */
export interface EmbedCallOptions {
  /** The caller left: the embedder may stop at once (and reject with `AbortedError`). */
  signal?: AbortSignal;
  /** When the answer is no use any more, in milliseconds on `Date.now`'s clock. */
  deadlineMs?: number;
}

/** What an embedder answers: the vector, or why there is none. */
export interface EmbedAnswer {
  readonly vector: Float32Array | readonly number[] | null;
  /** `null` with a vector; otherwise the reason, e.g. `embedder_shed`, `embedder_timeout`, `embedder_failed`. */
  readonly degradation: string | null;
}

/** Turns a query's text into a vector. `builder.embedder(embedder)` configures one. */
export interface TextEmbedder {
  /** Answers a degradation reason rather than rejecting when it is slow, down or shedding. */
  tryEmbed(text: string, options: EmbedCallOptions): Promise<EmbedAnswer>;
}

/**
 * Why a `semantic: true` search ran on its text alone: the embedder's reason (`embedder_shed`,
 * `embedder_timeout`, `embedder_failed`), `embedder_bad_vector` for a vector that is not one of the
 * schema's (wrong length, not finite, all zero), `embedder_error` for an embedder that threw.
 */
export type SemanticFallback = string;

/**
 * The share of a query's `timeoutMs` the embedding may use: the rest is left for the search, so a
 * slow embedder that runs out its time still leaves BM25 the other half to answer in.
 */
export const EMBED_DEADLINE_SHARE = 0.5;

const embedders = new WeakMap<object, TextEmbedder>();

/** @throws {@link InvalidInputError} unless `value` has a `tryEmbed` method. */
export function checkEmbedder(value: unknown): TextEmbedder {
  if (typeof value !== 'object' || value === null || typeof (value as Partial<TextEmbedder>).tryEmbed !== 'function') {
    throw new InvalidInputError('embedder', 'an object with tryEmbed(text, { signal, deadlineMs })', value);
  }
  return value as TextEmbedder;
}

/** Gives `db` its embedder (the builder calls it once the database is open). */
export function attachEmbedder(db: object, embedder: TextEmbedder): void {
  embedders.set(db, embedder);
}

/**
 * Runs a `semantic` search: checks the request, embeds its text within its share of the deadline,
 * and hands `search` the request with the vector (hybrid) or without it (text alone), the deadline
 * less the time the embedding took.
 * @throws {@link InvalidInputError} naming `semantic` (not a boolean, no embedder, no text, a vector given, no embeddingDims).
 */
export async function semanticSearch(
  db: object,
  req: SearchRequest,
  dims: number,
  search: (req: SearchRequest) => Promise<SearchResults>,
): Promise<SearchResults> {
  const { semantic, ...plain } = req;
  if (typeof semantic !== 'boolean') throw new InvalidInputError('semantic', 'true or false', semantic);
  if (!semantic) return search(plain);
  const embedder = embedders.get(db);
  if (embedder === undefined)
    throw new InvalidInputError('semantic', 'true only with an embedder configured (builder.embedder(...))', semantic);
  if (dims === 0)
    throw new InvalidInputError('semantic', 'true only with schema.embeddingDims (the vectors hybrid search matches)', semantic);
  if (req.vector !== undefined)
    throw new InvalidInputError('semantic', 'left out when vector is given (the text is embedded in its place)', semantic);
  const text = checkText('text', req.text);
  if (text === null) throw new InvalidInputError('semantic', 'true only with text to embed', req.text);
  const started = Date.now();
  const timeoutMs = typeof req.timeoutMs === 'number' && Number.isFinite(req.timeoutMs) && req.timeoutMs > 0 ? req.timeoutMs : undefined;
  const options: EmbedCallOptions = {};
  if (req.signal !== undefined) options.signal = req.signal;
  if (timeoutMs !== undefined) options.deadlineMs = started + timeoutMs * EMBED_DEADLINE_SHARE;
  let vector: Float32Array | null = null;
  let fallback: SemanticFallback | null;
  try {
    const answer = await embedder.tryEmbed(text, options);
    fallback = answer.degradation;
    if (fallback === null) {
      try {
        vector = checkVector('vector', answer.vector, dims);
      } catch {
        fallback = 'embedder_bad_vector';
      }
    }
  } catch (err) {
    if (AbortedError.is(err) || req.signal?.aborted) throw err;
    fallback = 'embedder_error';
  }
  const next: SearchRequest = vector === null ? plain : { ...plain, vector };
  // The embedding counted against the query's own deadline: the search gets what is left.
  if (timeoutMs !== undefined) next.timeoutMs = Math.max(1, Math.floor(timeoutMs - (Date.now() - started)));
  const result = await search(next);
  if (fallback !== null) result.warnings.push(`semantic search ran on the text alone: ${fallback}`);
  result.semanticFallback = fallback;
  return result;
}

/**
 * Embedding calls in flight at once while upserting: the embedder's own bulkhead bounds what it
 * accepts, so a batch of a thousand items must not arrive as a thousand concurrent calls (most
 * would be shed). Four keeps an embedder of ~40 ms busy at ~100 items/s (Little's law: 4 / 0.04 s)
 * without taking more than a small share of a bulkhead sized for queries.
 */
export const UPSERT_EMBED_CONCURRENCY = 4;

/**
 * Items that come without an embedding but with text get one from the configured embedder before
 * they are written; the others are returned as they are. An item the embedder cannot embed (shed,
 * timed out, failed, a vector of the wrong length) is written without one, and one
 * `TIDAL_EMBEDDING_SKIPPED` warning names them: a slow embedder must not be able to stop writes.
 * Without an embedder (or without `embeddingDims`) this returns `items` itself.
 */
export async function embedMissing(
  db: object,
  items: readonly ItemInput[],
  dims: number,
  onWarning: (w: TidalWarning) => void,
): Promise<readonly ItemInput[]> {
  const embedder = embedders.get(db);
  if (embedder === undefined || dims === 0) return items;
  const todo: number[] = [];
  for (let i = 0; i < items.length; i++) {
    const it = items[i];
    // Shapes validation will refuse are left to it: only plain items with text and no embedding.
    if (typeof it === 'object' && it !== null && it.embedding === undefined && typeof it.text === 'string' && it.text.trim() !== '')
      todo.push(i);
  }
  if (todo.length === 0) return items;
  const out = items.slice();
  const skipped: string[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < todo.length) {
      const i = todo[next++]!;
      const item = items[i]!;
      let reason: string | null;
      try {
        const answer = await embedder.tryEmbed(item.text as string, {});
        reason = answer.degradation;
        if (reason === null) {
          try {
            out[i] = { ...item, embedding: checkVector('embedding', answer.vector, dims) };
          } catch {
            reason = 'embedder_bad_vector';
          }
        }
      } catch {
        reason = 'embedder_error';
      }
      if (reason !== null) skipped.push(`${String(item.id)} (${reason})`);
    }
  };
  await Promise.all(Array.from({ length: Math.min(UPSERT_EMBED_CONCURRENCY, todo.length) }, worker));
  if (skipped.length > 0) {
    onWarning({
      code: 'TIDAL_EMBEDDING_SKIPPED',
      message: `${skipped.length} of ${todo.length} items without an embedding could not get one from the embedder and were written without one: ${skipped.slice(0, 5).join(', ')}${skipped.length > 5 ? ', ...' : ''}`,
    });
  }
  return out;
}
