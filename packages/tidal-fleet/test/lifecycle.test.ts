import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { servicesSkipped, startPostgres, startRedis, type PostgresServer, type RedisServer } from './helpers/services.js';

const fixture = fileURLToPath(new URL('./fixtures/open-close.mjs', import.meta.url));

describe.skipIf(servicesSkipped)('close()', () => {
  let redis: RedisServer;
  let postgres: PostgresServer;
  beforeAll(async () => {
    [redis, postgres] = await Promise.all([startRedis(), startPostgres()]);
  });
  afterAll(async () => {
    await Promise.all([redis?.stop(), postgres?.stop()]);
  });

  it('leaves nothing that keeps the process alive: it exits by itself, twice-closed', async () => {
    const child = spawn(process.execPath, [fixture, redis.url, postgres.url], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    const [code, signal] = await new Promise<[number | null, string | null]>((resolve) => child.once('exit', (c, s) => resolve([c, s])));
    clearTimeout(timer);
    expect(out).toBe('closed, the waiter got TIDAL_CLOSED\n');
    expect(signal, 'it had to be killed: something kept it alive after close()').toBeNull();
    expect(code).toBe(0);
  });
});
