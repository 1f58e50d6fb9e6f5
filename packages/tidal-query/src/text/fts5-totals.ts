import type Database from 'better-sqlite3';

/** FTS5's row and token totals, as its bm25() reads them (xRowCount, xColumnTotalSize). */
export interface Fts5Totals {
  rows: number;
  tokens: number;
}

/**
 * Reads an FTS5 table's "averages" record (rowid 1 of its `_data` table: a varint row count, then
 * a varint token total per column) so that the text index scores with FTS5's own N and avgdl.
 * Returns null for a table that has none yet. `table` must be a trusted identifier.
 */
export function fts5TotalsReader(db: Database.Database, table: string): () => Fts5Totals | null {
  const stmt = db.prepare(`SELECT block FROM "${table}_data" WHERE id = 1`).pluck();
  return () => {
    const block = stmt.get() as Buffer | undefined;
    if (!block || block.length === 0) return null;
    const rows = readVarint(block, 0);
    const tokens = readVarint(block, rows.next);
    return { rows: rows.value, tokens: tokens.value };
  };
}

/** SQLite's varint: big-endian 7-bit groups with a continuation bit; a 9th byte has 8 bits. */
function readVarint(buf: Uint8Array, at: number): { value: number; next: number } {
  let value = 0;
  for (let i = 0; i < 8; i++) {
    const byte = buf[at + i] ?? 0;
    value = value * 128 + (byte & 0x7f);
    if ((byte & 0x80) === 0) return { value, next: at + i + 1 };
  }
  return { value: value * 256 + (buf[at + 8] ?? 0), next: at + 9 };
}
