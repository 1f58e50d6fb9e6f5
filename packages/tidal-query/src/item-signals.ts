import { InternalError } from 'tidal-load';
import type { SignalKindSpec, SignalStore, SignalValues } from './signals/store.js';

/**
 * The signal values of one item, per kind that has state for it (a kind without a slot is left
 * out), each read in one consistent pass with the kind's declared windows and velocity. What a
 * query result reports per hit and what `TidalDb.itemSignals` returns; `coarse` is the
 * CoarseAggregates degradation (all-time counts for the windows).
 */
export function readItemSignals(
  store: SignalStore,
  schema: { readonly kinds: readonly SignalKindSpec[] },
  ordinal: number,
  nowMs: number,
  coarse: boolean,
): Record<string, SignalValues> {
  const out: Record<string, SignalValues> = {};
  const kinds = schema.kinds;
  for (let k = 0; k < kinds.length; k++) {
    const slot = store.slotOf(ordinal, k);
    if (slot < 0) continue;
    const spec = kinds[k]!;
    out[spec.name] = store.read(slot, nowMs, coarse, spec.windows, spec.velocity);
  }
  return out;
}

/**
 * How much older than its query a row's signals may be where the level reuses them
 * (`WindowsPlan.reuse`): the work sharing's default staleness at NoDiversity, whose answers may be
 * that old already. Only time moves them meanwhile (a decayed score, a window's edge); a signal
 * written to the item since is always counted.
 */
export const SIGNALS_REUSE_MS = 1000;

/** Items whose signals a thread keeps as JSON per store; past it the copies start over. */
export const SIGNALS_KEPT_ITEMS = 4096;

interface Kept {
  json: string;
  id: string;
  atMs: number;
  coarse: boolean;
  /** Per kind, the slot (−1: none) and its write sequence when the values were read. */
  readonly slots: number[];
  readonly seqs: number[];
}

/**
 * Each item's signals as JSON, as this thread last read them for an answer sent as JSON, reused by
 * the next such answer within {@link SIGNALS_REUSE_MS} while no write touched the item's slots.
 * Reading an item's signals into objects and formatting their numbers was most of a row's cost.
 * An item is kept from its second answer within about a second on: its first only marks it (a
 * second per ordinal, 2 bytes an item), so rows that do not come back soon, most of `related`'s and of
 * a search's, are read as without the copies (keeping every row cost `related` 20 % more CPU a
 * request, the copies promoted and dropped; a doorkeeper of 65 536 hashed cells, filled by
 * `related`'s 25 000 rows a second, still 10 %). One per store and thread (see {@link keptSignalsOf}).
 */
export class SignalsJson {
  readonly #rows = new Map<number, Kept>();
  #doorkeeper = new Uint16Array(1024);
  readonly #store: SignalStore;
  readonly #kinds: readonly SignalKindSpec[];
  /** Answers' rows whose signals were taken from a kept copy (`explain.signalsReused`). */
  reused = 0;

  constructor(store: SignalStore, kinds: readonly SignalKindSpec[]) {
    this.#store = store;
    this.#kinds = kinds;
  }

  /** Items kept. */
  get size(): number {
    return this.#rows.size;
  }

  /**
   * `JSON.stringify(readItemSignals(store, schema, o, t, coarse))` for a `t` from `nowMs −`
   * {@link SIGNALS_REUSE_MS} to `nowMs`, with every signal written to `o` before this call counted;
   * null for an item not kept and not seen in this second or the one before (the caller reads its
   * signals itself). `id` is the item's id (an ordinal given to another item reads afresh).
   */
  get(o: number, id: string, nowMs: number, coarse: boolean): string | null {
    const store = this.#store;
    const kinds = this.#kinds;
    const kept = this.#rows.get(o);
    if (kept !== undefined) {
      if (kept.id === id && kept.coarse === coarse && nowMs >= kept.atMs && nowMs - kept.atMs <= SIGNALS_REUSE_MS) {
        let same = true;
        for (let k = 0; k < kinds.length && same; k++) {
          const slot = store.slotOf(o, k);
          same = slot === kept.slots[k] && (slot < 0 || store.slotSeq(slot) === kept.seqs[k]);
        }
        if (same) {
          this.reused++;
          return kept.json;
        }
      }
    } else {
      if (o >= this.#doorkeeper.length) {
        const grown = new Uint16Array(Math.max(2 * this.#doorkeeper.length, o + 1));
        grown.set(this.#doorkeeper);
        this.#doorkeeper = grown;
      }
      const second = Math.floor(nowMs / 1000);
      const mark = (second % 0x7fff) + 1;
      const seen = this.#doorkeeper[o]!;
      if (seen !== mark && seen !== ((second + 0x7ffe) % 0x7fff) + 1) {
        this.#doorkeeper[o] = mark;
        return null;
      }
    }
    const row = kept ?? {
      json: '',
      id,
      atMs: 0,
      coarse,
      slots: new Array<number>(kinds.length).fill(-1),
      seqs: new Array<number>(kinds.length).fill(0),
    };
    // Each slot's sequence before its values: a write landing in between moves the sequence past
    // the one kept, so the next use reads again (kept after the values, it would vouch for stale ones).
    const out: Record<string, SignalValues> = {};
    let whole = true;
    for (let k = 0; k < kinds.length; k++) {
      const slot = store.slotOf(o, k);
      const seq = slot < 0 ? 0 : store.slotSeq(slot);
      row.slots[k] = slot;
      row.seqs[k] = seq;
      if ((seq & 1) !== 0) whole = false;
      if (slot < 0) continue;
      const spec = kinds[k]!;
      out[spec.name] = store.read(slot, nowMs, coarse, spec.windows, spec.velocity);
    }
    const json = JSON.stringify(out);
    if (!whole) {
      // A write was inside a slot: these values are right for now, not to keep.
      if (kept !== undefined) this.#rows.delete(o);
      return json;
    }
    row.json = json;
    row.id = id;
    row.atMs = nowMs;
    row.coarse = coarse;
    if (kept === undefined) {
      if (this.#rows.size >= SIGNALS_KEPT_ITEMS) this.#rows.clear();
      this.#rows.set(o, row);
    }
    return json;
  }
}

const perStore = new WeakMap<SignalStore, SignalsJson>();

/** This thread's {@link SignalsJson} for `store`. */
export function keptSignalsOf(store: SignalStore, kinds: readonly SignalKindSpec[]): SignalsJson {
  let kept = perStore.get(store);
  if (kept === undefined) {
    kept = new SignalsJson(store, kinds);
    perStore.set(store, kept);
  }
  return kept;
}

/**
 * What a row's `signals` holds while its JSON is in the answer's `signalsJson` (see
 * {@link spliceSignals}): a key no kind can have, so a row with no signals (`{}`) is told apart.
 */
export const SIGNALS_ELSEWHERE = Object.freeze({ '\u0000': 0 }) as unknown as Readonly<Record<string, SignalValues>>;

const PLACEHOLDER = JSON.stringify({ signals: SIGNALS_ELSEWHERE }).slice(1, -1);

/**
 * The JSON of rows, those whose `signals` are {@link SIGNALS_ELSEWHERE} given their signals JSON
 * from `signalsJson` in order. `rowsJson` is `JSON.stringify(rows)`: the placeholder's text occurs
 * once per such row (a kind's name cannot be its key, and inside a string value every quote is escaped).
 * @throws InternalError when the rows do not match the list.
 */
export function spliceSignals(rowsJson: string, signalsJson: readonly string[]): string {
  const parts = rowsJson.split(PLACEHOLDER);
  if (parts.length !== signalsJson.length + 1) {
    throw new InternalError(`${signalsJson.length} rows' signals for ${parts.length - 1} places in the answer's JSON`);
  }
  let out = parts[0]!;
  for (let i = 0; i < signalsJson.length; i++) out += `"signals":${signalsJson[i]!}${parts[i + 1]!}`;
  return out;
}
