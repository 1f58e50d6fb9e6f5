/**
 * One query worker's view of the items table over time: the catalog sync before each task, and
 * the life of the ANN index it keeps beside the catalog.
 *
 * The ANN index is built once and shared: during warm one worker, elected as ann-election.ts
 * describes, builds it or brings the saved snapshot up to date and saves it in the database
 * directory (see ann-snapshot.ts); every worker then memory-maps that file and keeps the changes
 * after it in a small private index of its own (see AnnIndex). At close one worker brings the
 * snapshot up to the committed items (persist).
 */
import { performance } from 'node:perf_hooks';
import { threadId } from 'node:worker_threads';
import type Database from 'better-sqlite3';
import { AnnIndex } from './ann.js';
import { adoptSnapshot, warmAnn, type AnnOrigin, type ElectionHost } from './ann-election.js';
import { AnnBatch, annRowsStatement, applyAnnRows } from './ann-rows.js';
import { discardSnapshot, readSnapshot, writeSnapshot } from './ann-snapshot.js';
import type { Catalog } from './catalog.js';
import { loadCatalog, persistCatalog, type CatalogLoad } from './catalog-load.js';
import type { QueryContext, VectorSearcher } from './context.js';
import { ExactVectors } from './exact-vectors.js';
import { beginVectorWrite, feedVector, fillVectorRows, keptItemVectors, type Int8Vectors } from './profiles/for-you-vectors.js';
import { readCatalogImage, shareThreshold, writeCatalogImage, type CatalogShare } from './shared/catalog-image.js';
import type { SharedVectorBuffers } from './shared/item-vectors.js';
import { WARM_SYNC_BYTES, type CatalogWarning, type PersistAnnResult, type WarmMessage, type WarmResult } from './protocol.js';
import type { TaskEnvelope } from './types.js';

/** The worker's query context, whose vector search this module replaces as the lifecycle goes. */
export type AnnContext = QueryContext & { ann: VectorSearcher | null };

/** The catalog sync and ANN index lifecycle of one query worker. */
export class AnnLifecycle {
  readonly #db: Database.Database;
  readonly #catalog: Catalog;
  readonly #ctx: AnnContext;
  /** The database directory, where snapshots live. */
  readonly #dir: string;
  /** This worker's ANN index: null before the first embedding, and while it is built elsewhere. */
  #index: AnnIndex | null = null;
  /**
   * Every item's vector as int8, kept by the sync (null when the schema has no embeddings): the
   * process's shared rows when the database gave them (written under their lock, see
   * {@link #beginVectors}), else this worker's own.
   */
  readonly #vectors: Int8Vectors | null;
  /** The exact search over {@link #vectors}, the context's vector search while the index is deferred. */
  readonly #exact: ExactVectors | null;
  /**
   * The index is being built on its own thread (a warm's election deferred it, see ann-election.ts):
   * the sync leaves the ANN index alone and searches are exact, until a warm adopts the snapshot the
   * build saves.
   */
  #deferred = false;
  /** Whether this worker has had its first task (a warm, or a query in place of a worker that died). */
  #started = false;
  /** What the first sync took from the catalog snapshot (null before it). */
  #catalogLoad: CatalogLoad | null = null;
  /** The load's warning, until a warm reports it. */
  #catalogWarning: CatalogWarning | undefined;
  /** See `WorkerInit.annBackgroundRows`. */
  readonly #backgroundRows: number;
  /**
   * The items version the ANN index reflects. Equal to the catalog's version except right after a
   * snapshot was adopted, until the next sync brings both to the same version.
   */
  #annVersion = 0;
  /** The snapshot file the ANN index maps, or null for a plain index (or none). */
  #annFile: string | null = null;
  /** Rows the last sync applied to the ANN index on top of an adopted snapshot. */
  #annCaughtUp = 0;
  /** Where the current ANN index came from, as the last warm that changed it reported. */
  #annOrigin: AnnOrigin = { annSource: 'none', annSnapshotVersion: 0, annRowsApplied: 0 };
  /** Item rows after a version, in version order, with what the ANN index needs. */
  readonly #annRows: Database.Statement<[number, number]>;
  readonly #annPending: Database.Statement<[number]>;
  /** Items with an embedding (what a build from nothing adds), counted up to a limit. */
  readonly #embedded: Database.Statement<[number]>;
  readonly #maxVersion: Database.Statement<[]>;
  /** The part of this worker's state the warm-time election reads and changes. */
  readonly #host: ElectionHost;
  /**
   * The process's catalog images (shared/catalog-image.ts), or null: none given, or int8 vectors
   * of this thread's own (an image carries none).
   */
  readonly #share: CatalogShare | null;
  /** The generation of the image the catalog was last imported from (0: none). */
  #imageGen = 0;
  /** Whether a warm's sync is running (see {@link #leaveVectors}). */
  #warming = false;
  /** Whether this sync's refresh leaves the int8 vectors to the threads waiting for its image. */
  #leaveVectors = false;
  /** Rows whose int8 vector {@link #fillVectors} wrote (counted in `WarmResult.refreshedEmbeddings`). */
  #vectorsFilled = 0;
  /** Where the first sync took the catalog from (see `WarmResult.catalogSource`). */
  #catalogSource: 'rows' | 'snapshot' | 'image' = 'rows';
  /** The image the catalog reads now, or null (see {@link image}). */
  #image: { gen: number; bytes: number } | null = null;

  constructor(
    db: Database.Database,
    catalog: Catalog,
    ctx: AnnContext,
    dir: string,
    backgroundRows = Number.POSITIVE_INFINITY,
    sharedVectors: SharedVectorBuffers | null = null,
    share: CatalogShare | null = null,
  ) {
    this.#share = ctx.schema.embeddingDims === 0 || sharedVectors !== null ? share : null;
    this.#backgroundRows = backgroundRows;
    this.#db = db;
    this.#catalog = catalog;
    this.#ctx = ctx;
    this.#dir = dir;
    const dims = ctx.schema.embeddingDims;
    this.#vectors = dims > 0 ? keptItemVectors(ctx, sharedVectors) : null;
    this.#exact = this.#vectors ? new ExactVectors(dims, this.#vectors) : null;
    this.#annRows = annRowsStatement(db);
    this.#annPending = db.prepare('SELECT COUNT(*) FROM items WHERE version > ?').pluck();
    this.#embedded = db.prepare('SELECT COUNT(*) FROM (SELECT 1 FROM items WHERE present = 1 AND embedding IS NOT NULL LIMIT ?)').pluck();
    this.#maxVersion = db.prepare('SELECT COALESCE(MAX(version), 0) FROM items').pluck();
    this.#host = {
      dir,
      dims,
      itemsVersion: (env) => this.#itemsVersion(env),
      pendingAfter: (v) => this.#annPending.get(v) as number,
      embeddedAtLeast: (n) => this.#embeddedAtLeast(n),
      applyRows: (ann, from, to) => applyAnnRows(this.#annRows, { index: ann }, dims, from, to, 0, Number.POSITIVE_INFINITY),
      plainIndex: () => {
        const own = this.#index;
        return own && !own.layered && this.#annVersion === this.#catalog.version ? { index: own, version: this.#annVersion } : null;
      },
      maps: (file) => this.#annFile === file && this.#index !== null,
      install: (ann, version, file) => {
        this.#deferred = false;
        this.#setIndex(ann);
        this.#annVersion = version;
        this.#annFile = file;
      },
      defer: () => {
        this.#deferred = true;
        this.#annFile = null;
        this.#annVersion = 0;
        this.#setIndex(null);
      },
    };
  }

  /**
   * Whether at least `n` items have an embedding. The scan stops at the n-th: every question asked
   * of the count is "more than a threshold", and counting all of 1 000 000 rows takes a second.
   */
  #embeddedAtLeast(n: number): boolean {
    if (!Number.isFinite(n)) return false;
    return (this.#embedded.get(Math.max(1, Math.ceil(n))) as number) >= n;
  }

  /** Pulls item changes up to at least `version`; returns the number of rows read. */
  sync(version: number): number {
    if (!this.#started) this.#firstTask();
    const share = this.#share;
    if (!share) {
      if (!this.#catalogLoad) this.#loadCatalog();
      return this.#syncTo(version);
    }
    // Far behind (a first sync, or more rows to read than make an image): one thread reads them
    // and posts its image while the others wait for it, then take it (shared/catalog-image.ts).
    const far = !this.#catalogLoad || version - this.#catalog.version >= this.#imageThreshold();
    const reader = far && share.tryLock();
    // Another thread holds the lock: this one waits for its image, and if that thread reads the rows
    // from the table (not a snapshot), writes the int8 vectors meanwhile, so its refresh finds them.
    if (far && !reader) share.lock(undefined, () => this.#fillVectors(version));
    try {
      this.#takeImage();
      if (!this.#catalogLoad) this.#loadCatalog();
      const readingRows = reader && version - this.#catalog.version >= this.#imageThreshold();
      if (readingRows) share.readingRows(true);
      // In a warm every query thread syncs at once: the reader leaves the vectors to the others
      // (writing after its catalog only what they have not), so the two reads run side by side.
      this.#leaveVectors = readingRows && this.#warming && share.threads > 1;
      const rows = this.#syncTo(version);
      this.#postImage();
      return rows;
    } finally {
      this.#leaveVectors = false;
      if (reader) share.readingRows(false);
      share.unlock();
    }
  }

  /** Rows of its own past which this thread posts an image of its catalog. */
  #imageThreshold(): number {
    return shareThreshold(this.#share!.minRows, this.#catalog.presentCount);
  }

  /**
   * Takes the newest image another thread posted, when it leaves this catalog fewer rows of its own:
   * the rows after the image's version are read again by the sync that follows. A first sync
   * takes it in place of the snapshot file.
   */
  #takeImage(): void {
    const first = !this.#catalogLoad;
    const image = first ? this.#share!.awaitImage() : this.#share!.poll();
    if (!image || image.gen <= this.#imageGen) return;
    const catalog = this.#catalog;
    // Two threads that posted at once converge on the newer image (the same version: nothing read again).
    if (!first && catalog.version - image.version > catalog.rowsSinceImport / 2) return;
    this.#imageGen = image.gen;
    try {
      const state = readCatalogImage(image.buffer);
      if (first) catalog.importState(state);
      else catalog.rebase(state);
    } catch {
      // Not one this catalog can hold (it never is, from this database): it keeps its own rows.
      return;
    }
    this.#image = { gen: image.gen, bytes: image.buffer.byteLength };
    if (this.#vectors) this.#vectors.version = catalog.version;
    if (first) {
      this.#loaded({ version: image.version, stale: image.stale });
      this.#catalogSource = 'image';
    }
  }

  /**
   * Posts an image of this catalog when it holds enough rows of its own (its first full read, or
   * the rows since its image), then reads its arrays from the image instead.
   */
  #postImage(): void {
    const catalog = this.#catalog;
    const share = this.#share!;
    if (catalog.presentCount < share.minRows || (this.#imageGen !== 0 && catalog.rowsSinceImport < this.#imageThreshold())) return;
    const buffer = writeCatalogImage(this.#ctx.schema, catalog);
    const image = share.publish(buffer, catalog.version, this.#catalogLoad?.stale ?? false);
    catalog.rebase(readCatalogImage(buffer));
    this.#imageGen = image.gen;
    this.#image = { gen: image.gen, bytes: buffer.byteLength };
  }

  /** The catalog image this thread's catalog reads (its generation and bytes), or null. */
  get image(): { gen: number; bytes: number } | null {
    return this.#image;
  }

  #syncTo(version: number): number {
    this.#vectors?.store.refreshViews();
    const inStep = this.#deferred || this.#annVersion === this.#catalog.version;
    if (this.#catalog.version >= version && inStep) {
      this.#vectorsUpTo(version);
      return 0;
    }
    if (inStep) {
      const rows = this.#refresh(!this.#deferred, version);
      if (!this.#deferred) this.#annVersion = this.#catalog.version;
      return rows;
    }
    // The index and the catalog stand at different versions (a snapshot was just adopted): the
    // catalog reads its rows, the index the rows after its own version, in one read transaction so
    // both see the same commits.
    return this.#db.transaction(() => {
      const rows = this.#refresh(false, version);
      if (this.#catalog.version > this.#annVersion) {
        this.#annCaughtUp = this.#applyAnnRows(this.#annVersion, this.#catalog.version, undefined, Number.POSITIVE_INFINITY);
        this.#annVersion = this.#catalog.version;
      }
      this.#publish();
      return rows;
    })();
  }

  /**
   * A warm task: take part in the ANN election (when the task carries its buffer), then sync, and
   * report where this worker's index came from.
   */
  warm(
    msg: WarmMessage,
  ): Omit<WarmResult, 'nice' | 'niceWarning' | 'structuresBuilt' | 'termsSummarized' | 'pathsRun' | 'stepsMs' | 'youngGenerationMb'> {
    this.#started = true;
    const annBefore = this.#index;
    const fileBefore = this.#annFile;
    const ann = msg.barrier.byteLength >= WARM_SYNC_BYTES ? warmAnn(this.#host, msg) : null;
    this.#annCaughtUp = 0;
    const embeddingsBefore = this.#catalog.embeddingsRead + this.#vectorsFilled;
    this.#warming = true;
    let refreshed: number;
    try {
      refreshed = this.sync(msg.env.itemsVersion);
    } finally {
      this.#warming = false;
    }
    // A warm that left the worker's index as it was (same mapped file, nothing new) reports where
    // it came from the last time; one that replaced it records the new origin.
    if (ann && (this.#index !== annBefore || this.#annFile !== fileBefore)) {
      this.#annOrigin = { ...ann.origin, annRowsApplied: ann.origin.annRowsApplied + this.#annCaughtUp };
    }
    if (this.#deferred) this.#annOrigin = { annSource: 'building', annSnapshotVersion: 0, annRowsApplied: 0 };
    const catalogWarning = this.#catalogWarning;
    this.#catalogWarning = undefined;
    return {
      threadId,
      threadItems: this.#catalog.presentCount,
      annSize: this.#index?.size ?? 0,
      refreshedRows: refreshed,
      refreshedEmbeddings: this.#catalog.embeddingsRead + this.#vectorsFilled - embeddingsBefore,
      catalogSnapshotVersion: this.#catalogLoad?.version ?? 0,
      catalogSource: this.#catalogSource,
      ...(catalogWarning ? { catalogWarning } : {}),
      ...this.#annOrigin,
      annElected: ann?.elected ?? false,
      ...(ann?.warning ? { annWarning: ann.warning } : {}),
    };
  }

  /**
   * The close-time save: bring the snapshot up to the committed items so the next open maps it and
   * applies nothing. Costs about what the changes since the last snapshot cost to apply (a copy of the
   * snapshot is loaded and they are added with every core); a worker holding a plain index of its
   * own (built by queries, no snapshot under it) saves that instead. Never builds from nothing: that
   * is left to the next open's warm. Then the catalog snapshot (see {@link #persistCatalog}).
   */
  persist(env: TaskEnvelope, budgetMs: number): PersistAnnResult {
    const ann = this.#persistAnn(env, budgetMs);
    return { ...ann, catalogSavedVersion: this.#persistCatalog(env) };
  }

  /**
   * The close-time save of the catalog snapshot (see catalog-load.ts), by a worker whose catalog
   * has been synced: the rows after it are read (without the ANN index, which the next sync brings
   * up to the catalog), then it is saved. A write that fails leaves the previous snapshot.
   */
  #persistCatalog(env: TaskEnvelope): number | null {
    const load = this.#catalogLoad;
    if (!load) return null;
    const current = this.#itemsVersion(env);
    const pending = this.#annPending.get(this.#catalog.version) as number;
    // The rows are saved as of the catalog's version at least, and none half written: the lock is
    // held from the catch-up to the end of the save.
    const store = this.#vectors?.store;
    store?.lock();
    try {
      return persistCatalog(
        this.#dir,
        this.#ctx.schema,
        this.#catalog,
        this.#vectors,
        current,
        pending,
        load.stale,
        () => {
          this.#refresh(false, Number.POSITIVE_INFINITY);
        },
        () => this.#vectorsUpTo(this.#catalog.version),
      );
    } catch {
      return null;
    } finally {
      store?.unlock();
    }
  }

  /** See {@link beginVectorWrite}. */
  #beginVectors(target: number, wait = true): boolean {
    return this.#vectors !== null && beginVectorWrite(this.#vectors, this.#ctx.schema.embeddingDims, this.#catalog.version, target, wait);
  }

  /**
   * Writes the vectors' rows up to `target` from the items table, whatever this catalog has read:
   * what a thread waiting for another's catalog image does meanwhile (the two read at once).
   */
  #fillVectors(target: number): void {
    if (this.#vectors) this.#vectorsFilled += fillVectorRows(this.#vectors, this.#ctx.schema.embeddingDims, target);
  }

  /** Brings the vectors' rows up to `target` (at most this worker's catalog version) without a refresh. */
  #vectorsUpTo(target: number): void {
    if (this.#beginVectors(Math.min(target, this.#catalog.version))) this.#vectors!.store.unlock();
  }

  /**
   * The first sync's load of the catalog snapshot. Where the ANN index has nothing to catch up
   * from the table (no embeddings in the schema, or none in the items), it is put at the loaded
   * version, so the sync does not read the rows before it for the index.
   */
  #loadCatalog(): void {
    const share = this.#share;
    const { image: read, ...load } = loadCatalog(
      this.#dir,
      this.#ctx.schema,
      this.#catalog,
      this.#vectors,
      this.#maxVersion.get() as number,
      share !== null,
    );
    this.#loaded(load);
    this.#catalogSource = load.version > 0 ? 'snapshot' : 'rows';
    // What was read is posted as it is: the other threads read the same bytes, and none copies them.
    if (read && share && this.#catalog.presentCount >= share.minRows) {
      const image = share.publish(read, load.version, false);
      this.#imageGen = image.gen;
      this.#image = { gen: image.gen, bytes: read.byteLength };
    }
  }

  /** Records the first sync's load (from the snapshot file or a shared image). */
  #loaded(load: CatalogLoad): void {
    const schema = this.#ctx.schema;
    this.#catalogLoad = load;
    this.#catalogWarning = load.warning;
    if (load.version === 0) return;
    const noIndexYet = !this.#index && !this.#deferred && this.#annVersion === 0;
    if (schema.embeddingDims === 0 || (noIndexYet && !this.#embeddedAtLeast(1))) this.#annVersion = load.version;
  }

  #persistAnn(env: TaskEnvelope, budgetMs: number): Omit<PersistAnnResult, 'catalogSavedVersion'> {
    const deadline = performance.now() + budgetMs;
    const dims = this.#ctx.schema.embeddingDims;
    const current = this.#itemsVersion(env);
    const found = readSnapshot(this.#dir, dims, current, true);
    const snapshotVersion = found.kind === 'ok' ? found.meta.version : -1;
    if (found.kind === 'ok' && snapshotVersion >= current) return { savedVersion: null, reason: 'unchanged' };
    const own = this.#index;
    if (own && !own.layered && this.#annVersion > snapshotVersion && own.size > 0) {
      writeSnapshot(this.#dir, own, this.#annVersion);
      return { savedVersion: this.#annVersion, reason: 'saved' };
    }
    if (found.kind !== 'ok') return { savedVersion: null, reason: 'no-index' };
    // More rows than a warm adds is a build's work (a close cut one short and saved what it had):
    // left to the next open's build on its own thread, rather than started here and given up at
    // the budget.
    if ((this.#annPending.get(snapshotVersion) as number) > this.#backgroundRows) return { savedVersion: null, reason: 'budget' };
    const copy = { index: AnnIndex.load(dims, found.path) };
    const read = applyAnnRows(this.#annRows, copy, dims, snapshotVersion, current, 0, deadline);
    if (read < 0) return { savedVersion: null, reason: 'budget' };
    if (copy.index.size === 0) {
      discardSnapshot(this.#dir);
      return { savedVersion: null, reason: 'no-index' };
    }
    writeSnapshot(this.#dir, copy.index, current);
    return { savedVersion: current, reason: 'saved' };
  }

  /**
   * A first task that is not a warm: this worker replaces one that died, and no warm elected
   * anyone for it. It maps the saved snapshot when the rows after it are few enough for a warm to
   * apply; otherwise, when the index would take more than `backgroundRows` rows to build, it
   * searches exactly (deferred) until the next warm, rather than build a whole index in a query.
   */
  #firstTask(): void {
    this.#started = true;
    const dims = this.#ctx.schema.embeddingDims;
    if (dims === 0) return;
    const found = readSnapshot(this.#dir, dims, Number.MAX_SAFE_INTEGER, false);
    if (found.kind === 'ok' && (this.#annPending.get(found.meta.version) as number) <= this.#backgroundRows) {
      try {
        adoptSnapshot(this.#host, found.meta, found.path);
        this.#annOrigin = { annSource: 'snapshot', annSnapshotVersion: found.meta.version, annRowsApplied: 0 };
        return;
      } catch {
        // Not mappable: as without one.
      }
    }
    if (this.#embeddedAtLeast(this.#backgroundRows + 1)) this.#deferred = true;
  }

  /**
   * The catalog refresh, each changed row kept in the int8 vectors and, `withAnn`, applied to the
   * ANN index as it goes by (in bounded batches). A row's embedding is read only where one of them
   * takes it: a sync whose vectors another thread wrote already, and whose index is not fed by the
   * rows (deferred, or a snapshot caught up apart), reads none.
   */
  #refresh(withAnn: boolean, target: number): number {
    const dims = this.#ctx.schema.embeddingDims;
    const vectors = this.#vectors;
    // Rows at or below `from` are in the vectors already (written by this thread or another). While
    // another thread writes them, this refresh reads the catalog alone and waits for the rows after.
    const writing = !this.#leaveVectors && this.#beginVectors(target, false);
    const behind = !writing && vectors !== null && vectors.store.version < target;
    const from = writing ? vectors!.store.version : Number.POSITIVE_INFINITY;
    const holder = { index: this.#index };
    const ann = withAnn && dims > 0 ? new AnnBatch(holder, dims) : null;
    let rows: number;
    try {
      rows = this.#catalog.refresh(
        (row) => {
          if (row.version > from) feedVector(vectors!, dims, row.ordinal, row.present, row.embedding);
          else if (writing) vectors!.store.tick();
          ann?.row(row.ordinal, row.present, row.embedding);
        },
        ann ? 0 : from,
      );
      if (writing) vectors!.store.publish(this.#catalog.version);
    } finally {
      if (writing) vectors!.store.unlock();
      // The batches applied before a failure stay applied, as the catalog's rows do.
      this.#index = holder.index;
    }
    // The last batch (most syncs' only one) after the vectors' lock is released.
    ann?.flush();
    this.#index = holder.index;
    if (behind) this.#vectorsUpTo(this.#catalog.version);
    if (vectors) vectors.version = this.#catalog.version;
    this.#publish();
    return rows;
  }

  /**
   * The context's vector search: the ANN index; while it is built elsewhere, the exact search over
   * the int8 vectors (once any item has one); else none.
   */
  #publish(): void {
    const exact = this.#exact;
    this.#ctx.ann = this.#index ?? (this.#deferred && exact && exact.size > 0 ? exact : null);
    if (this.#ctx.ann !== exact) exact?.release();
  }

  /** Makes `ann` this worker's index (null: none). */
  #setIndex(ann: AnnIndex | null): void {
    this.#index = ann;
    this.#publish();
  }

  /** Applies rows `(from, to]` to this worker's index (created on the first embedding). */
  #applyAnnRows(from: number, to: number, threads: number | undefined, deadline: number): number {
    const holder = { index: this.#index };
    const read = applyAnnRows(this.#annRows, holder, this.#ctx.schema.embeddingDims, from, to, threads, deadline);
    this.#setIndex(holder.index);
    return read;
  }

  #itemsVersion(env: TaskEnvelope): number {
    return Math.max(env.itemsVersion, this.#maxVersion.get() as number);
  }
}
