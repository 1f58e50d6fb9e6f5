/**
 * A query worker's use of the catalog snapshot (catalog-snapshot.ts): its first sync loads it, and
 * the close-time persist saves it. Who writes, and when: the worker that runs the close's
 * persist-ann task (one per close), after bringing its catalog up to the committed items. That
 * catalog is in memory already, so the save costs one sequential write of it (and its checksum)
 * at a moment nothing waits on queries; a warm never writes it, so no open pays for it. A process
 * that stops without a close leaves the previous snapshot, and the next open reads the rows after
 * it from the items table as any sync does.
 */
import type { Catalog } from './catalog.js';
import { catalogSnapshotVersion, readCatalogSnapshot, writeCatalogSnapshot } from './catalog-snapshot.js';
import type { Int8Vectors } from './profiles/for-you-vectors.js';
import type { CatalogWarning } from './protocol.js';
import type { QuerySchema } from './types.js';

/**
 * At most this many rows after a worker's catalog are read at close to save a snapshot of it (about
 * 3 s at the measured ~30 µs a row); further behind (a bulk load after the open's warm), nothing
 * is saved and the next open reads the table.
 */
export const CATALOG_CATCH_UP_ROWS = 100_000;

/** What a worker's first sync got from the snapshot. */
export interface CatalogLoad {
  /** The version loaded (0: none, the sync reads every row). */
  version: number;
  /** The snapshot in the directory is not one this database can use as it is: the next persist replaces it. */
  stale: boolean;
  warning?: CatalogWarning;
  /** The catalog image the catalog was loaded into (with `shared`), for the other threads to read. */
  image?: SharedArrayBuffer;
}

/**
 * Loads the snapshot of `dir` into a catalog that has not been refreshed (and into `vectors`, the
 * int8 vectors its refreshes keep), when there is one for this schema no newer than the items table.
 * With `shared`, the catalog's arrays are a catalog image's (shared/catalog-image.ts), returned.
 */
export function loadCatalog(
  dir: string,
  schema: QuerySchema,
  catalog: Catalog,
  vectors: Int8Vectors | null,
  itemsVersion: number,
  shared = false,
): CatalogLoad {
  const found = readCatalogSnapshot(dir, schema, itemsVersion, shared);
  const unusable = (reason: string): CatalogLoad => ({
    version: 0,
    stale: true,
    warning: {
      code: 'TIDAL_CATALOG_SNAPSHOT_UNUSABLE',
      message: `The catalog snapshot in ${dir} is unusable (${reason}); the query workers read the items table instead.`,
    },
  });
  if (found.kind === 'missing') return { version: 0, stale: false };
  if (found.kind === 'ignored') return { version: 0, stale: true };
  if (found.kind === 'unusable') return unusable(found.reason);
  if ((vectors === null) !== (found.vectors === null)) return unusable('its int8 vectors do not match the schema');
  try {
    catalog.importState(found.state);
  } catch (err) {
    return unusable((err as Error).message);
  }
  if (vectors && found.vectors) {
    // Shared rows another thread brought to this version or past it already are kept.
    const store = vectors.store;
    store.lock();
    try {
      if (store.version < catalog.version) {
        const f = found.vectors;
        store.load(f.rows, f.inverseNorms, f.live, f.extent, catalog.version);
      }
    } finally {
      store.unlock();
    }
    vectors.version = catalog.version;
  }
  return { version: catalog.version, stale: false, ...(found.image ? { image: found.image } : {}) };
}

/**
 * The close-time save: `catchUp` (the worker's refresh of its catalog, without the ANN index) is
 * run first when the items table is ahead of the catalog by at most {@link CATALOG_CATCH_UP_ROWS}
 * rows (`pending`), and `vectorsUp` brings the int8 vectors up to the catalog, then the catalog is saved unless the snapshot in `dir` reflects that version
 * already (and is sound: `stale` says the last load could not use it). Returns the version saved,
 * or null.
 */
export function persistCatalog(
  dir: string,
  schema: QuerySchema,
  catalog: Catalog,
  vectors: Int8Vectors | null,
  itemsVersion: number,
  pending: number,
  stale: boolean,
  catchUp: () => void,
  vectorsUp: () => void = () => {},
): number | null {
  if (pending > CATALOG_CATCH_UP_ROWS) return null;
  if (pending > 0) catchUp();
  if (catalog.version === 0 || catalog.version < itemsVersion) return null;
  vectorsUp();
  if (!stale && catalogSnapshotVersion(dir) === catalog.version) return null;
  writeCatalogSnapshot(dir, schema, catalog, vectors);
  return catalog.version;
}
