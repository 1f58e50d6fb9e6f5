/**
 * The catalog image: one query thread's catalog (ids, presence, creation times, the metadata
 * columns, the newest-first order and the text index) written once into shared memory, so that the
 * other query threads of the process read the same arrays rather than each build its own from
 * every item row. Its layout is the catalog snapshot file's (catalog-snapshot.ts: prefix, JSON header,
 * sections) without a checksum and without the int8 vectors (shared already, shared/item-vectors.ts),
 * so a thread that loads the snapshot file posts what it read as the image, at the cost of one copy.
 *
 * An image is immutable once published. Who writes one: a query thread whose catalog holds many
 * rows of its own (its first full read, or more rows read since its image than {@link shareThreshold}
 * says), which then reads its image instead of its private arrays. How the others see it: each image
 * is a SharedArrayBuffer of its own, posted on the database's BroadcastChannel with a generation
 * number and the items version it reflects; a thread takes the newest at its next sync
 * ({@link CatalogShare.poll} reads the channel without waiting), keeps its rows after that version
 * in arrays of its own (copied on the first write, see Catalog.rebase), and drops the image it read
 * before, which is freed when no thread holds it any more. A thread that starts after an image was
 * posted asks for it ('hello'): the database's thread keeps the newest and answers, and the new
 * thread's first sync waits for that answer ({@link CatalogShare.awaitImage}).
 *
 * The build lock (a cell of the control buffer) keeps two threads that are both far behind, as at a
 * warm after a bulk load, from both reading every row: the second waits for the first's image. It
 * is a hint, not a guard: a thread that cannot take it within {@link LOCK_WAIT_MS} reads the rows
 * itself, so a thread that dies holding it costs a wait, never a wrong answer.
 */
import { BroadcastChannel, receiveMessageOnPort, threadId, type MessagePort } from 'node:worker_threads';
import type { Catalog, CatalogState } from '../catalog.js';
import { FORMAT, MAGIC, PREFIX, align, decode, encodeCatalog, type Header } from '../catalog-format.js';
import type { QuerySchema } from '../types.js';

/**
 * Rows below which a catalog is not worth an image (a tiny database is read by every thread as
 * before); the threshold of a rebase is also an eighth of the items ({@link shareThreshold}).
 */
export const SHARE_MIN_ROWS = 4096;
/** How long a thread far behind waits for another's image before it reads the rows itself. */
export const LOCK_WAIT_MS = 30_000;

/** What the database gives every query thread (part of `WorkerInit`). */
export interface CatalogShareInit {
  /** The BroadcastChannel's name: one per database, so two databases in a process never mix. */
  channel: string;
  /**
   * Int32 cells: the build lock (0 free, else the holder's thread id + 1), the last generation, one
   * to sleep on, whether the holder reads rows from the table.
   */
  control: SharedArrayBuffer;
  /** {@link SHARE_MIN_ROWS} unless a test says otherwise. */
  minRows: number;
  /** The query threads of the database (its pool's workers, acceptors included). */
  threads: number;
}

const LOCK = 0;
const GENERATION = 1;
/** Never written: what {@link CatalogShare.awaitImage} sleeps on. */
const SLEEP = 2;
/** 1 while the build lock's holder reads rows from the items table (not a snapshot): see {@link CatalogShare.lock}. */
const ROWS = 3;

export function createCatalogShare(channel: string, minRows: number, threads: number): CatalogShareInit {
  return { channel, control: new SharedArrayBuffer(16), minRows, threads };
}

/** A published image. */
export interface CatalogImage {
  /** Increasing per database: a thread takes an image newer than the one it reads. */
  gen: number;
  /** The items version the image reflects. */
  version: number;
  buffer: SharedArrayBuffer;
  /** Whether the thread that posted it found the snapshot file unusable (the next close rewrites it). */
  stale: boolean;
}

/** Rows of its own (read since its image) past which a thread publishes a new image. */
export function shareThreshold(minRows: number, items: number): number {
  return Math.max(minRows, Math.ceil(items / 8));
}

/** An image's checksum kind: none (shared memory, never read back from a disk). */
const NO_CHECKSUM = 0;

/**
 * A catalog image (shared/catalog-image.ts): the snapshot file's layout in a SharedArrayBuffer,
 * without the int8 vectors' sections and with no checksum. `body` holds the sections `header`
 * places (a file's body, or the pieces of {@link encodeCatalog} laid out by {@link writeCatalogImage}).
 */
export function imageOf(header: Header, body: Uint8Array): SharedArrayBuffer {
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

type Message = { op: 'hello' } | ({ op: 'image' } & CatalogImage);

/** A query thread's side of the sharing: the channel, the newest image seen, the build lock. */
export class CatalogShare {
  readonly minRows: number;
  readonly threads: number;
  readonly #channel: BroadcastChannel;
  readonly #control: Int32Array;
  #latest: CatalogImage | null = null;
  #locked = false;

  constructor(init: CatalogShareInit) {
    this.minRows = init.minRows;
    this.threads = init.threads;
    this.#control = new Int32Array(init.control);
    this.#channel = new BroadcastChannel(init.channel);
    // Read between tasks too, so an idle thread keeps only the newest image, not a queue of them.
    this.#channel.onmessage = (e: unknown) => this.#take((e as { data: Message }).data);
    (this.#channel as unknown as { unref(): void }).unref();
    this.#channel.postMessage({ op: 'hello' } satisfies Message);
  }

  #take(m: Message): void {
    if (m.op === 'hello') {
      if (this.#latest) this.#post(this.#latest);
      return;
    }
    if (!this.#latest || m.gen > this.#latest.gen) this.#latest = { gen: m.gen, version: m.version, buffer: m.buffer, stale: m.stale };
  }

  #post(image: CatalogImage): void {
    this.#channel.postMessage({ op: 'image', ...image } satisfies Message);
  }

  /** The newest image posted so far (the channel read without waiting), or null. */
  poll(): CatalogImage | null {
    for (;;) {
      const got = receiveMessageOnPort(this.#channel as unknown as MessagePort);
      if (!got) return this.#latest;
      this.#take(got.message as Message);
    }
  }

  /**
   * The newest image, for a thread's first sync: when one was ever posted (the generation counter
   * says so) and none has reached this thread yet, it waits up to `waitMs` for an answer to its
   * 'hello' (the database's thread keeps the newest and answers), then gives up: null.
   */
  awaitImage(waitMs = LOCK_WAIT_MS): CatalogImage | null {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const image = this.poll();
      if (image || Atomics.load(this.#control, GENERATION) === 0 || Date.now() >= deadline) return image;
      // Not a wait on a value: a short sleep between reads of the channel.
      Atomics.wait(this.#control, SLEEP, 0, 1);
    }
  }

  /** Posts `buffer` (of items version `version`) as the newest image. */
  publish(buffer: SharedArrayBuffer, version: number, stale: boolean): CatalogImage {
    const image = { gen: Atomics.add(this.#control, GENERATION, 1) + 1, version, buffer, stale };
    this.#latest = image;
    this.#post(image);
    return image;
  }

  /** Takes the build lock when it is free (or this thread's already): whether it did. Never waits. */
  tryLock(): boolean {
    const holder = Atomics.compareExchange(this.#control, LOCK, 0, threadId + 1);
    if (holder === 0) this.#locked = true;
    return holder === 0 || holder === threadId + 1;
  }

  /**
   * Takes the build lock, waiting up to `waitMs`; whether it is held (see the module comment).
   * `whileRowsRead` runs once, while waiting, if the holder says it reads rows from the items table
   * ({@link readingRows}): the work a waiting thread can do beside it.
   */
  lock(waitMs = LOCK_WAIT_MS, whileRowsRead?: () => void): boolean {
    const me = threadId + 1;
    const deadline = Date.now() + waitMs;
    let meanwhile = whileRowsRead;
    for (;;) {
      const holder = Atomics.compareExchange(this.#control, LOCK, 0, me);
      if (holder === 0) {
        this.#locked = true;
        return true;
      }
      // Held by this thread already (an outer sync): it stays the outer one's to release.
      if (holder === me) return true;
      if (meanwhile && Atomics.load(this.#control, ROWS) === 1) {
        const work = meanwhile;
        meanwhile = undefined;
        work();
        continue;
      }
      const left = deadline - Date.now();
      if (left <= 0) return false;
      // Woken by the release; and every 10 ms, to see whether the holder started reading rows.
      Atomics.wait(this.#control, LOCK, holder, Math.min(left, meanwhile ? 10 : 100));
    }
  }

  /** Says, as the build lock's holder, whether it is reading rows from the items table now. */
  readingRows(on: boolean): void {
    Atomics.store(this.#control, ROWS, on ? 1 : 0);
  }

  unlock(): void {
    if (!this.#locked) return;
    this.#locked = false;
    Atomics.store(this.#control, LOCK, 0);
    Atomics.notify(this.#control, LOCK);
  }

  close(): void {
    this.#channel.close();
  }
}
