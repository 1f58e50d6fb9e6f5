/**
 * `tidal serve --redis URL --replicate`: two real servers, each with its own directory, against one
 * real redis-server. A write taken by one is served by the other once replication caught up, and
 * the lag shows in `/stats` and `/metrics`. Waits poll for a state with a generous bound.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseServeArgs } from '../src/config.js';
import { servicesSkipped, startRedis, type RedisServer } from '../../tidal-fleet/test/helpers/services.js';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000, windows: ['1h', 'all'] }], metadata: { creator: 'string' } };

interface Server {
  child: ChildProcess;
  url: string;
  stderr: string;
}

function startServer(dir: string, schema: string, redisUrl: string): Promise<Server> {
  const child = spawn(
    process.execPath,
    [CLI, 'serve', '--path', dir, '--schema', schema, '--port', '0', '--workers', '1', '--redis', redisUrl, '--replicate'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const server: Server = { child, url: '', stderr: '' };
  child.stderr.on('data', (d: Buffer) => (server.stderr += d.toString('utf8')));
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no "listening" line within 60 s:\n${server.stderr}`)), 60_000);
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString('utf8');
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m && server.url === '') {
        clearTimeout(timer);
        server.url = m[1]!;
        resolve(server);
      }
    });
    child.once('exit', (code) => reject(new Error(`tidal serve exited (${code}):\n${server.stderr}`)));
  });
}

interface Replication {
  replicaId: string;
  unpublished: number;
  origins: { origin: string; seq: number; lagMs: number }[];
  link: { connected: boolean };
}

async function replication(s: Server): Promise<Replication> {
  const res = await fetch(`${s.url}/stats`);
  return ((await res.json()) as { db: { replication: Replication } }).db.replication;
}

describe('tidal serve --replicate flags', () => {
  it('needs --redis, and refuses --demo', () => {
    expect(parseServeArgs(['--demo', '--redis', 'redis://127.0.0.1:1'])).toMatchObject({ replicate: false });
    expect(parseServeArgs(['--path', 'd', '--schema', 's', '--redis', 'redis://127.0.0.1:1', '--replicate'])).toMatchObject({
      replicate: true,
    });
    expect(() => parseServeArgs(['--path', 'd', '--schema', 's', '--replicate'])).toThrow(/^--replicate must be given with --redis/);
    expect(() => parseServeArgs(['--demo', '--redis', 'redis://127.0.0.1:1', '--replicate'])).toThrow(
      /^--replicate must be given without --demo/,
    );
  });
});

describe.skipIf(servicesSkipped)('two tidal serve --redis --replicate servers', () => {
  let redis: RedisServer;
  let root: string;
  let servers: Server[] = [];

  beforeAll(async () => {
    redis = await startRedis();
    root = mkdtempSync(join(tmpdir(), 'tidal-replicate-serve-'));
    const schema = join(root, 'schema.json');
    writeFileSync(schema, JSON.stringify(SCHEMA));
    servers = await Promise.all(['a', 'b'].map((name) => startServer(join(root, name), schema, redis.url)));
  });
  afterAll(async () => {
    for (const s of servers) s.child.kill('SIGKILL');
    await redis?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it('serves on one server what the other took, and shows the lag in /stats and /metrics', async () => {
    const [a, b] = servers as [Server, Server];
    const post = (s: Server, path: string, body: unknown) =>
      fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect((await post(a, '/items', { id: 'p', text: 'piano', metadata: { creator: 'ana' } })).status).toBe(200);
    expect(
      (
        await post(a, '/signals', [
          { item: 'p', kind: 'view' },
          { item: 'p', kind: 'view' },
        ])
      ).status,
    ).toBe(200);
    const idA = (await replication(a)).replicaId;
    let seen = 0;
    for (let i = 0; i < 600 && seen !== 2; i++) {
      const res = await fetch(`${b.url}/items/p/signals`);
      seen = res.status === 200 ? (((await res.json()) as { signals: { view?: { count: number } } }).signals.view?.count ?? 0) : 0;
      if (seen !== 2) await sleep(50);
    }
    expect(seen).toBe(2);
    expect(await (await fetch(`${b.url}/items/p`)).json()).toMatchObject({ id: 'p', text: 'piano' });
    const rb = await replication(b);
    expect(rb.link.connected).toBe(true);
    expect(rb.origins.map((o) => o.origin)).toEqual([idA]);
    expect((await replication(a)).unpublished).toBe(0);
    const metrics = await (await fetch(`${b.url}/metrics`)).text();
    expect(metrics).toMatch(new RegExp(`^tidal_replication_lag_ms\\{origin="${idA}"\\} \\d+`, 'm'));
    expect(metrics).toMatch(/^tidal_replication_unpublished 0$/m);
    // Caught up with A: nothing of it behind, no gap.
    expect(metrics).toMatch(new RegExp(`^tidal_replication_behind_batches\\{origin="${idA}"\\} 0$`, 'm'));
    expect(metrics).toMatch(new RegExp(`^tidal_replication_behind_ms\\{origin="${idA}"\\} 0$`, 'm'));
    expect(metrics).toMatch(/^tidal_replication_gaps 0$/m);
  });
});
