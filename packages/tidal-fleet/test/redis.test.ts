import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TidalWarning } from 'tidal-load';
import { FleetRedis, RedisPeriodSource, RedisRateSource, UnexpectedReplyError, type FleetRedisOptions } from '../src/index.js';
import { PERIOD_SCRIPT, decodePeriodReply } from '../src/redis-period.js';
import { decodeTokenReply } from '../src/redis-rate.js';
import { servicesSkipped, startRedis, type RedisServer } from './helpers/services.js';

describe.skipIf(servicesSkipped)('on a real redis-server', () => {
  let redis: RedisServer;
  const open: FleetRedis[] = [];

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await Promise.all(open.map((c) => c.close()));
    await redis?.stop();
  });

  /** A connected FleetRedis with its heartbeat driven by the test (interval 0). */
  async function connect(options: FleetRedisOptions = {}): Promise<FleetRedis> {
    const fleet = FleetRedis.connect(redis.url, { heartbeatIntervalMs: 0, commandTimeoutMs: 500, ...options });
    open.push(fleet);
    for (const end = Date.now() + 30_000; !fleet.ready && Date.now() < end;) await new Promise((r) => setTimeout(r, 10));
    expect(fleet.ready).toBe(true);
    return fleet;
  }

  async function raw(): Promise<ReturnType<typeof createClient>> {
    const client = createClient({ url: redis.url });
    client.on('error', () => {});
    await client.connect();
    return client;
  }

  describe('RedisRateSource', () => {
    it('is one bucket for every replica, decided on the server clock, with a TTL on its key', async () => {
      const [a, b] = [await connect({ prefix: 't1:' }), await connect({ prefix: 't1:' })];
      const limitA = new RedisRateSource(a, { ratePerSecond: 0.001, burst: 5 });
      const limitB = new RedisRateSource(b, { ratePerSecond: 0.001, burst: 5 });
      const decisions = [];
      // The replicas pass clocks a day apart: a shared bucket must not care.
      for (let i = 0; i < 4; i++) decisions.push(await limitA.take('user-1', 1, 0), await limitB.take('user-1', 1, 86_400_000));
      expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, true, false, false, false]);
      expect(decisions.every((d) => d.backend === 'redis')).toBe(true);
      expect(decisions[4]).toMatchObject({ remaining: 0, retryAfterMs: 0 });
      expect(decisions[5]!.retryAfterMs, 'one token at 0.001/s is 1000 s away').toBeGreaterThan(990_000);
      const client = await raw();
      const ttl = await client.pTTL('t1:rate:user-1');
      expect(ttl).toBeGreaterThan(0);
      client.destroy();
    });

    it('takes n tokens all or none', async () => {
      const limit = new RedisRateSource(await connect({ prefix: 't2:' }), { ratePerSecond: 0.001, burst: 5 });
      expect(await limit.take('k', 3, 0)).toEqual({ backend: 'redis', allowed: true, retryAfterMs: 0, remaining: 2 });
      const refused = await limit.take('k', 3, 0);
      expect([refused.allowed, refused.remaining]).toEqual([false, 2]);
      expect(await limit.take('k', 2, 0)).toMatchObject({ allowed: true, remaining: 0 });
    });

    it('takes up to n tokens: what the bucket holds, at least one', async () => {
      const limit = new RedisRateSource(await connect({ prefix: 't2p:' }), { ratePerSecond: 0.001, burst: 5 });
      expect(await limit.takeUpTo('k', 3, 0)).toEqual({ backend: 'redis', granted: 3, retryAfterMs: 0, remaining: 2 });
      expect(await limit.takeUpTo('k', 3, 0)).toEqual({ backend: 'redis', granted: 2, retryAfterMs: 0, remaining: 0 });
      const refused = await limit.takeUpTo('k', 3, 0);
      expect(refused).toMatchObject({ granted: 0, remaining: 0 });
      expect(refused.retryAfterMs, 'all 3 at 0.001/s are 3000 s away').toBeGreaterThan(2_990_000);
    });

    it('gives each replica asking a short bucket its share of it, not whoever asks first', async () => {
      // The clock is frozen (0.001 tokens/s): what each replica may take is its share of the burst.
      const [a, b, c] = await Promise.all(
        ['a', 'b', 'c'].map(
          async (id) =>
            new RedisRateSource(await connect({ prefix: 't2f:', replicaId: id, commandTimeoutMs: 10_000 }), {
              ratePerSecond: 0.001,
              burst: 12,
            }),
        ),
      );
      // A long command timeout: a decision made on the local fallback (a loaded machine) would not
      // register its replica with the shared bucket, and the shares below would be of fewer replicas.
      // Every decision is the shared bucket's; a failure names the step and shows the bucket then.
      const client = await raw();
      const steps: string[] = [];
      const take = async (r: RedisRateSource, name: string, n: number) => {
        const grant = await r.takeUpTo('k', n, 0);
        steps.push(`${name} asked ${n}: ${JSON.stringify(grant)}, bucket ${JSON.stringify(await client.hGetAll('t2f:rate:k'))}`);
        expect(grant.backend, steps.join('\n')).toBe('redis');
        return grant;
      };
      for (const [r, name] of [
        [a!, 'a'],
        [b!, 'b'],
        [c!, 'c'],
      ] as const)
        expect((await take(r, name, 1)).granted).toBe(1);
      // 9 left, more than half the burst: nobody is short, so A takes a whole batch beyond its share.
      expect((await take(a!, 'a', 5)).granted, steps.join('\n')).toBe(5);
      // 4 left: short. A already took more than its third of the 12; it gets nothing more...
      expect((await take(a!, 'a', 4)).granted, steps.join('\n')).toBe(0);
      // ...and what is left goes to B and C, at most a third of the burst each.
      expect((await take(b!, 'b', 5)).granted, steps.join('\n')).toBe(4);
      expect(await take(c!, 'c', 5), steps.join('\n')).toMatchObject({ granted: 0, remaining: 0 });
      // The bucket keeps, per replica, when it last asked and what it is owed.
      expect(Object.keys(await client.hGetAll('t2f:rate:k')).sort()).toEqual(['a:a', 'a:b', 'a:c', 'mt', 'ts', 'v:a', 'v:b', 'v:c']);
      client.destroy();
    });

    it('does not wait on a Redis that does not answer: the command timeout sends the decision to the local bucket', async () => {
      // A timeout a loaded machine's round trip stays well within, and the pause below well outlasts.
      const fleet = await connect({ prefix: 't3:', commandTimeoutMs: 500, breaker: { failureThreshold: 1, openMs: 60_000 } });
      const warnings: TidalWarning[] = [];
      const limit = new RedisRateSource(fleet, { ratePerSecond: 100, burst: 10, onWarning: (w) => warnings.push(w) });
      expect((await limit.take('k', 1, 0)).backend).toBe('redis');
      const [blocker, watcher] = [await raw(), await raw()];
      let slept = false;
      // The server stops answering anyone else for 3 s: paused once the reply is read. A PING sent
      // after it is answered when the pause ends.
      await blocker.sendCommand(['CLIENT', 'PAUSE', '3000', 'ALL']);
      const sleeping = watcher.ping().then(() => (slept = true));
      const decision = await limit.take('k', 1, 1);
      expect(slept, 'the decision came while Redis was still asleep').toBe(false);
      expect(decision.backend).toBe('local');
      expect(warnings.map((w) => w.code)).toEqual(['TIDAL_SHARED_LIMIT_LOCAL']);
      // The breaker is open now: the next decisions do not even try.
      expect(fleet.breaker.state).toBe('open');
      expect((await limit.take('k', 1, 2)).backend).toBe('local');
      await sleeping;
      blocker.destroy();
      watcher.destroy();
      // Once the breaker's open time has passed on the caller's clock, one probe finds Redis again.
      expect((await limit.take('k', 1, 60_002)).backend).toBe('redis');
      expect(warnings.map((w) => w.code)).toEqual(['TIDAL_SHARED_LIMIT_LOCAL', 'TIDAL_SHARED_LIMIT_RESTORED']);
      expect(limit.stats()).toMatchObject({ fallbacks: 1, localDecisions: 2, redisDecisions: 2 });
    });

    it('reads a reply that arrived while the event loop was busy before it counts the command as timed out', async () => {
      const fleet = await connect({ prefix: 't3b:', commandTimeoutMs: 20, breaker: { failureThreshold: 100, openMs: 60_000 } });
      const limit = new RedisRateSource(fleet, { ratePerSecond: 100, burst: 10, onWarning: () => {} });
      // A first answer within the 20 ms: on a loaded machine it may take a few tries (the breaker stays closed).
      let first = await limit.take('k', 1, 0);
      for (let i = 0; i < 100 && first.backend !== 'redis'; i++) first = await limit.take('k', 1, 0);
      expect(first.backend).toBe('redis');
      // Each time the command is written, then the event loop is held past the timeout while the
      // reply lands: when the loop resumes the timer is overdue, and the reply is waiting to be read.
      // Counting the timer first, every try is a timeout; reading first, a try is one only when the
      // server itself (another process on a loaded machine) took longer than the hold to answer.
      const backends: string[] = [];
      for (let i = 0; i < 3 && !backends.includes('redis'); i++) {
        const decision = limit.take('k', 1, 0);
        // node-redis writes in a setImmediate queued before this one: after it, the command is sent.
        await new Promise((r) => setImmediate(r));
        const until = performance.now() + 500;
        while (performance.now() < until);
        backends.push((await decision).backend);
      }
      expect(backends, 'the reply was there when the timer fired').toContain('redis');
    });

    it('cut off from Redis, limits at the fleet quota ÷ the replicas last seen alive, and rejoins when Redis returns', async () => {
      const replicas = [await connect({ prefix: 't4:' }), await connect({ prefix: 't4:' }), await connect({ prefix: 't4:' })];
      for (const r of replicas) await r.beat();
      expect(await replicas[0]!.beat()).toBe(3);
      const warnings: TidalWarning[] = [];
      const limit = new RedisRateSource(replicas[0]!, { ratePerSecond: 30, burst: 9, onWarning: (w) => warnings.push(w) });
      expect((await limit.take('k', 1, 0)).backend).toBe('redis');
      await redis.kill();
      const decisions = [];
      for (let i = 0; i < 5; i++) decisions.push(await limit.take('k', 1, 1_000));
      expect(decisions.map((d) => d.backend)).toEqual(['local', 'local', 'local', 'local', 'local']);
      // A token every 1000 / (30 / 3) = 100 ms, from empty: what the local bucket gathered while
      // the shared one decided was the shared bucket's to give.
      expect(decisions.map((d) => d.allowed)).toEqual([false, false, false, false, false]);
      expect(decisions[0]!.retryAfterMs).toBe(100);
      const later = [];
      for (let i = 0; i < 4; i++) later.push(await limit.take('k', 1, 1_300));
      expect(
        later.map((d) => d.allowed),
        'then a third of the rate, up to a third of the burst (3)',
      ).toEqual([true, true, true, false]);
      expect(limit.stats()).toMatchObject({ localRatePerSecond: 10, replicasLastSeen: 3 });
      expect(warnings[0]!.message).toMatch(/10 tokens\/s, the fleet's 30 ÷ 3 replicas/);
      await redis.restart();
      let back = await limit.take('k', 1, 1_400);
      for (let i = 0; i < 300 && back.backend !== 'redis'; i++) {
        await new Promise((r) => setTimeout(r, 10));
        back = await limit.take('k', 1, 1_400 + 10_000 * (i + 1));
      }
      expect(back.backend, 'decisions are shared again once Redis answers').toBe('redis');
      expect(warnings.map((w) => w.code)).toEqual(['TIDAL_SHARED_LIMIT_LOCAL', 'TIDAL_SHARED_LIMIT_RESTORED']);
    });

    it('raises on a reply the script cannot give', () => {
      expect(decodeTokenReply([1, 0, 4], 1, 1)).toEqual({ backend: 'redis', granted: 1, retryAfterMs: 0, remaining: 4 });
      expect(decodeTokenReply([2, 0, 0], 3, 1)).toEqual({ backend: 'redis', granted: 2, retryAfterMs: 0, remaining: 0 });
      for (const bad of [[2, 0, 0], [1, 5, 0], [0, 0, 0], 'OK', null, [1, 0], [1.5, 0, 0]])
        expect(() => decodeTokenReply(bad, 1, 1)).toThrow(UnexpectedReplyError);
      expect(() => decodeTokenReply([2, 0, 0], 3, 3), 'all or none: 2 of 3 is not an answer').toThrow(UnexpectedReplyError);
    });
  });

  describe('RedisPeriodSource', () => {
    it('the shipped script: INCRBY, the period as expiry on first sight, 1 below, 2 at, 0 past the quota', async () => {
      const client = await raw();
      const replies = [];
      for (let i = 0; i < 4; i++) replies.push(await client.eval(PERIOD_SCRIPT, { keys: ['w:raw'], arguments: ['1', '3', '60000'] }));
      expect(replies).toEqual([1, 1, 2, 0]);
      const ttl = await client.pTTL('w:raw');
      expect(ttl).toBeGreaterThan(50_000);
      expect(ttl).toBeLessThanOrEqual(60_000);
      // A key found without an expiry gets one: no window outlives its period.
      await client.set('w:bare', '1');
      await client.eval(PERIOD_SCRIPT, { keys: ['w:bare'], arguments: ['1', '3', '60000'] });
      expect(await client.pTTL('w:bare')).toBeGreaterThan(0);
      client.destroy();
    });

    it('is one window for every replica, with three outcomes', async () => {
      const a = new RedisPeriodSource(await connect({ prefix: 'p1:' }), { periodMs: 60_000, quota: 3 });
      const b = new RedisPeriodSource(await connect({ prefix: 'p1:' }), { periodMs: 60_000, quota: 3 });
      const out = [await a.take('k', 1, 0), await b.take('k', 1, 0), await a.take('k', 1, 0), await b.take('k', 1, 0)];
      expect(out).toEqual([
        { backend: 'redis', outcome: 'allowed' },
        { backend: 'redis', outcome: 'allowed' },
        { backend: 'redis', outcome: 'hitQuota' },
        { backend: 'redis', outcome: 'overQuota' },
      ]);
    });

    it('raises on a reply the script cannot give', async () => {
      expect(() => decodePeriodReply(7)).toThrow(UnexpectedReplyError);
      expect(() => decodePeriodReply('1')).toThrow(/answered "1" \(string of length 1\), which it cannot return \(1, 2 or 0\)/);
      const fleet = await connect({ prefix: 'p2:' });
      const client = await raw();
      await client.set('p2:period:k', 'not a number');
      client.destroy();
      const limit = new RedisPeriodSource(fleet, { periodMs: 60_000, quota: 3 });
      await expect(limit.take('k', 1, 0)).rejects.toSatisfy((e: unknown) => UnexpectedReplyError.is(e));
    });

    it('admits unchecked when Redis is down, with one warning per outage and a count', async () => {
      const fleet = await connect({ prefix: 'p3:' });
      const warnings: TidalWarning[] = [];
      const limit = new RedisPeriodSource(fleet, { periodMs: 60_000, quota: 1, onWarning: (w) => warnings.push(w) });
      expect(await limit.take('k', 1, 0)).toEqual({ backend: 'redis', outcome: 'hitQuota' });
      await redis.kill();
      const down = [await limit.take('k', 1, 0), await limit.take('k', 1, 0), await limit.take('k', 1, 0)];
      expect(down).toEqual(Array(3).fill({ backend: 'none', outcome: 'allowed' }));
      expect(warnings.map((w) => w.code)).toEqual(['TIDAL_SHARED_LIMIT_OPEN']);
      expect(limit.stats()).toEqual({ redisDecisions: 1, failedOpen: 3 });
      await redis.restart();
    });
  });
});
