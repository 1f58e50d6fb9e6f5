/**
 * Packed rows (src/packed-rows.ts): what the database's thread rebuilds from a packed answer must
 * be what a structured clone of the rows gives it, key order, −0, NaN, undefined values and a
 * `__proto__` key included, whatever the rows hold; the packed form itself crosses as a clone.
 */
import { serialize, deserialize } from 'node:v8';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { packAnswer, packRows, unpackAnswer, unpackRows, type PackedRows } from '../src/packed-rows.js';

/** An object with these own keys in this order (`__proto__` as an own property, as JSON.parse makes it). */
function objectOf(entries: readonly (readonly [string, unknown])[]): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  for (const [k, v] of entries) Object.defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
  return o;
}

const key = fc.oneof(
  fc.constantFrom('id', 'score', 'signals', '1h', '__proto__', 'constructor', '0', '7', ''),
  fc.string({ maxLength: 6 }),
);
const leaf = fc.oneof(
  fc.double(),
  fc.constantFrom(-0, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53 + 2),
  fc.string({ maxLength: 8 }),
  fc.boolean(),
  fc.constant(null),
  fc.constant(undefined),
  fc.array(fc.oneof(fc.integer(), fc.string({ maxLength: 3 })), { maxLength: 3 }),
  fc.float32Array({ maxLength: 3 }),
  fc.date({ noInvalidDate: true }),
);
const { row } = fc.letrec((tie) => ({
  row: fc
    .uniqueArray(fc.tuple(key, fc.oneof({ depthSize: 'small' }, leaf, tie('row'))), { selector: (e) => e[0], maxLength: 6 })
    .map(objectOf),
}));
/** Rows with the same keys in the same order, each key's value of any kind (one shape or several). */
const sameKeys = fc
  .uniqueArray(key, { minLength: 1, maxLength: 4 })
  .chain((keys) =>
    fc
      .array(fc.array(fc.oneof(leaf, row), { minLength: keys.length, maxLength: keys.length }), { minLength: 2, maxLength: 6 })
      .map((values) => values.map((v) => objectOf(keys.map((k, i) => [k, v[i]])))),
  );
/** Rows as an answer has them: many of one shape, some of others. */
const rows = fc.oneof(
  fc.array(row, { maxLength: 8 }),
  fc.tuple(row, fc.integer({ min: 1, max: 30 })).map(([r, n]) => Array.from({ length: n }, () => structuredClone(r))),
  sameKeys,
);

/** Whether `got` is what a clone of `want` is: same own keys in order, values by Object.is, plain prototypes. */
function expectSame(got: unknown, want: unknown, path: string): void {
  if (typeof want !== 'object' || want === null) {
    expect(Object.is(got, want), `${path}: ${String(got)} is not ${String(want)}`).toBe(true);
    return;
  }
  if (Array.isArray(want) || ArrayBuffer.isView(want) || want instanceof Date) {
    expect(got, path).toStrictEqual(want);
    return;
  }
  expect(typeof got === 'object' && got !== null, path).toBe(true);
  expect(Object.getPrototypeOf(got), path).toBe(Object.getPrototypeOf(want));
  expect(Object.keys(got as object), path).toEqual(Object.keys(want));
  for (const k of Object.keys(want)) {
    expect(Object.prototype.hasOwnProperty.call(got, k), `${path}.${k} is own`).toBe(true);
    expectSame((got as Record<string, unknown>)[k], (want as Record<string, unknown>)[k], `${path}.${k}`);
  }
}

/** The packed form as it reaches the other thread: through a structured clone. */
function crossed(p: PackedRows): PackedRows {
  return deserialize(serialize(p)) as PackedRows;
}

describe('packed rows', () => {
  it('rebuilds exactly what a structured clone of the rows gives (property)', () => {
    fc.assert(
      fc.property(rows, (rs) => {
        const p = packRows(rs);
        expect(p).not.toBeNull();
        const want = structuredClone(rs);
        // Built by generated code, and as where code generation is refused.
        for (const compile of [true, false]) {
          const got = unpackRows(crossed(p!), compile);
          expect(got.length).toBe(want.length);
          for (let i = 0; i < want.length; i++) expectSame(got[i], want[i], `row ${i} (${compile ? 'compiled' : 'interpreted'})`);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('keeps one shape for rows that share one, and one number column', () => {
    const item = (i: number) => ({
      id: `item-${i}`,
      score: i / 10,
      rank: i + 1,
      signals: { view: { score: 0.5, count: 2 } },
      createdAt: 1000 + i,
    });
    const p = packRows(Array.from({ length: 20 }, (_, i) => item(i)))!;
    expect(p.shapes.length).toBe(1);
    expect(p.nums.length).toBe(20 * 5);
    expect(p.strs).toEqual(Array.from({ length: 20 }, (_, i) => `item-${i}`));
    expect(p.strs.length).toBe(20);
    expect(p.others.length).toBe(0);
    // A row with a key more (a search hit with `bm25`) adds a shape; the rows keep their own.
    const mixed = [item(0), { ...item(1), similarity: 0.3 }, item(2)];
    const q = packRows(mixed)!;
    expect(q.shapes.length).toBe(2);
    expect(Array.from(q.rowShapes)).toEqual([0, 1, 0]);
    expect(unpackRows(crossed(q))).toStrictEqual(mixed);
  });

  it('leaves rows that are not plain objects as they are', () => {
    expect(packRows([{ a: 1 }, [1, 2]])).toBeNull();
    expect(packRows([new Date(0)])).toBeNull();
    expect(packRows([null])).toBeNull();
    class Row {
      a = 1;
    }
    expect(packRows([new Row()])).toBeNull();
  });

  it('packs a retrieve answer and a search answer, and unpacks each in place', () => {
    const items = [{ id: 'a', score: 1, rank: 1, signals: {}, createdAt: 5 }];
    const answer = { serviceMs: 0.1, items, warnings: ['w'], explain: { candidates: 1 }, ordinals: Int32Array.of(3) };
    const packed = packAnswer(answer);
    expect(packed.items).toEqual([]);
    expect(answer.items).toBe(items);
    const back = unpackAnswer(deserialize(serialize(packed)) as typeof answer);
    expect(back).toStrictEqual(answer);
    expect('itemsPacked' in back).toBe(false);
    const hits = [{ id: 'b', score: 2, rank: 1, bm25: -1.5, signals: { view: { score: 0, count: 0 } } }];
    const search = { serviceMs: 0.1, hits, warnings: [], explain: {}, mode: 'text' as const };
    const s = unpackAnswer(deserialize(serialize(packAnswer(search))) as typeof search);
    expect(s).toStrictEqual(search);
    // Nothing to pack: the same object.
    const empty = { serviceMs: 0, items: [], warnings: [], explain: {} };
    expect(packAnswer(empty)).toBe(empty);
    const json = { serviceMs: 0, items: [], itemsJson: '[]', warnings: [], explain: {} };
    expect(packAnswer(json)).toBe(json);
  });

  it('rebuilds rows of more shapes than it keeps compiled builders for (interpreted past the bound)', () => {
    // The builders are kept per thread: this fills their bound (the property above may have too).
    const rows = Array.from({ length: 1100 }, (_, i) => ({ id: `item-${i}`, [`kind${i}`]: { score: i, count: -0 } }));
    const p = packRows(rows)!;
    expect(p.shapes.length).toBe(1100);
    const got = unpackRows(crossed(p));
    for (let i = 0; i < rows.length; i++) expectSame(got[i], rows[i], `row ${i}`);
    const twice = unpackRows(crossed(p));
    expect(twice).toStrictEqual(got);
  });
});
