/**
 * Thread-per-core `tidal serve`: which platforms get acceptor threads, and on those (Node 22.12+
 * on Linux) a real server whose query workers each listen on the one port. On Node 20 the
 * single-acceptor path is checked instead: an explicit `--acceptors N` refuses to start.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { describe, expect, it, onTestFinished } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { reusePortSupport } from '../src/acceptor/acceptors.js';
import { parseServeArgs, resolveAcceptors } from '../src/config.js';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const ROUTES = fileURLToPath(new URL('./fixtures/routes.mjs', import.meta.url));
const here = reusePortSupport();

describe('where acceptor threads run', () => {
  it('needs Node 22.12 or later, on Linux', () => {
    expect(reusePortSupport('20.20.2', 'linux')).toMatchObject({ ok: false, why: expect.stringMatching(/Node 20\.20\.2 .*22\.12/) });
    expect(reusePortSupport('22.11.0', 'linux').ok).toBe(false);
    expect(reusePortSupport('22.12.0', 'linux').ok).toBe(true);
    expect(reusePortSupport('24.22.3', 'linux').ok).toBe(true);
    expect(reusePortSupport('24.22.3', 'darwin')).toMatchObject({ ok: false, why: expect.stringMatching(/darwin/) });
    expect(reusePortSupport('24.22.3', 'win32').ok).toBe(false);
  });

  it('auto is one per query worker where possible, else the main thread, and says why', () => {
    const config = (args: string[]) => parseServeArgs(['--demo', ...args]);
    const yes = { ok: true } as const;
    const no = { ok: false, why: 'Node 20 has no reusePort' } as const;
    expect(resolveAcceptors(config([]), 2, yes)).toEqual({ threads: 2 });
    expect(resolveAcceptors(config([]), 2, no)).toEqual({ threads: 0, why: 'Node 20 has no reusePort' });
    expect(resolveAcceptors(config(['--acceptors', 'main']), 2, yes)).toEqual({ threads: 0, why: '--acceptors main' });
    expect(resolveAcceptors(config(['--acceptors', '1']), 2, yes)).toEqual({ threads: 1 });
    expect(resolveAcceptors(config(['--redis', 'redis://127.0.0.1:1']), 2, yes)).toMatchObject({
      threads: 0,
      why: expect.stringMatching(/--redis/),
    });
  });

  it('refuses N acceptors where the platform cannot, beyond the workers, and with --redis, naming --acceptors', () => {
    const config = (args: string[]) => parseServeArgs(['--demo', ...args]);
    const refuse = (fn: () => unknown, why: RegExp) => {
      try {
        fn();
      } catch (err) {
        expect(InvalidInputError.is(err)).toBe(true);
        expect((err as InvalidInputError).field).toBe('--acceptors');
        expect((err as Error).message).toMatch(why);
        return;
      }
      throw new Error('expected a refusal');
    };
    refuse(
      () => resolveAcceptors(config(['--acceptors', '2']), 2, { ok: false, why: 'Node 20 has no reusePort' }),
      /Node 20 has no reusePort/,
    );
    refuse(() => resolveAcceptors(config(['--acceptors', '3']), 2, { ok: true }), /at most the query workers \(2\)/);
    refuse(() => resolveAcceptors(config(['--acceptors', '2', '--redis', 'redis://127.0.0.1:1']), 2, { ok: true }), /--redis/);
    expect(() => config(['--acceptors', 'two'])).toThrow(/--acceptors must be a whole number from 1 to 64/);
  });
});

interface Running {
  url: string;
  adminUrl: string | undefined;
  stderr: string[];
  child: ChildProcess;
  exited: Promise<number | null>;
}

async function serve(args: string[]): Promise<Running> {
  const child = spawn(process.execPath, [CLI, 'serve', '--demo', '--demo-items', '300', '--port', '0', '--workers', '2', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  onTestFinished(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  const stderr: string[] = [];
  createInterface({ input: child.stderr }).on('line', (l) => stderr.push(l));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const first = await Promise.race([
    new Promise<string>((resolve) => createInterface({ input: child.stdout }).once('line', resolve)),
    exited.then((c) => `exited ${c}: ${stderr.join('\n')}`),
  ]);
  expect(first).toMatch(/^tidal serve listening on http:\/\/127\.0\.0\.1:[0-9]+$/);
  const admin = stderr.map((l) => /also at (http:\/\/\S+)/.exec(l)?.[1]).find((u) => u !== undefined);
  return { url: first.slice('tidal serve listening on '.length), adminUrl: admin, stderr, child, exited };
}

async function json(url: string, init?: RequestInit): Promise<{ status: number; body: Record<string, unknown>; headers: Headers }> {
  const res = await fetch(url, init);
  return { status: res.status, body: (await res.json()) as Record<string, unknown>, headers: res.headers };
}

describe.runIf(here.ok)('tidal serve with acceptor threads', () => {
  it('every acceptor answers reads in its own thread; writes are durable; the main thread answers probes and reports', async () => {
    const s = await serve(['--acceptors', '2', '--routes', ROUTES]);
    expect(s.stderr.join('\n')).toMatch(/2 acceptor threads \(thread \d+, thread \d+\) on port \d+ with reusePort/);
    expect(s.adminUrl).toBeDefined();
    // New connections each: the kernel spreads them over both listeners.
    const threads = new Set<number>();
    // Requests that pass the chain (not the exempt probes and scrapes).
    let sent = 0;
    for (let i = 0; i < 60 && threads.size < 2; i++) {
      sent += 2;
      const r = await json(`${s.url}/hello`, { headers: { connection: 'close' } });
      expect(r.status).toBe(200);
      threads.add(r.body.threadId as number);
      const q = await json(`${s.url}/retrieve`, {
        method: 'POST',
        body: JSON.stringify({ profile: 'trending', limit: 3 }),
        headers: { connection: 'close' },
      });
      expect(q.status).toBe(200);
      expect(q.headers.get('x-tidal-degradation-level')).toBe('Full');
    }
    // Both acceptors are worker threads (ids > 0), never the main thread (0).
    expect([...threads].every((t) => t > 0)).toBe(true);
    expect(threads.size).toBe(2);

    sent += 3;
    const before = await json(`${s.url}/items/item-000007/signals`);
    const likes = (before.body.signals as Record<string, { count: number }>).like?.count ?? 0;
    const w = await json(`${s.url}/like/item-000007`, { method: 'POST' });
    expect(w.status).toBe(200);
    const after = await json(`${s.url}/items/item-000007/signals`);
    expect((after.body.signals as Record<string, { count: number }>).like!.count).toBe(likes + 1);

    expect((await json(`${s.adminUrl}/healthz`)).body).toEqual({ ok: true });
    expect((await json(`${s.url}/healthz`)).body).toEqual({ ok: true });
    // /stats through an acceptor is the main thread's: the database's counts include the acceptors' queries.
    let stats: Record<string, unknown> = {};
    for (const end = Date.now() + 30_000; Date.now() < end;) {
      stats = (await json(`${s.url}/stats`)).body;
      const acc = stats.acceptors as { local: number }[] | undefined;
      if (acc?.length === 2 && acc.every((a) => a.local > 0)) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const acceptors = stats.acceptors as { index: number; threadId: number; local: number; forwarded: number }[];
    expect(acceptors.map((a) => a.index).sort()).toEqual([0, 1]);
    for (const a of acceptors) expect(a.local).toBeGreaterThan(0);
    // One chain state for every acceptor: the main thread's view of it counts what both admitted.
    const inflight = (stats.chain as { name: string; admitted: number; inFlight: number }[]).find((st) => st.name === 'inflight')!;
    expect(inflight.admitted).toBe(sent);
    const served = (stats.db as { served: Record<string, number> }).served;
    expect(Object.values(served).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    expect(metrics).toMatch(/tidal_serve_responses_total\{route="retrieve",status="200"\} [1-9]/);
    // Memory per thread: each acceptor holds its own catalogue, and reports it.
    const memory = (stats.db as { memory: { catalog: { copies: number }; threads: { threadId: number }[] } }).memory;
    expect(memory.catalog.copies).toBe(2);
    for (const a of acceptors) {
      expect(memory.threads.map((t) => t.threadId)).toContain(a.threadId);
      expect(metrics).toMatch(new RegExp(`tidal_memory_thread_bytes\\{thread="${a.threadId}",kind="catalog"\\} [1-9]`));
    }

    s.child.kill('SIGTERM');
    expect(await s.exited).toBe(0);
  });
});

describe.runIf(!here.ok)('tidal serve where acceptor threads cannot run', () => {
  it('auto says so and serves from the main thread; --acceptors N refuses to start', async () => {
    const s = await serve(['--routes', ROUTES]);
    expect(s.stderr.join('\n')).toMatch(/one acceptor, the main thread \(/);
    const r = await json(`${s.url}/hello`);
    expect(r.status).toBe(200);
    expect(r.body.threadId).toBe(0);
    s.child.kill('SIGTERM');
    expect(await s.exited).toBe(0);
    const refused = spawnSync(process.execPath, [CLI, 'serve', '--demo', '--acceptors', '2'], { encoding: 'utf8', timeout: 30_000 });
    expect(refused.status).toBe(2);
    expect(refused.stderr).toMatch(/^tidal serve: --acceptors must be main or auto here: /);
  });
});
