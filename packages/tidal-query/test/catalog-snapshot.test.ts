/**
 * The catalog snapshot: a catalog loaded from one and refreshed holds exactly what a catalog that
 * read every row holds (ids, presence, creation times, metadata values, every term's postings,
 * the documents' term lists and lengths, BM25's totals, the int8 vectors), whatever was written,
 * deleted or replaced after it was saved; and a damaged, truncated, foreign or too new snapshot is
 * not used.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { openStorage } from 'tidal-wal/storage';
import { Catalog } from '../src/catalog.js';
import { CATALOG_SNAPSHOT, catalogSnapshotVersion, readCatalogSnapshot, writeCatalogSnapshot } from '../src/catalog-snapshot.js';
import { readCatalogImage, writeCatalogImage } from '../src/shared/catalog-image.js';
import { loadCatalog } from '../src/catalog-load.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import { feedVector, keptItemVectors, type Int8Vectors } from '../src/profiles/for-you-vectors.js';
import type { QuerySchema } from '../src/types.js';

const DIMS = 4;
const SCHEMA: QuerySchema = { kinds: [], metadata: { cat: 'string', n: 'number' }, embeddingDims: DIMS };
const WORDS = ['jazz', 'piano', 'café', 'tokyo', '東京', 'straße', 'blue', 'note', 'x1', 'über'];
const CATS = ['a', 'b', 'c', '\ud800lone'];

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tidal-catalog-snapshot-'));
  dirs.push(d);
  return d;
}

type Op =
  | { kind: 'upsert'; ordinal: number; words: number[] | null; cat: number | null; n: number | null; created: number; vec: number[] | null }
  | { kind: 'delete'; ordinal: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('upsert' as const),
      ordinal: fc.nat(40),
      words: fc.option(fc.array(fc.nat(WORDS.length - 1), { maxLength: 6 }), { freq: 4 }),
      cat: fc.option(fc.nat(CATS.length - 1)),
      n: fc.option(fc.integer({ min: -5, max: 5 })),
      created: fc.nat(1000),
      vec: fc.option(fc.array(fc.integer({ min: -9, max: 9 }), { minLength: DIMS, maxLength: DIMS }), { freq: 3 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('delete' as const), ordinal: fc.nat(40) }) },
);

/** An items table written through the items writer, one version per operation. */
class Items {
  readonly db = new Database(':memory:');
  readonly writer: ItemsWriter;
  version = 0;

  constructor() {
    openStorage(this.db, ':memory:');
    this.writer = new ItemsWriter(this.db);
  }

  apply(op: Op): void {
    if (op.kind === 'delete') {
      this.writer.delete(op.ordinal, ++this.version);
      return;
    }
    const metadata: Record<string, unknown> = {};
    if (op.cat !== null) metadata.cat = CATS[op.cat];
    if (op.n !== null) metadata.n = op.n;
    this.writer.upsert(
      {
        ordinal: op.ordinal,
        id: `item-${op.ordinal}-é`,
        text: op.words === null ? null : op.words.map((w) => WORDS[w]).join(' '),
        metadata,
        createdAt: op.created,
        embedding: op.vec === null ? null : Float32Array.from(op.vec),
      },
      ++this.version,
      false,
    );
  }
}

/** A worker's catalog with the int8 vectors its refreshes keep. */
function worker(db: Database.Database, schema = SCHEMA): { catalog: Catalog; vectors: Int8Vectors; refresh: () => number } {
  const catalog = new Catalog(db, schema);
  const vectors = keptItemVectors({ schema, catalog, db } as unknown as QueryContext);
  const refresh = (): number => {
    const n = catalog.refresh((row) => feedVector(vectors, schema.embeddingDims, row.ordinal, row.present, row.embedding));
    vectors.version = catalog.version;
    return n;
  };
  return { catalog, vectors, refresh };
}

/** Everything a query can read from a catalog, as plain values (dictionary codes as the strings they stand for). */
function contents(catalog: Catalog, vectors: Int8Vectors): unknown {
  const n = catalog.ids.length;
  const text = catalog.text;
  const terms = text.termsById();
  const postings: Record<string, [number[], number[]]> = {};
  for (const term of terms) {
    const p = text.postings(term);
    if (p) postings[term] = [[...p.docs.subarray(0, p.length)], [...p.tfs.subarray(0, p.length)]];
  }
  const ordinals = Array.from({ length: n }, (_, o) => o);
  return {
    version: catalog.version,
    ids: ordinals.map((o) => catalog.ids[o] ?? null),
    present: [...catalog.present.subarray(0, n)],
    presentCount: catalog.presentCount,
    createdAt: [...catalog.createdAt.subarray(0, n)],
    byCreated: [...catalog.byCreatedDesc()],
    cat: ordinals.map((o) => catalog.fieldValue('cat', o) ?? null),
    n: ordinals.map((o) => catalog.fieldValue('n', o) ?? null),
    postings,
    docTerms: ordinals.map((o) => [...text.docTerms(o)].map((id) => terms[id])),
    lengths: ordinals.map((o) => text.lengths[o] ?? 0),
    documents: text.documents,
    tokens: text.tokens,
    stats: text.stats().postings,
    vectors: {
      rows: [...vectors.rows.subarray(0, vectors.extent * DIMS)],
      norms: [...vectors.inverseNorms.subarray(0, vectors.extent)],
      live: vectors.live,
      extent: vectors.extent,
      version: vectors.version,
    },
  };
}

describe('the catalog snapshot', () => {
  it('loaded and refreshed equals a catalog that read every row, whatever changed after it was saved', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 60 }), fc.array(opArb, { maxLength: 40 }), (before, after) => {
        const items = new Items();
        const dir = tempDir();
        for (const op of before) items.apply(op);
        const saver = worker(items.db);
        saver.refresh();
        // A saver that has also refreshed in steps (its term lists hold replaced documents' entries).
        if (before.length > 0) {
          items.apply(before[0]!);
          saver.refresh();
        }
        writeCatalogSnapshot(dir, SCHEMA, saver.catalog, saver.vectors);
        const saved = saver.catalog.version;
        for (const op of after) items.apply(op);

        const loaded = worker(items.db);
        const load = loadCatalog(dir, SCHEMA, loaded.catalog, loaded.vectors, items.version);
        expect(load).toEqual({ version: saved, stale: false });
        const read = loaded.refresh();
        // Only the rows written after the snapshot come from the table.
        expect(read).toBe(items.db.prepare('SELECT COUNT(*) FROM items WHERE version > ?').pluck().get(saved));

        // Loaded into a catalog image (shared memory) for the other threads: the same contents.
        const intoImage = worker(items.db);
        const { image, ...imageLoad } = loadCatalog(dir, SCHEMA, intoImage.catalog, intoImage.vectors, items.version, true);
        expect(imageLoad).toEqual({ version: saved, stale: false });
        expect(image).toBeInstanceOf(SharedArrayBuffer);
        expect(intoImage.catalog.shared).toBe(true);
        intoImage.refresh();
        const full = worker(items.db);
        full.refresh();
        expect(contents(loaded.catalog, loaded.vectors)).toEqual(contents(full.catalog, full.vectors));
        expect(contents(intoImage.catalog, intoImage.vectors)).toEqual(contents(full.catalog, full.vectors));
        // And all keep following writes the same way, the image as it was read.
        const pristine = Buffer.from(new Uint8Array(image!).slice());
        const more: Op = { kind: 'upsert', ordinal: 3, words: [0, 0, 1], cat: 1, n: 2, created: 5, vec: [1, 2, 3, 4] };
        items.apply(more);
        items.apply({ kind: 'delete', ordinal: 7 });
        loaded.refresh();
        intoImage.refresh();
        full.refresh();
        expect(contents(loaded.catalog, loaded.vectors)).toEqual(contents(full.catalog, full.vectors));
        expect(contents(intoImage.catalog, intoImage.vectors)).toEqual(contents(full.catalog, full.vectors));
        expect(Buffer.from(new Uint8Array(image!)).equals(pristine)).toBe(true);
        // Another thread reads the image as the catalog it holds: without the vectors' sections.
        const reader = new Catalog(items.db, SCHEMA);
        reader.importState(readCatalogImage(image!));
        expect(reader.version).toBe(saved);
        rmSync(dir, { recursive: true, force: true });
      }),
      { numRuns: 60 },
    );
  });

  it('is written to a temporary name and renamed: a leftover temporary file is swept, the header gives the version', () => {
    const items = new Items();
    for (let o = 0; o < 5; o++) items.apply({ kind: 'upsert', ordinal: o, words: [o], cat: 0, n: o, created: o, vec: [1, 0, 0, o] });
    const dir = tempDir();
    writeFileSync(join(dir, `${CATALOG_SNAPSHOT}.0badc0ffee00.tmp`), 'left by a crash');
    const w = worker(items.db);
    w.refresh();
    writeCatalogSnapshot(dir, SCHEMA, w.catalog, w.vectors);
    expect(readdirSync(dir)).toEqual([CATALOG_SNAPSHOT]);
    expect(catalogSnapshotVersion(dir)).toBe(5);
  });

  describe('is not used when', () => {
    /** A directory with a sound snapshot of 20 items at version 20. */
    function saved(): { dir: string; items: Items; bytes: Buffer } {
      const items = new Items();
      for (let o = 0; o < 20; o++)
        items.apply({ kind: 'upsert', ordinal: o, words: [o % 7, 1], cat: o % 3, n: o, created: o, vec: [o, 1, 2, 3] });
      const dir = tempDir();
      const w = worker(items.db);
      w.refresh();
      writeCatalogSnapshot(dir, SCHEMA, w.catalog, w.vectors);
      return { dir, items, bytes: readFileSync(join(dir, CATALOG_SNAPSHOT)) };
    }

    it.each(['crc32', 'sha256'] as const)('a byte of it is damaged, wherever it is (%s)', (checksum) => {
      const { dir, items } = saved();
      const w0 = worker(items.db);
      w0.refresh();
      writeCatalogSnapshot(dir, SCHEMA, w0.catalog, w0.vectors, checksum);
      const bytes = readFileSync(join(dir, CATALOG_SNAPSHOT));
      expect(readCatalogSnapshot(dir, SCHEMA, items.version).kind).toBe('ok');
      for (const at of [13, 16, 20, 30, 60, Math.floor(bytes.length / 2), bytes.length - 1]) {
        const damaged = Buffer.from(bytes);
        damaged[at] = damaged[at]! ^ 0x10;
        writeFileSync(join(dir, CATALOG_SNAPSHOT), damaged);
        const found = readCatalogSnapshot(dir, SCHEMA, items.version);
        expect(found.kind, `byte ${at}`).toBe('unusable');
        const w = worker(items.db);
        const load = loadCatalog(dir, SCHEMA, w.catalog, w.vectors, items.version);
        expect(load.version).toBe(0);
        expect(load.stale).toBe(true);
        expect(load.warning?.code).toBe('TIDAL_CATALOG_SNAPSHOT_UNUSABLE');
        expect(w.catalog.version).toBe(0);
      }
    });

    it('it is truncated', () => {
      const { dir, items, bytes } = saved();
      for (const keep of [0, 10, 47, 100, bytes.length - 8]) {
        writeFileSync(join(dir, CATALOG_SNAPSHOT), bytes.subarray(0, keep));
        expect(readCatalogSnapshot(dir, SCHEMA, items.version).kind, `${keep} bytes`).toBe('unusable');
      }
    });

    it('it is of another schema (other metadata fields or types, other dimensions): ignored without a warning', () => {
      const { dir, items } = saved();
      for (const schema of [
        { ...SCHEMA, metadata: { cat: 'string', n: 'number', extra: 'string' } },
        { ...SCHEMA, metadata: { cat: 'number', n: 'number' } },
        { ...SCHEMA, embeddingDims: 8 },
      ] as QuerySchema[]) {
        const w = worker(items.db, schema);
        const load = loadCatalog(dir, schema, w.catalog, w.vectors, items.version);
        expect(load).toEqual({ version: 0, stale: true });
      }
    });

    it('it reflects a version the items table does not reach', () => {
      const { dir, items } = saved();
      const found = readCatalogSnapshot(dir, SCHEMA, items.version - 1);
      expect(found.kind).toBe('unusable');
      const w = worker(items.db);
      expect(loadCatalog(dir, SCHEMA, w.catalog, w.vectors, items.version - 1).warning?.message).toMatch(/version 20 .* ends at 19/);
      expect(readCatalogSnapshot(dir, SCHEMA, items.version).kind).toBe('ok');
    });
  });
});

/** {@link contents} without the int8 vectors (a catalog image carries none). */
function catalogContents(catalog: Catalog, vectors: Int8Vectors): unknown {
  const { vectors: _, ...rest } = contents(catalog, vectors) as Record<string, unknown>;
  return rest;
}

describe('the catalog image', () => {
  it('imported, rebased onto and refreshed equals a catalog that read every row, and is never written', () => {
    fc.assert(
      fc.property(
        fc.array(opArb, { maxLength: 60 }),
        fc.array(opArb, { maxLength: 20 }),
        fc.array(opArb, { maxLength: 40 }),
        (before, between, after) => {
          const items = new Items();
          for (const op of before) items.apply(op);
          // One catalog ahead of the image (it reads `between` too), one that never read a row.
          const writer = worker(items.db);
          writer.refresh();
          const image = writeCatalogImage(SCHEMA, writer.catalog);
          const pristine = new Uint8Array(image).slice();
          writer.catalog.rebase(readCatalogImage(image));
          expect(writer.catalog.shared).toBe(before.length > 0 || writer.catalog.present.length > 0);
          for (const op of between) items.apply(op);
          const ahead = worker(items.db);
          ahead.refresh();
          ahead.catalog.rebase(readCatalogImage(image));
          const fresh = worker(items.db);
          fresh.catalog.importState(readCatalogImage(image));
          for (const op of after) items.apply(op);
          items.apply({ kind: 'upsert', ordinal: 3, words: [0, 0, 1], cat: 1, n: 2, created: 5, vec: [1, 2, 3, 4] });
          items.apply({ kind: 'delete', ordinal: 7 });
          for (const w of [writer, ahead, fresh]) w.refresh();
          const full = worker(items.db);
          full.refresh();
          const expected = catalogContents(full.catalog, full.vectors);
          for (const w of [writer, ahead, fresh]) expect(catalogContents(w.catalog, w.vectors)).toEqual(expected);
          // Every change went to the thread's own copies: the image is as it was published.
          expect(Buffer.from(new Uint8Array(image)).equals(Buffer.from(pristine))).toBe(true);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('counts its arrays apart from a thread own ones, and a rebase that does not fit leaves the catalog as it was', () => {
    const items = new Items();
    for (let o = 0; o < 30; o++)
      items.apply({ kind: 'upsert', ordinal: o, words: [o % 7, 1], cat: o % 3, n: o, created: o, vec: [o, 1, 2, 3] });
    const w = worker(items.db);
    w.refresh();
    const own = { catalog: w.catalog.arrayBytes, text: w.catalog.text.stats().arrayBytes };
    expect(own.catalog).toBeGreaterThan(0);
    const image = writeCatalogImage(SCHEMA, w.catalog);
    w.catalog.rebase(readCatalogImage(image));
    // Lent arrays are the image's (counted once per process), not the thread's; block summaries stay its own.
    expect(w.catalog.arrayBytes).toBe(0);
    expect(w.catalog.text.stats().arrayBytes).toBeLessThan(own.text / 4);
    items.apply({ kind: 'upsert', ordinal: 2, words: [3], cat: 1, n: 1, created: 99, vec: [1, 1, 1, 1] });
    w.refresh();
    expect(w.catalog.shared).toBe(false);
    expect(w.catalog.arrayBytes).toBeGreaterThan(0);

    const other = new Catalog(items.db, { ...SCHEMA, metadata: { other: 'number' } });
    const before = other.version;
    expect(() => other.rebase(readCatalogImage(image))).toThrow(/column other/);
    expect(other.version).toBe(before);
    expect(other.refresh()).toBe(30);
  });
});
