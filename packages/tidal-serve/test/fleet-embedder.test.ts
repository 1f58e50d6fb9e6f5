/**
 * `tidal serve --embedder URL --embedder-max-concurrency N --pg URL` as a user runs it: semantic
 * search over HTTP runs hybrid through the embedder, and on the text alone with the reason once the
 * embedder is gone; the slots are held on the real PostgreSQL. A PostgreSQL that is down at start
 * does not stop it: the slots are held in process, with a warning, until the database answers.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddingServer, type EmbeddingServer } from '../../tidal-fleet/test/helpers/embedding-server.js';
import { freePort, servicesSkipped, startPostgres, type PostgresServer } from '../../tidal-fleet/test/helpers/services.js';
import { stopServer } from './fixtures/stop-server.js';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

function startServe(args: string[]): { child: ChildProcess; url: Promise<string>; stderr: () => string } {
  let stderr = '';
  const child = spawn(process.execPath, [CLI, 'serve', '--demo', '--demo-items', '300', '--port', '0', '--workers', '1', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  const url = new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString('utf8');
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`tidal serve exited (${code}):\n${stderr}`)));
  });
  return { child, url, stderr: () => stderr };
}

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
  }, 180_000);

  afterAll(async () => {
    if (child) await stopServer(child);
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
  }, 180_000);
});

describe.skipIf(servicesSkipped)('tidal serve --pg with the database down at start', () => {
  let postgres: PostgresServer | undefined;
  let embedder: EmbeddingServer;
  let serve: ReturnType<typeof startServe> | undefined;

  afterAll(async () => {
    if (serve) await stopServer(serve.child);
    await Promise.all([embedder?.close(), postgres?.stop()]);
  });

  it('starts, warns, runs hybrid on slots in process, and holds them on the database once it answers', async () => {
    embedder = await startEmbeddingServer({ dims: 128 });
    const port = await freePort();
    serve = startServe([
      '--embedder',
      embedder.url,
      '--embedder-max-concurrency',
      '2',
      '--pg',
      `postgres://postgres@127.0.0.1:${port}/postgres`,
    ]);
    const url = await serve.url;
    expect(serve.stderr()).toMatch(/TIDAL_SHARED_SLOTS_LOCAL/);
    const stats = async () =>
      ((await (await fetch(`${url}/stats`)).json()) as { fleet: { embedder: { slots: string; calls: number } } }).fleet.embedder;
    const search = async () => {
      const res = await fetch(`${url}/search`, { method: 'POST', body: JSON.stringify({ text: 'news', semantic: true }) });
      return { status: res.status, body: (await res.json()) as { mode?: string; semanticFallback?: string | null } };
    };
    expect(await stats()).toMatchObject({ slots: 'local' });
    expect(await search()).toMatchObject({ status: 200, body: { mode: 'hybrid', semanticFallback: null } });
    expect(await (await fetch(`${url}/metrics`)).text()).toMatch(/tidal_serve_embedder_slots\{backend="local"\} 1/);

    postgres = await startPostgres({ port });
    // The replica re-connects in the background (a doubling backoff, at most 5 s apart).
    for (let i = 0; i < 600 && (await stats()).slots !== 'postgres'; i++) await new Promise((r) => setTimeout(r, 100));
    expect(await stats()).toMatchObject({ slots: 'postgres' });
    expect(serve.stderr()).toMatch(/TIDAL_SHARED_SLOTS_RESTORED/);
    expect(await search()).toMatchObject({ status: 200, body: { mode: 'hybrid', semanticFallback: null } });
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/tidal_serve_embedder_slots\{backend="postgres"\} 1/);
    expect(metrics).toMatch(/tidal_serve_embedder_breaker\{state="closed"\} 1/);
  }, 120_000);
});
