/**
 * `tidal serve --embedder URL --embedder-max-concurrency N --pg URL` as a user runs it: semantic
 * search over HTTP runs hybrid through the embedder, and on the text alone with the reason once the
 * embedder is gone; the slots are held on the real PostgreSQL.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddingServer, type EmbeddingServer } from '../../tidal-fleet/test/helpers/embedding-server.js';
import { servicesSkipped, startPostgres, type PostgresServer } from '../../tidal-fleet/test/helpers/services.js';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

describe.skipIf(servicesSkipped)('tidal serve --embedder', () => {
  let postgres: PostgresServer;
  let embedder: EmbeddingServer;
  let child: ChildProcess;
  let url = '';
  let stderr = '';

  beforeAll(async () => {
    [postgres, embedder] = await Promise.all([startPostgres(), startEmbeddingServer({ dims: 128 })]);
    child = spawn(
      process.execPath,
      [
        CLI,
        'serve',
        '--demo',
        '--demo-items',
        '300',
        '--port',
        '0',
        '--workers',
        '1',
        '--embedder',
        embedder.url,
        '--embedder-max-concurrency',
        '2',
        '--pg',
        postgres.url,
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString('utf8');
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m) resolve(m[1]!);
      });
      child.once('exit', (code) => reject(new Error(`tidal serve exited (${code}):\n${stderr}`)));
    });
  }, 60_000);

  afterAll(async () => {
    child?.kill('SIGKILL');
    await Promise.all([embedder?.close(), postgres?.stop()]);
  });

  const search = async (body: object) => {
    const res = await fetch(`${url}/search`, { method: 'POST', body: JSON.stringify(body) });
    return {
      status: res.status,
      body: (await res.json()) as { mode?: string; semanticFallback?: string | null; code?: string; field?: string },
    };
  };

  it('runs hybrid through the embedder, then on the text alone with the reason once it is gone', async () => {
    const ok = await search({ text: 'news', semantic: true });
    expect(ok).toMatchObject({ status: 200, body: { mode: 'hybrid', semanticFallback: null } });
    expect(embedder.requests).toBeGreaterThan(0);
    const stats = (await (await fetch(`${url}/stats`)).json()) as { fleet: { embedder: { calls: number; slots: string } } };
    expect(stats.fleet.embedder).toMatchObject({ slots: 'postgres', calls: 1 });
    const bad = await search({ text: 'news', semantic: 'yes' });
    expect(bad.status).toBe(400);
    await embedder.close();
    const down = await search({ text: 'news', semantic: true, timeoutMs: 2_000 });
    expect(down).toMatchObject({ status: 200, body: { mode: 'text', semanticFallback: 'embedder_failed' } });
  }, 30_000);
});
