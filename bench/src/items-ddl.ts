/** tidal's items tables (packages/tidal-core/src/storage.ts), the two the catalog benchmarks need. */
export const ITEMS_DDL = `
  CREATE TABLE items (
    ordinal INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, present INTEGER NOT NULL DEFAULT 0,
    text TEXT, metadata TEXT, created_at REAL, embedding BLOB, version INTEGER NOT NULL DEFAULT 0
  );
  CREATE INDEX items_by_version ON items(version);
  CREATE VIRTUAL TABLE items_fts USING fts5(text, content='', contentless_delete=1);
`;
