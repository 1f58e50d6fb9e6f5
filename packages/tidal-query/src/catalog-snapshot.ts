/**
 * The catalog snapshot: one query worker's catalog (ids, presence, creation times, the metadata
 * columns with their dictionaries, the text index) and int8 item vectors, saved in the database
 * directory as `catalog-snapshot.bin`, stamped with the items version it reflects. A worker's first
 * sync loads it instead of reading every item row, then reads the rows after that version as any
 * sync does, so what it holds is exactly what reading every row gives.
 *
 * The file: a 56-byte prefix (the magic `TIDALCAT`, the format number, the header's length, a
 * checksum of everything after the prefix: CRC-32, or SHA-256 on a Node without `zlib.crc32`), a JSON header (the schema's metadata fields and
 * embedding dimensions, the version, the sizes, and where each section lies), then the sections,
 * each a flat typed array (or a string table: one blob and the offsets of its strings) at an
 * 8-byte boundary. Loading is one read of the file, one pass of the checksum, and typed-array views
 * into what was read: no per-row parsing. It is written to a temporary name, synced and renamed
 * into place (then the directory synced), so a crash leaves the old snapshot or the new one.
 */
import { createHash, randomBytes, type Hash } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, readSync, readdirSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import * as zlib from 'node:zlib';
import type { Catalog, CatalogState, Column } from './catalog.js';
import type { Int8Vectors } from './profiles/for-you-vectors.js';
import type { FieldType, QuerySchema } from './types.js';
import { syncDir } from './ann-snapshot.js';

/** The snapshot's file name, in the database directory. */
export const CATALOG_SNAPSHOT = 'catalog-snapshot.bin';

const MAGIC = 'TIDALCAT';
const FORMAT = 1;
/** Magic (8), format (4), header bytes (4), checksum kind (4), 0 (4), checksum of the rest (32: a CRC-32 in its first 4). */
const PREFIX = 56;
/** The checksum's kinds: zlib's CRC-32 where Node has it (20.15 and later: about twice as fast), else SHA-256. */
const CRC32 = 1;
const SHA256 = 2;
const crc32 = (zlib as unknown as { crc32?: (data: Uint8Array, value?: number) => number }).crc32;
const TEMP = /^catalog-snapshot\.bin\.[0-9a-f]+\.tmp$/;
/** Bytes gathered before a write: many small arrays (a term's postings) cost one write, not one each. */
const STAGE = 8 << 20;

type Encoding = 'utf8' | 'utf16le';

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

/** What a load found. `ignored`: sound but not for this database (another schema, a newer format): no warning. */
export type CatalogSnapshotLookup =
  | { kind: 'ok'; state: CatalogState; vectors: LoadedVectors | null; bytes: number; image?: SharedArrayBuffer }
  | { kind: 'missing' }
  | { kind: 'ignored'; reason: string }
  | { kind: 'unusable'; reason: string };

export interface LoadedVectors {
  rows: Int8Array;
  inverseNorms: Float32Array;
  live: number;
  extent: number;
}

/** The snapshot's version, read from its header alone (no checksum), or null without a readable one. */
export function catalogSnapshotVersion(dir: string): number | null {
  let fd: number;
  try {
    fd = openSync(join(dir, CATALOG_SNAPSHOT), 'r');
  } catch {
    return null;
  }
  try {
    const prefix = Buffer.alloc(PREFIX);
    if (readSync(fd, prefix, 0, PREFIX, 0) !== PREFIX || prefix.toString('latin1', 0, 8) !== MAGIC) return null;
    if (prefix.readUInt32LE(8) !== FORMAT) return null;
    const size = prefix.readUInt32LE(12);
    const text = Buffer.alloc(size);
    if (readSync(fd, text, 0, size, PREFIX) !== size) return null;
    const version = (JSON.parse(text.toString('utf8')) as Partial<Header>).version;
    return typeof version === 'number' && Number.isSafeInteger(version) ? version : null;
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/**
 * Loads the snapshot of `dir` for `schema`: null-free `ok` only when it is whole (its checksum
 * matches), of this schema (the same metadata fields and types, the same embedding dimensions) and
 * of a version no higher than `itemsVersion` (the items table's highest).
 */
export function readCatalogSnapshot(dir: string, schema: QuerySchema, itemsVersion: number, shared = false): CatalogSnapshotLookup {
  let buf: Buffer;
  try {
    buf = readFileSync(join(dir, CATALOG_SNAPSHOT));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'missing' };
    return { kind: 'unusable', reason: `cannot read ${CATALOG_SNAPSHOT}: ${(err as Error).message}` };
  }
  if (buf.length < PREFIX || buf.toString('latin1', 0, 8) !== MAGIC)
    return { kind: 'unusable', reason: `${CATALOG_SNAPSHOT} is not a catalog snapshot` };
  const format = buf.readUInt32LE(8);
  if (format !== FORMAT) {
    return format > FORMAT
      ? { kind: 'ignored', reason: `snapshot format ${format} is newer than this version reads` }
      : { kind: 'unusable', reason: `${CATALOG_SNAPSHOT} has no known format` };
  }
  const headerBytes = buf.readUInt32LE(12);
  const bodyStart = align(PREFIX + headerBytes);
  if (bodyStart > buf.length) return { kind: 'unusable', reason: `${CATALOG_SNAPSHOT} is truncated (${buf.length} bytes)` };
  const kind = buf.readUInt32LE(16);
  if ((kind !== CRC32 && kind !== SHA256) || buf.readUInt32LE(20) !== 0)
    return { kind: 'unusable', reason: `${CATALOG_SNAPSHOT} has no known checksum` };
  if (kind === CRC32 && !crc32) return { kind: 'ignored', reason: 'its CRC-32 needs a Node with zlib.crc32' };
  const sum = new Checksum(kind);
  sum.update(buf.subarray(PREFIX));
  if (!sum.digest().equals(buf.subarray(24, PREFIX)))
    return { kind: 'unusable', reason: `${CATALOG_SNAPSHOT} does not match its checksum` };
  let h: Header;
  try {
    h = JSON.parse(buf.toString('utf8', PREFIX, PREFIX + headerBytes)) as Header;
  } catch {
    return { kind: 'unusable', reason: `${CATALOG_SNAPSHOT}'s header is not valid JSON` };
  }
  const fields = schemaFields(schema);
  if (JSON.stringify(h.fields) !== JSON.stringify(fields) || h.dims !== schema.embeddingDims) {
    return { kind: 'ignored', reason: 'saved for another schema' };
  }
  if (h.version > itemsVersion) {
    return { kind: 'unusable', reason: `it reflects items up to version ${h.version} but the items table ends at ${itemsVersion}` };
  }
  try {
    if (!shared) return { kind: 'ok', ...decode(h, alignedBody(buf, bodyStart)), bytes: buf.length };
    // The catalogue's sections go into shared memory as an image (shared/catalog-image.ts), read
    // where they are; the int8 vectors, loaded into their own shared rows, from the file's buffer.
    const image = imageOf(h, buf.subarray(bodyStart));
    const { vectors } = decode(h, alignedBody(buf, bodyStart), 'vectors');
    return { kind: 'ok', state: readCatalogImage(image), vectors, bytes: buf.length, image };
  } catch (err) {
    return { kind: 'unusable', reason: `${CATALOG_SNAPSHOT} is inconsistent (${(err as Error).message})` };
  }
}

/**
 * Saves `catalog` (and the int8 `vectors` kept beside it, null without embeddings) as the snapshot
 * of `dir`, replacing the previous one, with a CRC-32 where Node has one (else, or when
 * `checksum` says so, SHA-256). Returns the bytes written.
 * @throws when the file cannot be written; the previous snapshot is then left as it was.
 */
export function writeCatalogSnapshot(
  dir: string,
  schema: QuerySchema,
  catalog: Catalog,
  vectors: Int8Vectors | null,
  checksum: 'crc32' | 'sha256' = crc32 ? 'crc32' : 'sha256',
): number {
  const { header, pieces } = encodeCatalog(schema, catalog, vectors);
  const headerJson = Buffer.from(JSON.stringify(header), 'utf8');
  const nonce = randomBytes(6).toString('hex');
  const tmp = join(dir, `${CATALOG_SNAPSHOT}.${nonce}.tmp`);
  const fd = openSync(tmp, 'w');
  try {
    const out = new Staged(fd, PREFIX, checksum === 'crc32' ? CRC32 : SHA256);
    out.put(headerJson);
    out.pad(align(PREFIX + headerJson.length) - PREFIX - headerJson.length);
    for (const [, views] of pieces) {
      let n = 0;
      for (const v of views) {
        out.put(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
        n += v.byteLength;
      }
      out.pad(align(n) - n);
    }
    out.flush();
    const prefix = Buffer.alloc(PREFIX);
    prefix.write(MAGIC, 0, 'latin1');
    prefix.writeUInt32LE(FORMAT, 8);
    prefix.writeUInt32LE(headerJson.length, 12);
    prefix.writeUInt32LE(out.sum.kind, 16);
    out.sum.digest().copy(prefix, 24);
    writeSync(fd, prefix, 0, PREFIX, 0);
    fsyncSync(fd);
    closeSync(fd);
    renameSync(tmp, join(dir, CATALOG_SNAPSHOT));
    syncDir(dir);
    sweep(dir);
    return out.written;
  } catch (err) {
    try {
      closeSync(fd);
    } catch {
      // Closed already.
    }
    rmSync(tmp, { force: true });
    throw err;
  }
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

/** An image's checksum kind: none (shared memory, never read back from a disk). */
const NO_CHECKSUM = 0;

/**
 * A catalog image (shared/catalog-image.ts): the snapshot file's layout in a SharedArrayBuffer,
 * without the int8 vectors' sections and with no checksum. `body` holds the sections `header`
 * places (a file's body, or the pieces of {@link encodeCatalog} laid out by {@link writeCatalogImage}).
 */
function imageOf(header: Header, body: Uint8Array): SharedArrayBuffer {
  const sections = header.sections.filter(([name]) => !name.startsWith('vectors.'));
  const kept: Header = { ...header, vectors: null, sections };
  const json = Buffer.from(JSON.stringify(kept), 'utf8');
  const bodyStart = align(PREFIX + json.length);
  const last = sections[sections.length - 1];
  const bodyBytes = last ? last[1] + last[2] : 0;
  const image = new SharedArrayBuffer(align(bodyStart + bodyBytes));
  const bytes = Buffer.from(image as unknown as ArrayBuffer);
  bytes.write(MAGIC, 0, 'latin1');
  bytes.writeUInt32LE(FORMAT, 8);
  bytes.writeUInt32LE(json.length, 12);
  bytes.writeUInt32LE(NO_CHECKSUM, 16);
  bytes.set(json, PREFIX);
  // The catalogue's sections come first and the vectors' last (encodeCatalog's order): one copy.
  bytes.set(body.subarray(0, bodyBytes), bodyStart);
  return image;
}

/** `catalog` as a catalog image (see {@link imageOf}). */
export function writeCatalogImage(schema: QuerySchema, catalog: Catalog): SharedArrayBuffer {
  const { header, pieces } = encodeCatalog(schema, catalog, null);
  const last = header.sections[header.sections.length - 1];
  const body = new Uint8Array(last ? last[1] + last[2] : 0);
  for (let i = 0; i < pieces.length; i++) {
    let at = header.sections[i]![1];
    for (const v of pieces[i]![1]) {
      body.set(new Uint8Array(v.buffer, v.byteOffset, v.byteLength), at);
      at += v.byteLength;
    }
  }
  return imageOf(header, body);
}

/** The catalog state a catalog image holds: its arrays are views of the shared buffer (never written). */
export function readCatalogImage(image: SharedArrayBuffer): CatalogState {
  const bytes = Buffer.from(image as unknown as ArrayBuffer);
  if (bytes.length < PREFIX || bytes.toString('latin1', 0, 8) !== MAGIC || bytes.readUInt32LE(16) !== NO_CHECKSUM) {
    throw new Error('not a catalog image');
  }
  const length = bytes.readUInt32LE(12);
  const header = JSON.parse(bytes.toString('utf8', PREFIX, PREFIX + length)) as Header;
  const { state } = decode(header, { body: image, base: align(PREFIX + length), end: image.byteLength });
  return state;
}

/** Removes the catalog snapshot of `dir` and any temporary file a write left. */
export function discardCatalogSnapshot(dir: string): void {
  rmSync(join(dir, CATALOG_SNAPSHOT), { force: true });
  sweep(dir);
}

/** A running checksum of either kind. */
class Checksum {
  readonly kind: typeof CRC32 | typeof SHA256;
  #crc = 0;
  readonly #hash: Hash | null;

  constructor(kind: number) {
    this.kind = kind === CRC32 ? CRC32 : SHA256;
    this.#hash = this.kind === SHA256 ? createHash('sha256') : null;
  }

  update(bytes: Uint8Array): void {
    if (this.#hash) this.#hash.update(bytes);
    // Never an empty one: zlib's crc32 of no bytes at a null pointer is its initial value, 0, not the running one.
    else if (bytes.length > 0) this.#crc = crc32!(bytes, this.#crc);
  }

  /** 32 bytes: the SHA-256, or the CRC-32 (little-endian) and zeros. */
  digest(): Buffer {
    if (this.#hash) return this.#hash.digest();
    const out = Buffer.alloc(32);
    out.writeUInt32LE(this.#crc >>> 0, 0);
    return out;
  }
}

/** Writes through a staging buffer, checksumming every byte after the prefix. */
class Staged {
  readonly sum: Checksum;
  readonly #fd: number;
  readonly #stage = Buffer.allocUnsafe(STAGE);
  #used = 0;
  #position: number;
  written: number;

  constructor(fd: number, position: number, kind: number) {
    this.sum = new Checksum(kind);
    this.#fd = fd;
    this.#position = position;
    this.written = position;
  }

  put(bytes: Uint8Array): void {
    this.sum.update(bytes);
    this.written += bytes.length;
    if (bytes.length > STAGE / 2) {
      this.flush();
      this.#write(bytes);
      return;
    }
    if (this.#used + bytes.length > STAGE) this.flush();
    this.#stage.set(bytes, this.#used);
    this.#used += bytes.length;
  }

  pad(n: number): void {
    if (n > 0) this.put(new Uint8Array(n));
  }

  flush(): void {
    if (this.#used === 0) return;
    this.#write(this.#stage.subarray(0, this.#used));
    this.#used = 0;
  }

  #write(bytes: Uint8Array): void {
    for (let off = 0; off < bytes.length;) {
      const n = writeSync(this.#fd, bytes, off, bytes.length - off, this.#position);
      off += n;
      this.#position += n;
    }
  }
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

/**
 * Where the file's body lies for typed-array views: the buffer read and the body's offset in it (no
 * copy), or a copy when that offset is not 8-aligned (a small file read into Node's shared pool).
 */
function alignedBody(buf: Buffer, bodyStart: number): { body: ArrayBuffer; base: number; end: number } {
  const base = buf.byteOffset + bodyStart;
  if (base % 8 === 0 && buf.buffer instanceof ArrayBuffer) return { body: buf.buffer, base, end: buf.byteOffset + buf.length };
  const out = new ArrayBuffer(buf.length - bodyStart);
  new Uint8Array(out).set(buf.subarray(bodyStart));
  return { body: out, base: 0, end: out.byteLength };
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

function schemaFields(schema: QuerySchema): [string, FieldType][] {
  return Object.entries(schema.metadata);
}

export function align(n: number): number {
  return Math.ceil(n / 8) * 8;
}

function sweep(dir: string): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) if (TEMP.test(name)) rmSync(join(dir, name), { force: true });
}
