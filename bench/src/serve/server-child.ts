/**
 * The server child of `bench:serve`: `tidal serve --demo` started in a process of its own (pinned
 * or not), ready once `/readyz` says so; stopped with SIGTERM.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { pinnedCommand } from './pinning.js';
import type { ResolvedRuntime, VariantSpec } from './variants.js';

export interface Server {
  child: ChildProcess;
  url: string;
  pid: number;
  exited: Promise<number | null>;
}

export async function startServer(
  flags: { items: number; workers: number; stages?: boolean },
  variant: VariantSpec,
  runtime: ResolvedRuntime,
  cpus: readonly number[] | null,
  profileDir: string | null,
): Promise<Server> {
  const args = [
    ...(profileDir === null ? [] : ['--cpu-prof', '--cpu-prof-dir', profileDir]),
    runtime.cli,
    'serve',
    '--demo',
    '--demo-items',
    String(flags.items),
    '--port',
    '0',
    '--workers',
    String(flags.workers),
    ...variant.args,
  ];
  const cmd = pinnedCommand(runtime.node, args, cpus);
  // `--stages`: every thread of the server adds up its stage times in wall time (stages.ts says why).
  const env = flags.stages === true ? { ...process.env, TIDAL_STAGE_TIMES: 'wall' } : process.env;
  const child = spawn(cmd.command, cmd.args, { cwd: runtime.root, stdio: ['ignore', 'pipe', 'pipe'], env });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  child.once('error', () => undefined); // a binary that cannot run: its exit says so
  let lastProgress = '';
  let tail = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    tail = (tail + chunk).slice(-2000);
    // The demo loader's progress line; echo the latest one so a long load shows it is moving.
    const line = chunk
      .split(/[\r\n]/)
      .filter((l) => l.trim() !== '')
      .pop();
    if (line !== undefined && line !== lastProgress) {
      lastProgress = line;
      process.stderr.write(`  server: ${line}\n`);
    }
  });
  const url = await new Promise<string>((resolve, reject) => {
    let buffered = '';
    const timer = setTimeout(() => reject(new Error('tidal serve did not start within 10 minutes')), 600_000);
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      buffered += chunk;
      const m = /tidal serve listening on (http:\/\/\S+)/.exec(buffered);
      if (m !== null) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      const said = tail.trim().split('\n').slice(-3).join(' / ');
      reject(
        new Error(
          `\`${runtime.node} ${runtime.cli} serve --demo … ${variant.args.join(' ')}\` exited with ${code} before listening${said === '' ? '' : `: ${said}`}`,
        ),
      );
    });
  });
  await waitReady(url);
  return { child, url, pid: child.pid!, exited };
}

/**
 * Until the server's vector searches use the ANN index (`db.vectorSearch` of /stats is `ann`, or
 * `none` without embeddings): a C measured while it builds would be exact search's.
 */
export async function waitAnn(url: string): Promise<void> {
  for (let i = 0; i < 6000; i++) {
    const body = (await statsOf(url)) as { db?: { vectorSearch?: string } };
    if (body.db?.vectorSearch === 'ann' || body.db?.vectorSearch === 'none') return;
    await sleep(100);
  }
  throw new Error('the ANN index was not in use 10 minutes after the start');
}

/**
 * The server's /stats. A pooled keep-alive connection the server closed as it was reused is reset
 * (ECONNRESET): asked again on a new one, up to 5 times.
 */
export async function statsOf(url: string): Promise<unknown> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await (await fetch(`${url}/stats`)).json();
    } catch (err) {
      if (attempt >= 4) throw err;
      await sleep(100);
    }
  }
}

async function waitReady(url: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(`${url}/readyz`);
      if (r.status === 200) return;
    } catch {
      // not accepting yet
    }
    await sleep(100);
  }
  throw new Error('tidal serve never became ready');
}

export async function stopServer(server: Server): Promise<number | null> {
  server.child.kill('SIGTERM');
  const code = await Promise.race([server.exited, sleep(30_000).then(() => 'timeout' as const)]);
  if (code === 'timeout') {
    server.child.kill('SIGKILL');
    return server.exited;
  }
  return code;
}

export function rssOf(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
