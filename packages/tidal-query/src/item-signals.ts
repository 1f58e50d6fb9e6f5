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
