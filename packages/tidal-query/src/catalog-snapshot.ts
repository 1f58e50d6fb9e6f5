/**
 * The catalog snapshot: one query worker's catalog (ids, presence, creation times, the metadata
 * columns with their dictionaries, the text index) and int8 item vectors, saved in the database
 * directory as `catalog-snapshot.bin`, stamped with the items version it reflects. A worker's first
 * sync loads it instead of reading every item row, then reads the rows after that version as any
 * sync does, so what it holds is exactly what reading every row gives.
 *
 * The file: a 56-byte prefix (the magic `TIDALCAT`, the format number, the header's length, a
 * checksum of everything after the prefix: CRC-32, or SHA-256 on a Node without `zlib.crc32`), a JSON header (the schema's metadata fields and
 * embedding dimensions, the version, the sizes, and where each section lies), then the sections
 * (catalog-format.ts: the same as a catalog image's, shared/catalog-image.ts). Loading is one read of the file, one pass of the checksum, and typed-array views
 * into what was read: no per-row parsing. It is written to a temporary name, synced and renamed
 * into place (then the directory synced), so a crash leaves the old snapshot or the new one.
 */
import { createHash, randomBytes, type Hash } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, readSync, readdirSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import * as zlib from 'node:zlib';
import type { Catalog, CatalogState } from './catalog.js';
import { FORMAT, MAGIC, PREFIX, align, decode, encodeCatalog, schemaFields, type Header, type LoadedVectors } from './catalog-format.js';
import type { Int8Vectors } from './profiles/for-you-vectors.js';
import { imageOf, readCatalogImage } from './shared/catalog-image.js';
import type { QuerySchema } from './types.js';
import { syncDir } from './ann-snapshot.js';

/** The snapshot's file name, in the database directory. */
export const CATALOG_SNAPSHOT = 'catalog-snapshot.bin';

/** The checksum's kinds: zlib's CRC-32 where Node has it (20.15 and later: about twice as fast), else SHA-256. */
const CRC32 = 1;
const SHA256 = 2;
const crc32 = (zlib as unknown as { crc32?: (data: Uint8Array, value?: number) => number }).crc32;
const TEMP = /^catalog-snapshot\.bin\.[0-9a-f]+\.tmp$/;
/** Bytes gathered before a write: many small arrays (a term's postings) cost one write, not one each. */
const STAGE = 8 << 20;

/** What a load found. `ignored`: sound but not for this database (another schema, a newer format): no warning. */
export type CatalogSnapshotLookup =
  | { kind: 'ok'; state: CatalogState; vectors: LoadedVectors | null; bytes: number; image?: SharedArrayBuffer }
  | { kind: 'missing' }
  | { kind: 'ignored'; reason: string }
  | { kind: 'unusable'; reason: string };

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

function sweep(dir: string): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) if (TEMP.test(name)) rmSync(join(dir, name), { force: true });
}
