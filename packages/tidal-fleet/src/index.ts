// The public surface of tidal-fleet: limits shared by every replica of a deployment, implementing
// the contracts tidal-load defines (RateSource, PeriodSource, SlotSource).
export { FleetRedis, HEARTBEAT_SCRIPT, RedisCommandTimeout } from './redis.js';
export type { FleetRedisOptions, RedisOutcome } from './redis.js';
export { Breaker, BREAKER_DEFAULTS } from './breaker.js';
export type { BreakerOptions, BreakerState } from './breaker.js';
export { RedisRateSource, TOKEN_BUCKET_SCRIPT, decodeTokenReply } from './redis-rate.js';
export type { RedisRateOptions, RedisRateStats } from './redis-rate.js';
export { RedisPeriodSource, PERIOD_SCRIPT, decodePeriodReply } from './redis-period.js';
export type { RedisPeriodOptions, RedisPeriodStats } from './redis-period.js';
export { SlotTimeoutError, PooledSessionError, UnexpectedReplyError, SLOT_CEILING } from 'tidal-load';
export { PostgresSlots, openSlotSource, checkSessionPinned, slotKey } from './pg-slots.js';
export type { PostgresSlotsOptions, QueryFn, QueryResultLike } from './pg-slots.js';
export { EmbedderClient, DEFAULT_MAX_IN_FLIGHT } from './embedder.js';
export type { EmbedderOptions, EmbedOptions, EmbedderStats, EmbedAttempt } from './embedder.js';
export { DependencyUnavailableError } from 'tidal-load';
export type { DependencyFailure } from 'tidal-load';
