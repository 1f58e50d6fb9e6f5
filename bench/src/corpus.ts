// The synthetic corpus lives in tidal-serve (its `--demo` loads it); the bench keeps importing it from here.
export * from 'tidal-serve/demo';
