/**
 * ANN snapshots: the HNSW index saved in the database directory, so that one query worker builds it
 * and the others (and the next open) map it instead of building their own.
 *
 * Two files. The index, `ann-<version>-<nonce>.usearch` (usearch's format), and the sidecar
 * `ann-snapshot.json` naming it with what it covers: the items version it was built up to, the
 * dimensions, the entry count, the HNSW parameters, and the file's size and SHA-256. The sidecar is
 * the commit point: the index file is written, synced and renamed into place first, then the
 * sidecar is replaced the same way, so a crash at any moment leaves either the old snapshot or the
 * new one, plus at most an orphan file the next write removes. An index file is never modified once
 * named, because workers may have it memory-mapped.
 *
 * The checksum is verified before usearch touches the file: usearch trusts the bytes it maps, and a
 * damaged neighbour list would crash the process at search time rather than fail the load.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, readSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ANN_PARAMS, type AnnIndex } from './ann.js';

/** The sidecar's file name, in the database directory. */
export const SNAPSHOT_SIDECAR = 'ann-snapshot.json';

const FORMAT = 1;
const INDEX_FILE = /^ann-[0-9]+-[0-9a-f]+\.usearch$/;
/** Everything a snapshot write may leave behind: index files (named or not yet) and sidecar temps. */
const OURS = /^(ann-[0-9]+-[0-9a-f]+\.usearch(\.tmp)?|ann-snapshot\.json\.[0-9a-f]+\.tmp)$/;

/** What the sidecar records. */
export interface AnnSnapshotMeta {
  format: typeof FORMAT;
  /** The HNSW parameters the graph was built with ({@link ANN_PARAMS}). */
  params: string;
  /** The index file's name, in the same directory. */
  file: string;
  /** The highest items version the index reflects: rows with a higher version are not in it. */
  version: number;
  dims: number;
  /** Vectors in the index. */
  count: number;
  /** The index file's size in bytes. */
  bytes: number;
  /** The index file's SHA-256, hex. */
  sha256: string;
}

/**
 * The outcome of looking for a snapshot. `ignored`: a sound snapshot that does not fit this
 * database (other dimensions or HNSW parameters, a newer format), dropped without a warning.
 * `unusable`: unreadable, damaged, or inconsistent with the database (it covers versions the items
 * table does not have); the caller rebuilds and warns.
 */
export type SnapshotLookup =
  | { kind: 'ok'; meta: AnnSnapshotMeta; path: string }
  | { kind: 'missing' }
  | { kind: 'ignored'; reason: string }
  | { kind: 'unusable'; reason: string };

/**
 * Finds the snapshot in `dir` and checks that it fits: `dims`, the current HNSW parameters, and a
 * version no higher than `itemsVersion` (the items table's). With `verify`, also the file's size
 * and checksum (one sequential read of the file; about 65 ms for 100 000 × 128 dims).
 */
export function readSnapshot(dir: string, dims: number, itemsVersion: number, verify: boolean): SnapshotLookup {
  let text: string;
  try {
    text = readFileSync(join(dir, SNAPSHOT_SIDECAR), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'missing' };
    return { kind: 'unusable', reason: `cannot read ${SNAPSHOT_SIDECAR}: ${(err as Error).message}` };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { kind: 'unusable', reason: `${SNAPSHOT_SIDECAR} is not valid JSON` };
  }
  const m = raw as Partial<AnnSnapshotMeta> | null;
  if (typeof m !== 'object' || m === null) return { kind: 'unusable', reason: `${SNAPSHOT_SIDECAR} is not an object` };
  const format: unknown = m.format;
  if (format !== FORMAT) {
    return typeof format === 'number' && Number.isInteger(format) && format > FORMAT
      ? { kind: 'ignored', reason: `snapshot format ${format} is newer than this version reads` }
      : { kind: 'unusable', reason: `${SNAPSHOT_SIDECAR} has no known format` };
  }
  if (
    typeof m.params !== 'string' ||
    typeof m.file !== 'string' ||
    !INDEX_FILE.test(m.file) ||
    !isWhole(m.version) ||
    !isWhole(m.dims) ||
    !isWhole(m.count) ||
    !isWhole(m.bytes) ||
    typeof m.sha256 !== 'string' ||
    !/^[0-9a-f]{64}$/.test(m.sha256)
  ) {
    return { kind: 'unusable', reason: `${SNAPSHOT_SIDECAR} is malformed` };
  }
  const meta = m as AnnSnapshotMeta;
  if (meta.params !== ANN_PARAMS) return { kind: 'ignored', reason: `built with other HNSW parameters (${meta.params})` };
  if (meta.dims !== dims) return { kind: 'ignored', reason: `built for ${meta.dims}-dimensional embeddings, not ${dims}` };
  if (meta.version > itemsVersion) {
    return { kind: 'unusable', reason: `it covers items up to version ${meta.version} but the items table ends at ${itemsVersion}` };
  }
  const path = join(dir, meta.file);
  let bytes: number;
  try {
    bytes = statSync(path).size;
  } catch (err) {
    return { kind: 'unusable', reason: `cannot read ${meta.file}: ${(err as Error).message}` };
  }
  if (bytes !== meta.bytes) return { kind: 'unusable', reason: `${meta.file} has ${bytes} bytes, the sidecar says ${meta.bytes}` };
  if (verify) {
    let sha: string;
    try {
      sha = digest(path);
    } catch (err) {
      return { kind: 'unusable', reason: `cannot read ${meta.file}: ${(err as Error).message}` };
    }
    if (sha !== meta.sha256) return { kind: 'unusable', reason: `${meta.file} does not match its checksum` };
  }
  return { kind: 'ok', meta, path };
}

/**
 * Saves `ann` (a plain index) as the snapshot of `dir` covering items up to `version`, replacing the
 * previous one, and removes the files no snapshot names any more.
 * @throws when a file cannot be written; the previous snapshot is then left as it was.
 */
export function writeSnapshot(dir: string, ann: AnnIndex, version: number): AnnSnapshotMeta {
  const nonce = randomBytes(6).toString('hex');
  const file = `ann-${version}-${nonce}.usearch`;
  const path = join(dir, file);
  const indexTmp = `${path}.tmp`;
  const sidecarTmp = join(dir, `${SNAPSHOT_SIDECAR}.${nonce}.tmp`);
  try {
    ann.save(indexTmp);
    syncFile(indexTmp);
    const meta: AnnSnapshotMeta = {
      format: FORMAT,
      params: ANN_PARAMS,
      file,
      version,
      dims: ann.dims,
      count: ann.size,
      bytes: statSync(indexTmp).size,
      // Of the bytes on disk, read back: what the next open will check.
      sha256: digest(indexTmp),
    };
    renameSync(indexTmp, path);
    writeFileSync(sidecarTmp, `${JSON.stringify(meta, null, 2)}\n`);
    syncFile(sidecarTmp);
    renameSync(sidecarTmp, join(dir, SNAPSHOT_SIDECAR));
    syncDir(dir);
    sweep(dir, file);
    return meta;
  } catch (err) {
    rmSync(indexTmp, { force: true });
    rmSync(sidecarTmp, { force: true });
    // Named but never committed: no sidecar points at it.
    if (!sidecarNames(dir, file)) rmSync(path, { force: true });
    throw err;
  }
}

/** Removes the snapshot of `dir` (sidecar first, so no reader sees a sidecar without its file). */
export function discardSnapshot(dir: string): void {
  rmSync(join(dir, SNAPSHOT_SIDECAR), { force: true });
  sweep(dir, null);
}

/**
 * Deletes every snapshot file of `dir` except `keep`. A worker that still maps a deleted file keeps
 * reading it (POSIX keeps the data until the last mapping goes); where the OS refuses to delete a
 * mapped file, it stays until a later write removes it.
 */
function sweep(dir: string, keep: string | null): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (name === keep || !OURS.test(name)) continue;
    try {
      rmSync(join(dir, name), { force: true });
    } catch {
      // Mapped elsewhere (Windows) or gone already: harmless, the sidecar no longer names it.
    }
  }
}

function sidecarNames(dir: string, file: string): boolean {
  try {
    return (JSON.parse(readFileSync(join(dir, SNAPSHOT_SIDECAR), 'utf8')) as { file?: unknown }).file === file;
  } catch {
    return false;
  }
}

function digest(path: string): string {
  const hash = createHash('sha256');
  const chunk = Buffer.allocUnsafe(1 << 20);
  const fd = openSync(path, 'r');
  try {
    for (let n = readSync(fd, chunk); n > 0; n = readSync(fd, chunk)) hash.update(chunk.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}

function syncFile(path: string): void {
  const fd = openSync(path, 'r+');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Makes the renames in `dir` durable. Not every platform can open a directory: best effort. */
export function syncDir(dir: string): void {
  try {
    const fd = openSync(dir, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // The snapshot is still consistent; at worst a power loss brings back the previous one.
  }
}

function isWhole(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}
