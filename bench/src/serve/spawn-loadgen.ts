/**
 * Runs the load generator (loadgen.ts) in a process of its own, as every serve bench does: the
 * server and the generator must not share an event loop.
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LoadResult } from './loadgen.js';
import { pinnedCommand } from './pinning.js';
import { readThreads } from './threads.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..', '..');
const LOADGEN = join(HERE, 'loadgen.js');

/**
 * The generator's result (the last line it prints), and `performance.now()` here when it exited.
 * A generator still running after `timeoutMs` is killed, and the promise rejects. With `cpus`, it
 * runs on those CPUs only (`taskset -c`, see pinning.ts).
 */
export function runLoadgen(
  args: readonly string[],
  timeoutMs = 10 * 60_000,
  cpus: readonly number[] | null = null,
): Promise<{ result: LoadResult; exitedAt: number }> {
  return new Promise((resolve, reject) => {
    const cmd = pinnedCommand(process.execPath, [LOADGEN, ...args], cpus);
    const child = spawn(cmd.command, cmd.args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', (code) => {
      const exitedAt = performance.now();
      clearTimeout(timer);
      const line = out.trim().split('\n').pop() ?? '';
      try {
        if (code !== 0) throw new Error(`load generator exited with ${code}`);
        resolve({ result: JSON.parse(line) as LoadResult, exitedAt });
      } catch (err) {
        reject(err);
      }
    });
  });
}

/** A closed loop of `closed` requests in flight from `requests` (a request file) against `url` for `ms`, raw client. */
export function closedLoop(
  url: string,
  requests: string,
  closed: number,
  ms: number,
  seed: number,
): Promise<{ result: LoadResult; exitedAt: number }> {
  const args = [
    '--url',
    url,
    '--requests',
    requests,
    '--closed',
    String(closed),
    '--duration-ms',
    String(ms),
    '--seed',
    String(seed),
    '--client',
    'raw',
  ];
  return runLoadgen(args, ms + 60_000);
}

/**
 * {@link closedLoop} against a server whose process is `pid`: its CPU per response over the loop
 * (every thread, /proc schedstat), and the responses.
 */
export async function measuredLoop(
  pid: number,
  url: string,
  requests: string,
  closed: number,
  ms: number,
  seed: number,
): Promise<{ us: number; completed: number }> {
  const before = readThreads(pid);
  const { result } = await closedLoop(url, requests, closed, ms, seed);
  const after = readThreads(pid);
  const ns = after.reduce((a, t) => a + t.runNs, 0) - before.reduce((a, t) => a + t.runNs, 0);
  return { us: ns / 1000 / Math.max(1, result.completed), completed: result.completed };
}
