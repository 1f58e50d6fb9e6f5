// The synthetic corpus lives in tidal-serve (`tidal serve --demo` loads it); the bench keeps importing it from here.
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
} from 'tidal-serve';
export type { CorpusItem, CorpusOptions, CorpusSignal, SignalColumns, SignalKind } from 'tidal-serve';
