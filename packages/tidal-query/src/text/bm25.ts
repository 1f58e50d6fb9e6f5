/**
 * SQLite FTS5's bm25() (fts5_aux.c, fts5Bm25Function), term by term, with the same floating-point
 * operations in the same order, so that a score computed here is the one FTS5 reports, negated:
 *
 *   score(D) = Σ_i idf(q_i) · f(q_i, D) · (k1 + 1) / (f(q_i, D) + k1 · (1 − b + b · |D| / avgdl))
 *   idf(q)   = ln((N − n(q) + 0.5) / (n(q) + 0.5)), and 1e-6 when that is ≤ 0
 *
 * with k1 = 1.2, b = 0.75, the sum over the query's phrases in query order, f the term frequency,
 * |D| the document's token count, n(q) the number of rows matching q. N and avgdl (= total tokens
 * / N) are the FTS5 table's own totals: on a contentless table with contentless_delete=1 a delete
 * leaves both as they were, so they count every row ever inserted (see TextIndex.setTotals).
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
