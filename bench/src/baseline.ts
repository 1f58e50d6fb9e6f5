/**
 * The hand-written SQL baseline: what an application would build on SQLite without tidal. The same
 * rows, the indexes a competent user would add, and one straightforward query per question. The
 * vector side is a brute-force scan in JS because SQLite has no ANN index; the embeddings are read
 * from their BLOBs once into one matrix, which is the fast way to do it (a per-query BLOB scan is
 * available too, to show what the naive version costs).
 */

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { CorpusItem, CorpusSignal } from './corpus.js';

export interface BaselineHit {
  id: string;
  score: number;
}

export interface TrendingRow {
  id: string;
  category: string;
  creator: string;
  views: number;
}

/**
 * The FTS5 MATCH expression for free text: each distinct word double-quoted (so FTS5 syntax in user
 * text is inert; the split already dropped any quote) and joined with OR, which is also what tidal
 * sends to FTS5.
 */
export function ftsMatchExpression(text: string): string {
  const words = text
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((w) => w.length > 0);
  // At most 32 distinct words, as tidal does, so both sides run the very same FTS5 query.
  return [...new Set(words)]
    .slice(0, 32)
    .map((w) => `"${w}"`)
    .join(' OR ');
}

export class SqlBaseline {
  readonly dir: string;
  readonly file: string;
  readonly db: Database.Database;
  readonly dims: number;
  private ids: string[] = [];
  private matrix = new Float32Array(0);
  private invNorms = new Float32Array(0);
  private readonly stmts;

  constructor(dims: number) {
    this.dims = dims;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tidal-baseline-'));
    this.file = path.join(this.dir, 'baseline.db');
    this.db = new Database(this.file);
    // The same durability as tidal's default: WAL, fsync at checkpoints rather than every commit.
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = NORMAL');
    this.db.exec(`
      CREATE TABLE items(id TEXT PRIMARY KEY, category TEXT, creator TEXT, created_at REAL, text TEXT);
      CREATE INDEX items_category ON items(category);
      CREATE INDEX items_created_at ON items(created_at);
      CREATE VIRTUAL TABLE items_fts USING fts5(text, content='items', content_rowid='rowid');
      CREATE TABLE item_vectors(item_rowid INTEGER PRIMARY KEY, embedding BLOB NOT NULL);
      CREATE TABLE signals(item TEXT, kind TEXT, at REAL, weight REAL);
      CREATE INDEX signals_kind_at ON signals(kind, at);
      CREATE INDEX signals_item ON signals(item);
    `);
    this.stmts = {
      insertItem: this.db.prepare('INSERT INTO items(rowid, id, category, creator, created_at, text) VALUES (?, ?, ?, ?, ?, ?)'),
      insertFts: this.db.prepare('INSERT INTO items_fts(rowid, text) VALUES (?, ?)'),
      insertVector: this.db.prepare('INSERT INTO item_vectors(item_rowid, embedding) VALUES (?, ?)'),
      insertSignal: this.db.prepare('INSERT INTO signals(item, kind, at, weight) VALUES (?, ?, ?, ?)'),
      trending: this.db.prepare(`
        SELECT i.id AS id, i.category AS category, i.creator AS creator, t.n AS views
        FROM (SELECT item, COUNT(*) AS n FROM signals
              WHERE kind = 'view' AND at >= ?
              GROUP BY item ORDER BY n DESC, item LIMIT ?) t
        JOIN items i ON i.id = t.item
        ORDER BY t.n DESC, t.item`),
      newest: this.db.prepare('SELECT id, created_at AS score FROM items WHERE category = ? ORDER BY created_at DESC LIMIT ?'),
      text: this.db.prepare(`
        SELECT i.id AS id, f.score AS score
        FROM (SELECT rowid, bm25(items_fts) AS score FROM items_fts
              WHERE items_fts MATCH ? ORDER BY score LIMIT ?) f
        JOIN items i ON i.rowid = f.rowid
        ORDER BY f.score`),
      textFiltered: this.db.prepare(`
        SELECT i.id AS id, bm25(items_fts) AS score
        FROM items_fts JOIN items i ON i.rowid = items_fts.rowid
        WHERE items_fts MATCH ? AND i.category = ?
        ORDER BY score LIMIT ?`),
      vectors: this.db.prepare('SELECT v.embedding AS embedding, i.id AS id FROM item_vectors v JOIN items i ON i.rowid = v.item_rowid'),
    };
  }

  /** Inserts items (row, FTS row, embedding BLOB) in one transaction; `firstIndex` numbers the rowids. */
  insertItems(items: readonly CorpusItem[], firstIndex: number): void {
    const { insertItem, insertFts, insertVector } = this.stmts;
    this.db.transaction(() => {
      for (let k = 0; k < items.length; k++) {
        const it = items[k]!;
        const rowid = firstIndex + k + 1;
        insertItem.run(rowid, it.id, it.metadata.category, it.metadata.creator, it.createdAt, it.text);
        insertFts.run(rowid, it.text);
        insertVector.run(rowid, Buffer.from(it.embedding.buffer, it.embedding.byteOffset, it.embedding.byteLength));
      }
    })();
  }

  /** One transaction per call: the bench calls it once per 1000-row batch. */
  insertSignals(batch: readonly CorpusSignal[]): void {
    const insert = this.stmts.insertSignal;
    this.db.transaction(() => {
      for (const s of batch) insert.run(s.item, s.kind, s.at, s.weight);
    })();
  }

  /**
   * The same batches into a table without any index, timed per transaction and dropped afterwards:
   * what a bare append costs, the floor under any ingest path that lands in SQLite.
   */
  appendOnly(batches: Iterable<readonly CorpusSignal[]>): number[] {
    this.db.exec('CREATE TABLE signals_append(item TEXT, kind TEXT, at REAL, weight REAL)');
    const insert = this.db.prepare('INSERT INTO signals_append(item, kind, at, weight) VALUES (?, ?, ?, ?)');
    const tx = this.db.transaction((batch: readonly CorpusSignal[]) => {
      for (const s of batch) insert.run(s.item, s.kind, s.at, s.weight);
    });
    const times: number[] = [];
    for (const batch of batches) {
      const t = process.hrtime.bigint();
      tx(batch);
      times.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
    this.db.exec('DROP TABLE signals_append');
    return times;
  }

  /** Refreshes the planner's statistics, as anyone would after a bulk load. */
  analyze(): void {
    this.db.exec('ANALYZE');
  }

  /** Loads every embedding BLOB into one matrix for the in-memory brute-force scan. */
  loadVectors(): void {
    const rows = this.stmts.vectors.all() as { embedding: Buffer; id: string }[];
    const d = this.dims;
    this.ids = new Array<string>(rows.length);
    this.matrix = new Float32Array(rows.length * d);
    this.invNorms = new Float32Array(rows.length);
    for (let r = 0; r < rows.length; r++) {
      const row = rows[r]!;
      this.ids[r] = row.id;
      const v = blobToFloats(row.embedding, d);
      this.matrix.set(v, r * d);
      let s = 0;
      for (let k = 0; k < d; k++) s += v[k]! * v[k]!;
      this.invNorms[r] = s > 0 ? 1 / Math.sqrt(s) : 0;
    }
  }

  // -------------------------------------------------------------------------------------------
  // Queries
  // -------------------------------------------------------------------------------------------

  /** Items with the most `view` signals in the hour before `now`. */
  trending(now: number, limit = 20): TrendingRow[] {
    return this.stmts.trending.all(now - 3_600_000, limit) as TrendingRow[];
  }

  newest(category: string, limit = 20): BaselineHit[] {
    return this.stmts.newest.all(category, limit) as BaselineHit[];
  }

  /** Brute-force cosine over the in-memory matrix. */
  nearest(query: Float32Array, limit = 20): BaselineHit[] {
    return topKCosine(this.matrix, this.invNorms, this.ids, this.dims, query, limit);
  }

  /** Brute-force cosine reading every BLOB from SQLite on each call: the naive version. */
  nearestFromBlobs(query: Float32Array, limit = 20): BaselineHit[] {
    const d = this.dims;
    const qn = norm(query);
    const top = new TopK(limit);
    for (const row of this.stmts.vectors.iterate() as IterableIterator<{ embedding: Buffer; id: string }>) {
      const v = blobToFloats(row.embedding, d);
      let dot = 0;
      let vv = 0;
      for (let k = 0; k < d; k++) {
        dot += query[k]! * v[k]!;
        vv += v[k]! * v[k]!;
      }
      const cos = vv > 0 && qn > 0 ? dot / (Math.sqrt(vv) * qn) : 0;
      if (cos > top.threshold) top.push(cos, row.id);
    }
    return top.sorted();
  }

  /** FTS5 BM25 top `limit`; scores are FTS5's (lower is better). */
  text(match: string, limit = 10): BaselineHit[] {
    return this.stmts.text.all(match, limit) as BaselineHit[];
  }

  textFiltered(match: string, category: string, limit = 10): BaselineHit[] {
    return this.stmts.textFiltered.all(match, category, limit) as BaselineHit[];
  }

  /**
   * BM25 candidates and brute-force vector candidates fused with reciprocal rank fusion
   * (score = Σ 1 / (k + rank), k = 60, ranks from 1).
   */
  hybrid(match: string, query: Float32Array, limit = 10, textCandidates = 200, vectorCandidates = 500, k = 60): BaselineHit[] {
    const fused = new Map<string, number>();
    const add = (hits: BaselineHit[]) => {
      for (let r = 0; r < hits.length; r++) {
        const id = hits[r]!.id;
        fused.set(id, (fused.get(id) ?? 0) + 1 / (k + r + 1));
      }
    };
    add(this.text(match, textCandidates));
    add(this.nearest(query, vectorCandidates));
    return [...fused.entries()]
      .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
      .slice(0, limit)
      .map(([id, score]) => ({ id, score }));
  }

  close(): void {
    if (this.db.open) this.db.close();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Brute-force nearest neighbours
// ---------------------------------------------------------------------------------------------

/** A fixed-size min-heap of (score, id) keeping the `k` largest scores. */
export class TopK {
  private readonly scores: Float64Array;
  private readonly ids: string[];
  private size = 0;
  /** Scores at or below this cannot enter; lets the scan skip the heap for most rows. */
  threshold = -Infinity;

  constructor(private readonly k: number) {
    this.scores = new Float64Array(k);
    this.ids = new Array<string>(k);
  }

  push(score: number, id: string): void {
    const { scores, ids, k } = this;
    if (this.size < k) {
      let i = this.size++;
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (scores[parent]! <= score) break;
        scores[i] = scores[parent]!;
        ids[i] = ids[parent]!;
        i = parent;
      }
      scores[i] = score;
      ids[i] = id;
      if (this.size === k) this.threshold = scores[0]!;
      return;
    }
    if (score <= scores[0]!) return;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= k) break;
      const r = l + 1;
      const c = r < k && scores[r]! < scores[l]! ? r : l;
      if (scores[c]! >= score) break;
      scores[i] = scores[c]!;
      ids[i] = ids[c]!;
      i = c;
    }
    scores[i] = score;
    ids[i] = id;
    this.threshold = scores[0]!;
  }

  /** Best first. */
  sorted(): BaselineHit[] {
    const out: BaselineHit[] = [];
    for (let i = 0; i < this.size; i++) out.push({ id: this.ids[i]!, score: this.scores[i]! });
    return out.sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : 1));
  }
}

/** Exact top-`k` by cosine similarity over a row-major matrix. */
export function topKCosine(
  matrix: Float32Array,
  invNorms: Float32Array | null,
  ids: readonly string[] | ((row: number) => string),
  dims: number,
  query: Float32Array,
  k: number,
): BaselineHit[] {
  const rows = matrix.length / dims;
  const qn = norm(query);
  const qInv = qn > 0 ? 1 / qn : 0;
  const idOf = typeof ids === 'function' ? ids : (r: number) => ids[r]!;
  const top = new TopK(k);
  const tail = dims - (dims % 4);
  for (let r = 0, off = 0; r < rows; r++, off += dims) {
    // Four accumulators break the dependency chain of one running sum: ~2× faster in V8.
    let d0 = 0;
    let d1 = 0;
    let d2 = 0;
    let d3 = 0;
    let j = 0;
    for (; j < tail; j += 4) {
      d0 += query[j]! * matrix[off + j]!;
      d1 += query[j + 1]! * matrix[off + j + 1]!;
      d2 += query[j + 2]! * matrix[off + j + 2]!;
      d3 += query[j + 3]! * matrix[off + j + 3]!;
    }
    for (; j < dims; j++) d0 += query[j]! * matrix[off + j]!;
    const dot = d0 + d1 + d2 + d3;
    const cos = dot * qInv * (invNorms ? invNorms[r]! : 1);
    if (cos > top.threshold) top.push(cos, idOf(r));
  }
  return top.sorted();
}

function norm(v: Float32Array): number {
  let s = 0;
  for (let k = 0; k < v.length; k++) s += v[k]! * v[k]!;
  return Math.sqrt(s);
}

function blobToFloats(buf: Buffer, dims: number): Float32Array {
  // A Float32Array view needs 4-byte alignment, which a Buffer from SQLite need not have.
  if (buf.byteOffset % 4 === 0) return new Float32Array(buf.buffer, buf.byteOffset, dims);
  const copy = new Float32Array(dims);
  new Uint8Array(copy.buffer).set(buf.subarray(0, dims * 4));
  return copy;
}
