/**
 * The catalog's sections (catalog-snapshot.ts's file and shared/catalog-image.ts's image both hold
 * them): a JSON header naming each section, then the sections, each a flat typed array (or a string
 * table: one blob and the offsets of its strings) at an 8-byte boundary. {@link encodeCatalog} lays
 * a catalog out as sections, {@link decode} makes typed-array views of them: no per-row parsing.
 */
import type { Catalog, CatalogState, Column } from './catalog.js';
import type { Int8Vectors } from './profiles/for-you-vectors.js';
import type { FieldType, QuerySchema } from './types.js';

/** The first 8 bytes of a snapshot file or an image. */
export const MAGIC = 'TIDALCAT';
export const FORMAT = 1;
/** Magic (8), format (4), header bytes (4), checksum kind (4), 0 (4), checksum of the rest (32: a CRC-32 in its first 4). */
export const PREFIX = 56;

export type Encoding = 'utf8' | 'utf16le';

/** The JSON header of a snapshot or an image: what the sections after it are. */
export interface Header {
  version: number;
  /** The schema's metadata fields with their types, in schema order. */
  fields: [string, FieldType][];
  dims: number;
  /** `ids.length`: one past the highest ordinal the catalog has seen. */
  ordinals: number;
  /** The catalog's arrays' length. */
  capacity: number;
  presentCount: number;
  text: { documents: number; tokens: number; postings: number; terms: number };
  /** The int8 vectors' state (null for a schema without embeddings). */
  vectors: { rows: number; live: number; extent: number } | null;
  /** Each section: name, offset from the end of the header, bytes. */
  sections: [string, number, number][];
  /** How each string table's blob is encoded (UTF-8, or UTF-16 for strings that UTF-8 cannot carry exactly). */
  encodings: Record<string, Encoding>;
}

export interface LoadedVectors {
  rows: Int8Array;
  inverseNorms: Float32Array;
  live: number;
  extent: number;
}

/**
 * A catalog's sections and their header: what the snapshot file and the shared image
 * (shared/catalog-image.ts) both hold after their own prefix. `vectors`: the int8 rows to carry too
 * (null: none).
 */
export function encodeCatalog(
  schema: QuerySchema,
  catalog: Catalog,
  vectors: Int8Vectors | null,
): { header: Header; pieces: [string, ArrayBufferView[]][] } {
  const state = catalog.exportState();
  const dims = schema.embeddingDims;
  const pieces: [string, ArrayBufferView[]][] = [];
  const encodings: Record<string, Encoding> = {};
  const strings = (name: string, list: readonly (string | undefined)[]): void => {
    const t = encodeStrings(list);
    encodings[name] = t.encoding;
    pieces.push([`${name}.offsets`, [t.offsets]], [`${name}.blob`, [t.blob]]);
  };
  strings('ids', state.ids);
  const defined = new Uint8Array(state.ids.length);
  for (let o = 0; o < state.ids.length; o++) defined[o] = state.ids[o] === undefined ? 0 : 1;
  pieces.push(['ids.defined', [defined]], ['present', [state.present]], ['createdAt', [state.createdAt]], ['byCreated', [state.byCreated]]);
  for (const [field] of schemaFields(schema)) {
    const col = state.columns.get(field)!;
    if (col.type === 'string') {
      pieces.push([`column.${field}.codes`, [col.codes]]);
      strings(`column.${field}.dict`, col.values);
    } else {
      pieces.push([`column.${field}.values`, [col.values]]);
    }
  }
  const t = state.text;
  strings('text.terms', t.terms);
  pieces.push(
    ['text.postingLengths', [t.postingLengths]],
    ['text.docs', [t.docs]],
    ['text.tfs', [t.tfs]],
    ['text.docStart', [t.docStart]],
    ['text.docCount', [t.docCount]],
    ['text.pool', [t.pool]],
    ['text.lengths', [t.lengths]],
  );
  if (vectors) {
    const rows = vectors.inverseNorms.length;
    pieces.push(['vectors.rows', [vectors.rows.subarray(0, rows * dims)]], ['vectors.norms', [vectors.inverseNorms]]);
  }
  const sections: [string, number, number][] = [];
  let at = 0;
  for (const [name, views] of pieces) {
    const bytes = views.reduce((n, v) => n + v.byteLength, 0);
    sections.push([name, at, bytes]);
    at = align(at + bytes);
  }
  const header: Header = {
    version: state.version,
    fields: schemaFields(schema),
    dims,
    ordinals: state.ids.length,
    capacity: state.present.length,
    presentCount: state.presentCount,
    text: { documents: t.documents, tokens: t.tokens, postings: t.postings, terms: t.terms.length },
    vectors: vectors ? { rows: vectors.inverseNorms.length, live: vectors.live, extent: vectors.extent } : null,
    sections,
    encodings,
  };
  return { header, pieces };
}

export function decode(
  h: Header,
  { body, base, end }: { body: ArrayBufferLike; base: number; end: number },
): { state: CatalogState; vectors: LoadedVectors | null };
export function decode(
  h: Header,
  where: { body: ArrayBufferLike; base: number; end: number },
  part: 'vectors',
): { state: null; vectors: LoadedVectors | null };
export function decode(
  h: Header,
  { body, base, end }: { body: ArrayBufferLike; base: number; end: number },
  part: 'all' | 'vectors' = 'all',
): { state: CatalogState | null; vectors: LoadedVectors | null } {
  const byName = new Map(h.sections.map(([name, offset, bytes]) => [name, { offset: base + offset, bytes }]));
  const section = (name: string): { offset: number; bytes: number } => {
    const s = byName.get(name);
    if (!s || s.offset % 8 !== 0 || s.bytes < 0 || s.offset + s.bytes > end) throw new Error(`section ${name} is missing or out of bounds`);
    return s;
  };
  const view = <T>(name: string, make: (buffer: ArrayBuffer, offset: number, length: number) => T, width: number, length: number): T => {
    const s = section(name);
    if (s.bytes !== length * width) throw new Error(`section ${name} has ${s.bytes} bytes, not ${length * width}`);
    // An image's body is shared memory: the views are typed as over an ArrayBuffer, as the file's are.
    return make(body as ArrayBuffer, s.offset, length);
  };
  const i32 = (name: string, length: number): Int32Array<ArrayBuffer> => view(name, (b, o, n) => new Int32Array(b, o, n), 4, length);
  const f64 = (name: string, length: number): Float64Array => view(name, (b, o, n) => new Float64Array(b, o, n), 8, length);
  const u8 = (name: string, length: number): Uint8Array => view(name, (b, o, n) => new Uint8Array(b, o, n), 1, length);
  const strings = (name: string, count: number): string[] => {
    const offsets = i32(`${name}.offsets`, count + 1);
    const blob = section(`${name}.blob`);
    const joined = Buffer.from(body as ArrayBuffer, blob.offset, blob.bytes).toString(h.encodings[name] ?? 'utf8');
    if (offsets[count] !== joined.length) throw new Error(`string table ${name} does not match its offsets`);
    const out = new Array<string>(count);
    for (let i = 0; i < count; i++) out[i] = joined.slice(offsets[i], offsets[i + 1]);
    return out;
  };
  const catalogState = (): CatalogState => {
    const cap = h.capacity;
    const n = h.ordinals;
    const ids: (string | undefined)[] = strings('ids', n);
    const defined = u8('ids.defined', n);
    for (let o = 0; o < n; o++) if (defined[o] === 0) ids[o] = undefined;
    const columns = new Map<string, Column>();
    for (const [field, type] of h.fields) {
      if (type === 'string') {
        const codes = i32(`column.${field}.codes`, cap);
        const offsets = section(`column.${field}.dict.offsets`);
        const values = strings(`column.${field}.dict`, offsets.bytes / 4 - 1);
        columns.set(field, { type, codes, values, dict: new Map(values.map((v, i) => [v, i])) });
      } else {
        columns.set(field, { type, values: f64(`column.${field}.values`, cap) });
      }
    }
    const t = h.text;
    const postingLengths = i32('text.postingLengths', t.terms);
    let total = 0;
    for (const len of postingLengths) total += len;
    const textCap = section('text.lengths').bytes / 4;
    return {
      version: h.version,
      ids,
      present: u8('present', cap),
      createdAt: f64('createdAt', cap),
      presentCount: h.presentCount,
      byCreated: i32('byCreated', h.presentCount),
      columns,
      text: {
        terms: strings('text.terms', t.terms),
        postingLengths,
        docs: i32('text.docs', total),
        tfs: i32('text.tfs', total),
        docStart: i32('text.docStart', textCap),
        docCount: i32('text.docCount', textCap),
        pool: i32('text.pool', section('text.pool').bytes / 4),
        lengths: i32('text.lengths', textCap),
        documents: t.documents,
        tokens: t.tokens,
        postings: t.postings,
      },
    };
  };
  const v = h.vectors;
  const vectors = v
    ? {
        rows: view('vectors.rows', (b, o, len) => new Int8Array(b, o, len), 1, v.rows * h.dims),
        inverseNorms: view('vectors.norms', (b, o, len) => new Float32Array(b, o, len), 4, v.rows),
        live: v.live,
        extent: v.extent,
      }
    : null;
  return { state: part === 'vectors' ? null : catalogState(), vectors };
}

/** `list` joined into one blob, with the UTF-16 offset of each string's start (and the end). */
function encodeStrings(list: readonly (string | undefined)[]): { offsets: Int32Array; blob: Buffer; encoding: Encoding } {
  const offsets = new Int32Array(list.length + 1);
  let at = 0;
  for (let i = 0; i < list.length; i++) {
    offsets[i] = at;
    at += list[i]?.length ?? 0;
  }
  offsets[list.length] = at;
  const joined = list.join('');
  const utf8 = Buffer.from(joined, 'utf8');
  // A lone surrogate (possible in metadata JSON) does not survive UTF-8: such a table is UTF-16.
  if (utf8.toString('utf8') === joined) return { offsets, blob: utf8, encoding: 'utf8' };
  return { offsets, blob: Buffer.from(joined, 'utf16le'), encoding: 'utf16le' };
}

export function schemaFields(schema: QuerySchema): [string, FieldType][] {
  return Object.entries(schema.metadata);
}

export function align(n: number): number {
  return Math.ceil(n / 8) * 8;
}
