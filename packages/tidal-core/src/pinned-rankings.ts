/**
 * The rankings cursor chains page through. A query asked to paginate ranks `depth` items at its
 * first page; the items after that page are kept here, and every later page of the chain is cut
 * from them, so the pages of one chain come from one ranking whatever is written between them.
 *
 * Kept for a bounded time and a bounded total size: an entry lives `ttlMs` after its last page,
 * and past `maxRankings` entries or `maxBytes` the least recently paged one goes first. Nothing is
 * written to disk: a reopened database keeps none. A cursor whose ranking is gone is refused with
 * {@link CursorExpiredError}, saying why; no page is ever ranked afresh for it.
 */
import { randomBytes } from 'node:crypto';
import { CursorExpiredError, InvalidInputError, type DegradationLevel } from 'tidal-load';
import type { LevelReason } from './level-choice.js';
import { estimateBytes } from './query-front.js';
import { checkWhole, isPlainObject, MAX_LIMIT } from './validate.js';

/** How long and how much the database keeps of cursor chains (the builder's `.cursors({...})`). */
export interface CursorOptions {
  /**
   * How long a chain's pinned ranking is kept after its last page was served, in milliseconds of
   * the database clock: a cursor used later is refused (`TIDAL_CURSOR_EXPIRED`, reason `expired`).
   * @default 600_000 (10 minutes)
   */
  ttlMs?: number;
  /**
   * Items a chain ranks at its first page, and so the most its pages return together (a first page
   * asking for more returns that page alone, with no cursor).
   * @default 200
   */
  depth?: number;
  /**
   * Pinned rankings kept at once; past it the least recently paged goes (reason `evicted`).
   * @default 10_000
   */
  maxRankings?: number;
  /**
   * Bytes the pinned rankings may hold together (estimated per item: its object, id and one signal
   * summary per kind, ≈ 800 bytes with 3 kinds); past it the least recently paged go (reason
   * `evicted`). A ranking larger than the whole bound keeps what fits of its head.
   * @default 67_108_864 (64 MiB)
   */
  maxBytes?: number;
}

export interface FilledCursorOptions {
  readonly ttlMs: number;
  readonly depth: number;
  readonly maxRankings: number;
  readonly maxBytes: number;
}

export const CURSOR_DEFAULTS = Object.freeze({
  // Long enough to read a page and scroll on (each page renews it), short enough that an
  // abandoned chain's memory returns within minutes.
  ttlMs: 600_000,
  // 10 pages of 20. The first page of a chain ranks and reads the signals of `depth` items where a
  // page alone reads `limit`: docs/BENCHMARKS.md ("cursor") measures what that costs.
  depth: 200,
  maxRankings: 10_000,
  // 200 items × ≈ 800 bytes ≈ 160 KB a chain: ≈ 420 chains scrolling at once within 64 MiB.
  maxBytes: 64 * 2 ** 20,
  maxTtlMs: 86_400_000,
  maxRankingsLimit: 2 ** 24,
});

/** Validates the cursor options (the one resolve step; `open()` refuses on a bad value). */
export function resolveCursorOptions(o: CursorOptions | undefined): FilledCursorOptions {
  if (o !== undefined && !isPlainObject(o)) throw new InvalidInputError('cursors', 'an object of cursor options', o);
  return {
    ttlMs: checkWhole('cursors.ttlMs', o?.ttlMs ?? CURSOR_DEFAULTS.ttlMs, 1, CURSOR_DEFAULTS.maxTtlMs),
    depth: checkWhole('cursors.depth', o?.depth ?? CURSOR_DEFAULTS.depth, 1, MAX_LIMIT),
    maxRankings: checkWhole('cursors.maxRankings', o?.maxRankings ?? CURSOR_DEFAULTS.maxRankings, 1, CURSOR_DEFAULTS.maxRankingsLimit),
    maxBytes: checkWhole('cursors.maxBytes', o?.maxBytes ?? CURSOR_DEFAULTS.maxBytes, 1, Number.MAX_SAFE_INTEGER),
  };
}

/** One row of a ranking, as the worker answered it (an item or a hit). */
export interface PinnedRow {
  readonly id: string;
  readonly signals: Record<string, unknown>;
}

/** What a chain's later pages are cut from: the first page's answer and the ranking after it. */
export interface PinnedRanking {
  /** The query's hash (a cursor names it too). */
  readonly query: string;
  /** The clock the ranking was made at. */
  readonly nowMs: number;
  readonly level: DegradationLevel;
  readonly reason: LevelReason;
  /** The first page's answer without its rows: warnings, explain, service time, mode. */
  readonly answer: object;
  /** The items after the first page, best first. */
  readonly rows: readonly PinnedRow[];
  /** Their ordinals, index for index. */
  readonly ordinals: Int32Array;
}

/** Where a cursor points: its chain's ranking, and when the page that returned it was served. */
export interface ChainRef {
  /** The store the ranking was kept in (one per open database). */
  readonly epoch: string;
  readonly id: number;
  readonly issuedAtMs: number;
}

/** The pinned rankings in `stats()`. */
export interface PinnedRankingStats {
  /** Rankings kept now. */
  pinned: number;
  /** Their estimated bytes. */
  bytes: number;
  /** Rankings dropped past their TTL, since open. */
  expired: number;
  /** Rankings dropped for the count or bytes bound, since open. */
  evicted: number;
}

interface Held {
  readonly ranking: PinnedRanking;
  readonly bytes: number;
  expiresAt: number;
}

/** The pinned rankings of one open database, least recently paged first. */
export class PinnedRankings {
  /** Names this store in cursors: one made before a reopen is told apart from an evicted one. */
  readonly epoch = randomBytes(9).toString('base64url');
  readonly options: FilledCursorOptions;
  readonly #held = new Map<number, Held>();
  #bytes = 0;
  #next = 1;
  #expired = 0;
  #evicted = 0;

  constructor(options: FilledCursorOptions) {
    this.options = options;
  }

  /** Keeps `ranking` (its head only, if it alone passes `maxBytes`); returns its id. */
  add(ranking: PinnedRanking, now: number): number {
    this.#sweep(now);
    let r = ranking;
    let bytes = estimateBytes(r.rows);
    const { maxBytes, maxRankings } = this.options;
    if (bytes > maxBytes) {
      const keep = Math.floor((r.rows.length * maxBytes) / bytes);
      r = { ...r, rows: r.rows.slice(0, keep), ordinals: r.ordinals.slice(0, keep) };
      bytes = estimateBytes(r.rows);
    }
    while (this.#held.size > 0 && (this.#held.size >= maxRankings || this.#bytes + bytes > maxBytes)) {
      this.#drop(this.#held.keys().next().value!);
      this.#evicted++;
    }
    const id = this.#next++;
    this.#held.set(id, { ranking: r, bytes, expiresAt: now + this.options.ttlMs });
    this.#bytes += bytes;
    return id;
  }

  /**
   * The ranking a cursor points at, its TTL renewed.
   * @throws CursorExpiredError when it is gone, saying why.
   */
  get(ref: ChainRef, now: number): PinnedRanking {
    const held = ref.epoch === this.epoch ? this.#held.get(ref.id) : undefined;
    if (held !== undefined && held.expiresAt > now) {
      // Moved to the back: the least recently paged ranking is always the first.
      this.#held.delete(ref.id);
      this.#held.set(ref.id, held);
      held.expiresAt = now + this.options.ttlMs;
      return held.ranking;
    }
    if (held !== undefined) {
      this.#drop(ref.id);
      this.#expired++;
    }
    throw this.#gone(ref, now);
  }

  #gone(ref: ChainRef, now: number): CursorExpiredError {
    const { ttlMs, maxRankings, maxBytes } = this.options;
    if (ref.epoch !== this.epoch) return new CursorExpiredError('reopened', 'was kept in memory by the database before it was last opened');
    // Each page served renews the ranking's TTL, so one not past the TTL of the page that issued
    // this cursor cannot have expired: the bound took it.
    if (now - ref.issuedAtMs >= ttlMs)
      return new CursorExpiredError('expired', `expired: it is kept ${ttlMs} ms after its last page (cursors.ttlMs)`);
    return new CursorExpiredError(
      'evicted',
      `was evicted to keep the pinned rankings within cursors.maxRankings (${maxRankings}) and cursors.maxBytes (${maxBytes})`,
    );
  }

  #drop(id: number): void {
    const held = this.#held.get(id);
    if (held === undefined) return;
    this.#held.delete(id);
    this.#bytes -= held.bytes;
  }

  /** Drops the rankings past their TTL from the front (the least recently paged). */
  #sweep(now: number): void {
    for (const [id, held] of this.#held) {
      if (held.expiresAt > now) break;
      this.#drop(id);
      this.#expired++;
    }
  }

  stats(now: number): PinnedRankingStats {
    this.#sweep(now);
    return { pinned: this.#held.size, bytes: this.#bytes, expired: this.#expired, evicted: this.#evicted };
  }
}
