// The public surface of tidal-fleet: limits shared by every replica of a deployment, implementing
// the contracts tidal-load defines (RateSource, PeriodSource, SlotSource), and the embedder client.
export { FleetRedis } from './redis.js';
export type { FleetRedisOptions } from './redis.js';
export { RedisRateSource } from './redis-rate.js';
export type { RedisRateOptions, RedisRateStats, RateGrant } from './redis-rate.js';
export { RedisPeriodSource } from './redis-period.js';
export type { RedisPeriodOptions, RedisPeriodStats } from './redis-period.js';
export { PostgresSlots } from './pg-slots.js';
export { SharedSlots, openSlotSource } from './shared-slots.js';
export type { SharedSlotsOptions, SharedSlotsStats } from './shared-slots.js';
export type { PostgresSlotsOptions } from './pg-slots.js';
export { EmbedderClient, DEFAULT_MAX_IN_FLIGHT, EMBEDDER_BREAKER_DEFAULTS } from './embedder.js';
export type { EmbedderOptions, EmbedderBreakerOptions, EmbedOptions, EmbedderStats } from './embedder.js';
// The errors these throw, and the bound of a slot limit (docs/errors.md).
export { SlotTimeoutError, PooledSessionError, UnexpectedReplyError, DependencyUnavailableError, SLOT_CEILING } from 'tidal-load';
export { RedisStreamReplication } from './replication/redis-stream.js';
export type { RedisStreamReplicationOptions } from './replication/redis-stream.js';
