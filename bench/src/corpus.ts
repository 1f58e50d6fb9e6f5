import { tidalSchema as corpusSchema } from 'tidal-serve/demo';

// The synthetic corpus lives in tidal-serve/demo (`tidal serve --demo` loads it); the bench keeps importing it from here.
export {
  Corpus,
  CATEGORIES,
  VOCABULARY,
  SHARED_VOCABULARY,
  SIGNAL_KINDS,
  DEFAULT_NOW,
  tidalSchema,
  normalize,
  mixSeed,
  gaussian,
} from 'tidal-serve/demo';
export type { CorpusItem, CorpusOptions, CorpusSignal, SignalColumns, SignalKind } from 'tidal-serve/demo';

/**
 * The corpus schema for the personalization benches: both kinds move a user's preference (a like
 * six times as much as a view), and `creator` names the creator.
 */
export function personalizationSchema(dims: number) {
  const base = corpusSchema(dims);
  return {
    ...base,
    signals: [
      { ...base.signals[0], windows: [...base.signals[0].windows], preference: 0.05 },
      { ...base.signals[1], windows: [...base.signals[1].windows], preference: 0.3 },
    ],
    creatorField: 'creator',
  };
}
