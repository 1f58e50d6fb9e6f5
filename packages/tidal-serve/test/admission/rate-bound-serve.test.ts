/**
 * The rate bound through the HTTP server: queries held to the bound are answered, the one past it
 * is refused before its body is read, with the in-flight stage's code and a Retry-After.
 */
import { describe, expect, it, onTestFinished } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { startServer, type ServeDb } from 'tidal-serve';

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((res) => (resolve = res));
  return { promise, resolve };
}

describe('the rate bound over HTTP', () => {
  it('refuses the query past the bound at once with TIDAL_SERVE_INFLIGHT and Retry-After, and admits again once one ends', async () => {
    const release = deferred();
    let entered = 0;
    const arrived: (() => void)[] = [];
    const db = {
      stats: () => ({ inFlight: 0, level: 'Full' }),
      load: { level: 0, inFlight: 0 },
      closed: false,
      retrieve: async () => {
        entered++;
        arrived.shift()?.();
        await release.promise;
        throw new InvalidInputError('profile', 'a profile', 'x');
      },
    } as unknown as ServeDb;
    const server = await startServer({
      db,
      port: 0,
      host: '127.0.0.1',
      // No rate measured yet: the bound is its floor, 2 queries.
      admission: {
        inFlightCap: 50,
        rateBound: { targetWaitMs: 100, floor: 2 },
        adaptive: false,
        tenants: false,
        permits: {},
        period: false,
      },
    });
    onTestFinished(() => server.close({ drainMs: 0 }));
    const post = () =>
      fetch(`${server.url}/retrieve`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"profile":"x"}' });
    const bothIn = Promise.all([new Promise<void>((r) => arrived.push(r)), new Promise<void>((r) => arrived.push(r))]);
    const held = [post(), post()];
    await bothIn;
    const refused = await post();
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).not.toBeNull();
    expect(Number(refused.headers.get('x-retry-after-ms'))).toBeGreaterThanOrEqual(1);
    expect(await refused.json()).toMatchObject({ code: 'TIDAL_SERVE_INFLIGHT', reason: 'inflight' });
    expect(entered).toBe(2);
    expect(server.chain!.stats()[0]).toMatchObject({ name: 'inflight', rejected: 1, rateBound: { limit: 2, inFlight: 2 } });
    release.resolve();
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([400, 400]);
    expect((await post()).status).toBe(400);
  });
});
