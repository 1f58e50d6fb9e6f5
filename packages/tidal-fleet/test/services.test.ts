import { existsSync } from 'node:fs';
import { Socket } from 'node:net';
import pg from 'pg';
import { createClient } from 'redis';
import { describe, expect, it } from 'vitest';
import { servicesSkipped, startPostgres, startRedis } from './helpers/services.js';

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    socket.once('error', () => resolve(false));
    socket.connect(port, '127.0.0.1', () => {
      socket.destroy();
      resolve(true);
    });
  });
}

describe.skipIf(servicesSkipped)('test services', () => {
  it('start a redis-server on a loopback port of their own, restart it, and leave nothing after stop', async () => {
    const redis = await startRedis();
    const client = createClient({ url: redis.url });
    client.on('error', () => {});
    await client.connect();
    expect(await client.ping()).toBe('PONG');
    await client.set('k', 'v');
    await redis.kill();
    expect(await listening(redis.port)).toBe(false);
    await redis.restart();
    const again = createClient({ url: redis.url });
    again.on('error', () => {});
    await again.connect();
    expect(await again.get('k'), 'a restarted server starts empty').toBeNull();
    await again.quit();
    client.destroy();
    await redis.stop();
    expect(await listening(redis.port)).toBe(false);
  });

  it('never hand out a redis-server that is not their own: a port another one holds is refused', async () => {
    const first = await startRedis();
    // A second server on the first one's port cannot bind; the first still answers PING there, and
    // a test handed that port would share (and see the restarts of) another file's server.
    await expect(startRedis({ port: first.port })).rejects.toThrow(/before it was ready|not ours/);
    const client = createClient({ url: first.url });
    client.on('error', () => {});
    await client.connect();
    expect(await client.ping(), 'the first server is untouched').toBe('PONG');
    client.destroy();
    await first.stop();
  });

  it('start a throw-away PostgreSQL cluster, and remove it after stop', async () => {
    const server = await startPostgres();
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    const { rows } = await client.query<{ addr: string | null; superuser: string }>(
      "SELECT inet_server_addr()::text AS addr, current_setting('is_superuser') AS superuser",
    );
    expect(rows[0]!.addr).toBe('127.0.0.1/32');
    const dir = (await client.query<{ d: string }>("SELECT current_setting('data_directory') AS d")).rows[0]!.d;
    expect(existsSync(dir)).toBe(true);
    await client.end();
    await server.stop();
    expect(await listening(server.port)).toBe(false);
    expect(existsSync(dir), 'the cluster directory is removed').toBe(false);
  });
});
