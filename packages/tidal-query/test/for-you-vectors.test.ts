/**
 * The int8 copy of the items' embeddings `for_you` scores its non-ANN candidates with: within
 * int8 rounding of the float cosine, and following replacements, deletions and new items by version;
 * the batch kernel equal to the one-row kernel bit for bit.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { cosine } from '../src/ann.js';
import { Catalog } from '../src/catalog.js';
import type { QueryContext } from '../src/context.js';
import { ItemsWriter } from '../src/items-table.js';
import { cosineInt8, cosinesInt8, itemVectors } from '../src/profiles/for-you-vectors.js';
import type { QuerySchema } from '../src/types.js';
import { openStorage } from 'tidal-wal/storage';
import { mulberry32 } from './helpers/random.js';

const DIMS = 64;
const SCHEMA: QuerySchema = { kinds: [], metadata: {}, embeddingDims: DIMS };

describe('for_you item vectors', () => {
  it('give the cosine within int8 rounding and follow item writes', () => {
    const rand = mulberry32(11);
    const vec = (): Float32Array => Float32Array.from({ length: DIMS }, () => rand() * 2 - 1);
    const db = new Database(':memory:');
    openStorage(db, ':memory:');
    const writer = new ItemsWriter(db);
    let version = 0;
    const vectors = new Map<number, Float32Array>();
    const write = (o: number): void => {
      const v = vec();
      vectors.set(o, v);
      writer.upsert({ ordinal: o, id: `i${o}`, text: null, metadata: {}, createdAt: 0, embedding: v }, ++version, false);
    };
    for (let o = 0; o < 40; o++) write(o);
    writer.upsert({ ordinal: 40, id: 'plain', text: null, metadata: {}, createdAt: 0, embedding: null }, ++version, false);
    const catalog = new Catalog(db, SCHEMA);
    catalog.refresh();
    const ctx = { schema: SCHEMA, catalog, db } as unknown as QueryContext;
    const p = vec();
    let pn = 0;
    for (const x of p) pn += x * x;
    const check = (): void => {
      const v = itemVectors(ctx);
      for (let o = 0; o < 45; o++) {
        const want = vectors.has(o) ? cosine(p, vectors.get(o)!) : 0;
        expect(cosineInt8(v, DIMS, p, 1 / Math.sqrt(pn), o), `item ${o}`).toBeCloseTo(want, 2);
      }
    };
    check();
    // A replaced vector, a deleted item, a new one beyond the copy's length: read by version.
    write(3);
    writer.delete(5, ++version);
    vectors.delete(5);
    write(44);
    catalog.refresh();
    check();
  });

  it('batch: cosinesInt8 equals cosineInt8 bit for bit, at any dimension count', () => {
    for (const dims of [DIMS, 128, 30]) {
      const rand = mulberry32(dims);
      const schema: QuerySchema = { kinds: [], metadata: {}, embeddingDims: dims };
      const db = new Database(':memory:');
      openStorage(db, ':memory:');
      const writer = new ItemsWriter(db);
      let version = 0;
      for (let o = 0; o < 200; o++) {
        // Some without an embedding, some of tiny or huge scale.
        const scale = o % 7 === 0 ? 1e-6 : o % 5 === 0 ? 1e6 : 1;
        const embedding = o % 11 === 3 ? null : Float32Array.from({ length: dims }, () => (rand() * 2 - 1) * scale);
        writer.upsert({ ordinal: o, id: `i${o}`, text: null, metadata: {}, createdAt: 0, embedding }, ++version, false);
      }
      const catalog = new Catalog(db, schema);
      catalog.refresh();
      const v = itemVectors({ schema, catalog, db } as unknown as QueryContext);
      const ordinals = Array.from({ length: 400 }, () => Math.floor(rand() * 260));
      for (let trial = 0; trial < 5; trial++) {
        // Components of every magnitude in the later trials, so the sums round and their order counts.
        const spread = trial < 2 ? 0 : 20 * trial;
        const p = Float32Array.from({ length: dims }, () => (rand() * 2 - 1) * 2 ** Math.round((rand() - 0.5) * spread));
        const pScale = 1 / Math.sqrt(p.reduce((s, x) => s + x * x, 0));
        const out = new Float64Array(ordinals.length).fill(Number.NaN);
        cosinesInt8(v, dims, p, pScale, ordinals, 3, ordinals.length - 2, out);
        let nonZero = 0;
        ordinals.forEach((o, i) => {
          if (i < 3 || i >= ordinals.length - 2) return expect(out[i]).toBeNaN();
          const want = cosineInt8(v, dims, p, pScale, o);
          if (want !== 0) nonZero++;
          expect(Object.is(out[i], want), `dims ${dims}, item ${o}: ${out[i]} vs ${want}`).toBe(true);
        });
        expect(nonZero).toBeGreaterThan(ordinals.length / 2);
      }
    }
  });
});
