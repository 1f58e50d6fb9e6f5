/**
 * The `tidal` command as a user runs it: a child process of the built CLI. Bad flags refuse to
 * start with one line and exit code 2; SIGTERM under load drains, closes the database and exits 0,
 * and the data directory opens again with every acknowledged write in it.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { getPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { describe, expect, it, onTestFinished } from 'vitest';
import { TidalDb } from 'tidal-core';
import { stopServer } from './fixtures/stop-server.js';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000, velocity: true }], metadata: { category: 'string' as const } };

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-serve-cli-'));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function run(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('tidal serve flags', () => {
  it.each([
    [['serve', '--demo', '--port', 'abc'], /^tidal serve: --port must be a whole number from 0 to 65535, got "abc"/],
    [['serve', '--demo', '--in-flight-cap', '2.5'], /^tidal serve: --in-flight-cap must be a whole number/],
    [['serve', '--demo', '--worker-nice', '25'], /^tidal serve: --worker-nice must be a whole number from 0 to 19, got "25"/],
    [['serve', '--demo', '--bogus'], /^tidal serve: flag must be one that tidal serve --help lists, got "--bogus"/],
    [['serve', '--demo', '--host', '0.0.0.0'], /^tidal serve: --keys is required when --host is not a loopback address \(got 0\.0\.0\.0\)/],
    [['launch'], /^tidal serve: unknown command "launch"/],
  ])('%j exits 2 with one line', (args, message) => {
    const r = run(args);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stdout).toBe('');
  });

  it('exits 2 without --schema on a directory that holds no database yet', () => {
    const r = run(['serve', '--path', join(tempDir(), 'data'), '--workers', '1']);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^tidal serve: --schema must be given: \S+ holds no database with a stored schema yet/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('exits 2 for a schema file that is not there, and for a keys file with a short key', () => {
    const dir = tempDir();
    const missing = run(['serve', '--path', join(dir, 'data'), '--schema', join(dir, 'none.json')]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/^tidal serve: --schema must be a readable file/);
    const keys = join(dir, 'keys.json');
    writeFileSync(keys, JSON.stringify({ short: { tenant: 'a', tier: 'pro' } }));
    const bad = run(['serve', '--demo', '--keys', keys]);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/at least 16 characters/);
  });

  it('--help lists the flags and exits 0', () => {
    const r = run(['serve', '--help']);
    expect(r.status).toBe(0);
    for (const flag of ['--path', '--schema', '--port', '--demo', '--in-flight-cap', '--keys', '--drain-ms', '--no-admission'])
      expect(r.stdout).toContain(flag);
  });
});

describe('tidal serve --demo', () => {
  it("names its items' creator: follows and profile following work on it", async () => {
    const child = spawn(process.execPath, [CLI, 'serve', '--demo', '--demo-items', '200', '--port', '0', '--workers', '1'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const first = await new Promise<string>((resolve) => createInterface({ input: child.stdout }).once('line', resolve));
    const url = /listening on (\S+)/.exec(first)![1]!;
    const post = async (path: string, body: unknown) => {
      const r = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: r.status, body: (await r.json()) as Record<string, unknown> };
    };
    const item = (await (await fetch(`${url}/items/item-000000`)).json()) as { metadata: { creator: string } };
    expect((await post('/users', { id: 'ana' })).status).toBe(200);
    expect((await post('/users/ana/follow', { creator: item.metadata.creator })).status).toBe(200);
    const feed = await post('/retrieve', { profile: 'following', user: 'ana', limit: 5 });
    expect(feed.status).toBe(200);
    expect((feed.body.items as { id: string }[]).map((i) => i.id)).toContain('item-000000');
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});

describe('tidal serve with TIDAL_STAGE_TIMES=1', () => {
  const start = async (env: NodeJS.ProcessEnv) => {
    const child = spawn(process.execPath, [CLI, 'serve', '--demo', '--demo-items', '200', '--port', '0', '--workers', '1'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env,
    });
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    const first = await new Promise<string>((resolve) => createInterface({ input: child.stdout }).once('line', resolve));
    return { child, url: /listening on (\S+)/.exec(first)![1]! };
  };
  const query = (url: string, path: string, body: unknown) =>
    fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }).then(
      (r) => r.status,
    );
  // Acceptor threads report their totals every 100 ms after a response: wait for the sums to include them.
  const stagesOnceReported = async (url: string) => {
    for (let i = 0; i < 100; i++) {
      const stats = (await (await fetch(`${url}/stats`)).json()) as { stages?: Record<string, number>; stagesClock?: string };
      if (stats.stages === undefined || (stats.stages.write ?? 0) > 0 || i === 99) return stats;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error('unreachable');
  };

  it('adds up each stage a query passes, and /stats reports the sums; without it /stats has none', async () => {
    // The wall clock: exact, so every stage a query passed is above 0 after a few (thread CPU time
    // moves at the kernel's tick).
    const on = await start({ ...process.env, TIDAL_STAGE_TIMES: 'wall' });
    for (let i = 0; i < 5; i++) {
      expect(await query(on.url, '/retrieve', { profile: 'trending', limit: 10, level: 'Full' })).toBe(200);
      expect(await query(on.url, '/search', { text: 'music', limit: 10 })).toBe(200);
    }
    const stats = await stagesOnceReported(on.url);
    expect(stats.stagesClock).toBe('wall');
    const stages = stats.stages!;
    expect(Object.keys(stages)).toEqual(['admission', 'plan', 'executor', 'hydration', 'json', 'write']);
    for (const s of ['admission', 'plan', 'hydration', 'json', 'write']) expect(stages[s], s).toBeGreaterThan(0);
    // The executor runs in the query workers: their totals reach /stats where they are acceptors
    // (Node 22.12+ on Linux); on the main-thread path (Node 20) they stay in the workers.
    const threaded = process.platform === 'linux' && Number(process.versions.node.split('.')[0]) >= 23;
    if (threaded) expect(stages.executor).toBeGreaterThan(0);
    expect(await stopServer(on.child)).toBe(0);

    const env = { ...process.env };
    delete env.TIDAL_STAGE_TIMES;
    const off = await start(env);
    expect(await query(off.url, '/retrieve', { profile: 'trending', limit: 10 })).toBe(200);
    const plain = (await (await fetch(`${off.url}/stats`)).json()) as Record<string, unknown>;
    expect(plain.stages).toBeUndefined();
    expect(await stopServer(off.child)).toBe(0);
  });

  it('with 1, measures thread CPU time where Node has it', async () => {
    const on = await start({ ...process.env, TIDAL_STAGE_TIMES: '1' });
    expect(await query(on.url, '/retrieve', { profile: 'trending', limit: 10 })).toBe(200);
    const stats = (await (await fetch(`${on.url}/stats`)).json()) as { stagesClock?: string; stages?: unknown };
    expect(stats.stagesClock).toBe(typeof (process as { threadCpuUsage?: unknown }).threadCpuUsage === 'function' ? 'thread-cpu' : 'wall');
    expect(stats.stages).toBeDefined();
    expect(await stopServer(on.child)).toBe(0);
  });
});

describe('tidal serve shutdown', () => {
  it.skipIf(process.platform !== 'linux')("--worker-nice sets the query workers' nice value, and only theirs", async () => {
    const child = spawn(
      process.execPath,
      [CLI, 'serve', '--demo', '--demo-items', '50', '--port', '0', '--workers', '2', '--worker-nice', '6'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const first = await new Promise<string>((resolve) => createInterface({ input: child.stdout }).once('line', resolve));
    expect(first).toMatch(/^tidal serve listening on /);
    // The kernel's view of each thread of the child: field 19 of /proc/PID/task/TID/stat.
    const nices = new Map<number, number>();
    for (const tid of readdirSync(`/proc/${child.pid}/task`)) {
      const stat = readFileSync(`/proc/${child.pid}/task/${tid}/stat`, 'utf8');
      nices.set(Number(tid), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]));
    }
    expect([...nices.values()].filter((n) => n === 6)).toHaveLength(2);
    // The child inherits this process's nice value (not 0 when the suite runs under `nice`).
    expect(nices.get(child.pid!)).toBe(getPriority());
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it('on SIGTERM under load: drains, closes the database, exits 0, and the directory reopens with every acknowledged write', async () => {
    const dir = tempDir();
    const schemaFile = join(dir, 'schema.json');
    writeFileSync(schemaFile, JSON.stringify(SCHEMA));
    const data = join(dir, 'data');
    const child = spawn(
      process.execPath,
      [CLI, 'serve', '--path', data, '--schema', schemaFile, '--port', '0', '--workers', '1', '--drain-ms', '20000'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    let stderr = '';
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const lines = createInterface({ input: child.stdout });
    const first = await new Promise<string>((resolve) => lines.once('line', resolve));
    expect(first).toMatch(/^tidal serve listening on http:\/\/127\.0\.0\.1:[0-9]+$/);
    const url = first.slice('tidal serve listening on '.length);

    let acked = 0;
    let stopAt = Number.POSITIVE_INFINITY;
    const signalled = new Promise<void>((resolve) => {
      // Eight writers; SIGTERM goes out once 40 writes are acknowledged (a count, not a time).
      const loop = async (): Promise<void> => {
        for (;;) {
          let res: Response;
          try {
            res = await fetch(`${url}/signals`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ item: 'hot', kind: 'view' }),
            });
            await res.text();
          } catch {
            return; // the listener is gone
          }
          if (res.status !== 200) return; // 503 while draining
          acked++;
          if (acked === 40) {
            stopAt = acked;
            child.kill('SIGTERM');
            resolve();
          }
        }
      };
      for (let i = 0; i < 8; i++) void loop();
    });
    await signalled;
    expect(await exited).toBe(0);
    expect(stderr).toMatch(/SIGTERM, draining/);
    expect(acked).toBeGreaterThanOrEqual(stopAt);

    const db = await TidalDb.builder().path(data).schema(SCHEMA).workers(1).open();
    try {
      expect(db.itemSignals('hot').view!.count).toBeGreaterThanOrEqual(acked);
    } finally {
      await db.close();
    }
  });
});
