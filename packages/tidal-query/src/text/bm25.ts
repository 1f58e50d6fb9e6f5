/**
 * SQLite FTS5's bm25() (fts5_aux.c, fts5Bm25Function), term by term, with the same floating-point
 * operations in the same order, so that a score computed here is the one FTS5 reports, negated:
 *
 *   score(D) = Σ_i idf(q_i) · f(q_i, D) · (k1 + 1) / (f(q_i, D) + k1 · (1 − b + b · |D| / avgdl))
 *   idf(q)   = ln((N − n(q) + 0.5) / (n(q) + 0.5)), and 1e-6 when that is ≤ 0
 *
 * with k1 = 1.2, b = 0.75, the sum over the query's phrases in query order, f the term frequency,
 * |D| the document's token count, n(q) the number of documents matching q, N the number of
 * documents and avgdl their total tokens / N, all from the text index itself (see text-index.ts).
 *
 * Those are the live counts, as FTS5 keeps them for a table with content. A contentless_delete
 * FTS5 table never lowers N or the token total on a delete, having no text to tokenize again:
 * there every replaced or deleted row stays in N and avgdl for good, and every IDF grows as items
 * are rewritten. The index does not copy that (a test holds it to a table with content).
 */

export const K1 = 1.2;
export const B = 0.75;
/** FTS5's floor for a non-positive IDF (a term in more than half of the rows). */
export const IDF_FLOOR = 1e-6;

/** FTS5's IDF for a term in `hits` of `rows` rows. */
export function idf(rows: number, hits: number): number {
  const v = Math.log((rows - hits + 0.5) / (hits + 0.5));
  return v <= 0 ? IDF_FLOOR : v;
}

/** A term's contribution before the IDF: its frequency `tf` in a document of `len` tokens. */
export function impact(tf: number, len: number, avgdl: number): number {
  return (tf * (K1 + 1.0)) / (tf + K1 * (1 - B + (B * len) / avgdl));
}
