export { TidalDb, TidalDbBuilder } from './db.js';
export { DEFAULTS, autoAdmissionLimit } from './options.js';
export type { QueryStats, LatencySummary } from './stats.js';
export type { TidalOptions, CapacityOptions } from './options.js';
export type { SchemaDefinition, SignalKindDefinition } from './schema.js';
export { MAX_ID_LENGTH, MAX_TEXT_LENGTH, MAX_LIMIT, MAX_BATCH, MAX_METADATA_BYTES } from './validate.js';
export type {
  Item,
  ItemInput,
  SignalInput,
  RetrieveRequest,
  RetrieveResults,
  SearchRequest,
  SearchResults,
} from './types.js';
export {
  TidalError,
  InvalidInputError,
  ClosedError,
  CapacityError,
  InternalError,
  OverloadedError,
  BackpressureError,
  MemoryPressureError,
  RateLimitedError,
  SessionClosedError,
  ERROR_CODES,
  DegradationLevel,
  levelName,
  levelPlan,
  LoadDetector,
  InFlightGuard,
  DEFAULT_THRESHOLDS,
} from 'tidal-load';
export type { ErrorCode, DegradationLevelName, LevelPlan, Thresholds } from 'tidal-load';
export type {
  Diversity,
  Explain,
  Filter,
  FieldCondition,
  RangeCondition,
  Profile,
  RetrievedItem,
  SearchHit,
  SignalValues,
  WindowName,
  VelocityWindow,
} from 'tidal-query';
export type { Durability, GroupCommitOptions } from 'tidal-wal';
