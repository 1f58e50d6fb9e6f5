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
  describeValue,
} from './errors.js';
export type { ErrorCode } from './errors.js';
export { DegradationLevel, levelName, levelPlan, isDegradationLevel } from './levels.js';
export type { DegradationLevelName, LevelPlan } from './levels.js';
export { LoadDetector, InFlightGuard, DEFAULT_THRESHOLDS, resolveThresholds } from './detector.js';
export type { Thresholds, LoadDetectorOptions } from './detector.js';
