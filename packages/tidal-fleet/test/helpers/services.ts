/**
 * Real servers for the fleet tests: each test file starts its own redis-server and its own
 * throw-away PostgreSQL cluster on 127.0.0.1, on ports the kernel picked, and stops them after.
 *
 * PostgreSQL refuses to run as root, so when the tests run as root (CI does) initdb and postgres are
 * started as `nobody` (uid/gid 65534) through Node's spawn `uid`/`gid`, with the cluster directory
 * handed to that user; as any other user they run as that user. Nothing is left behind: every server
 * is stopped with SIGTERM/SIGQUIT, then SIGKILL after a bounded wait, and its directory removed; a
 * test worker that exits early kills whatever it still has running.
 *
 * When a binary is missing the start fails with a message that says how to install it, unless
 * `TIDAL_SKIP_SERVICES=1`, where {@link servicesSkipped} is true and the suites skip themselves.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { createClient } from 'redis';

export const servicesSkipped = process.env.TIDAL_SKIP_SERVICES === '1';

const STOP_GRACE_MS = 3_000;
const READY_TIMEOUT_MS = 20_000;
const NOBODY = 65_534;

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

function which(name: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir !== '' && existsSync(join(dir, name))) return join(dir, name);
  }
  return null;
}

function postgresBinDir(): string | null {
  const initdb = which('initdb');
  if (initdb !== null && which('postgres') !== null) return null;
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) throw missing('initdb and postgres (PostgreSQL)');
  const majors = readdirSync(base)
    .filter((d) => existsSync(join(base, d, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  if (majors.length === 0) throw missing('initdb and postgres (PostgreSQL)');
  return join(base, majors[0]!, 'bin');
}

function missing(what: string): Error {
  return new Error(
    `${what} not found: the fleet tests run against real servers. Run \`node scripts/ensure-services.mjs\` as root ` +
      "(installs Debian's redis-server and postgresql), install them yourself, or set TIDAL_SKIP_SERVICES=1 to skip these tests",
  );
}

/** A port that was free a moment ago on 127.0.0.1 (the kernel's pick). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

function asRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

/** Resolves when `pattern` shows on the child's output; rejects if it exits or takes too long first. */
function waitForOutput(child: ChildProcess, pattern: RegExp, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(
      () => done(new Error(`${what} not ready after ${READY_TIMEOUT_MS} ms:\n${seen.slice(-2000)}`)),
      READY_TIMEOUT_MS,
    );
    const onData = (chunk: Buffer): void => {
      seen += chunk.toString('utf8');
      if (pattern.test(seen)) done();
    };
    const onExit = (code: number | null, signal: string | null): void =>
      done(new Error(`${what} exited (${code ?? signal}) before it was ready:\n${seen.slice(-2000)}`));
    function done(err?: Error): void {
      clearTimeout(timer);
      child.stdout?.off('data', onData);
      child.stderr?.off('data', onData);
      child.off('exit', onExit);
      if (err) reject(err);
      else resolve();
    }
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', onExit);
  });
}

/** Stops a child: `signal`, then SIGKILL after a bounded wait. Resolves once it has exited. */
async function stopChild(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    running.delete(child);
    return;
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
  await exited;
  clearTimeout(timer);
  running.delete(child);
}

export interface RedisServer {
  readonly port: number;
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  /** Kills the server at once (SIGKILL): what a crash looks like to the clients. */
  kill(): Promise<void>;
  /** Starts it again on the same port: empty, or with what its append-only file holds (`appendOnlyDir`). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** Drops every entry of `stream` on the Redis at `url`, as `maxLen` trimming drops the oldest. */
export async function trimStream(url: string, stream: string): Promise<void> {
  const client = createClient({ url });
  await client.connect();
  try {
    await client.sendCommand(['XTRIM', stream, 'MAXLEN', '0']);
  } finally {
    await client.quit();
  }
}

/**
 * Starts a redis-server on 127.0.0.1 on a free port (or on `port`, then without retrying),
 * without persistence, or with an append-only file in `appendOnlyDir` synced every second (Redis's
 * default `appendfsync everysec`: a SIGKILL may lose about the last second of writes).
 */
export async function startRedis(options: { port?: number; appendOnlyDir?: string } = {}): Promise<RedisServer> {
  const bin = which('redis-server');
  if (bin === null) throw missing('redis-server');
  let child: ChildProcess | null = null;
  const launch = async (port: number): Promise<void> => {
    const c = spawn(
      bin,
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        ...(options.appendOnlyDir === undefined
          ? ['--appendonly', 'no']
          : ['--appendonly', 'yes', '--appendfsync', 'everysec', '--dir', options.appendOnlyDir]),
        '--protected-mode',
        'no',
        '--loglevel',
        'warning',
        '--enable-debug-command',
        'local',
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    running.add(c);
    child = c;
    c.stdout?.resume();
    c.stderr?.resume();
    try {
      await waitForOwnRedis(port, c);
    } catch (err) {
      await stopChild(c, 'SIGKILL');
      child = null;
      throw err;
    }
  };
  // The port was free a moment ago; another test file's server may have taken it since. Ours then
  // exits (it cannot bind), or the one answering is someone else's: try another port.
  let port = 0;
  for (let attempt = 1; ; attempt++) {
    port = options.port ?? (await freePort());
    try {
      await launch(port);
      break;
    } catch (err) {
      if (!(err instanceof PortTaken) || attempt === 5 || options.port !== undefined) throw err;
    }
  }
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    async kill() {
      if (child) await stopChild(child, 'SIGKILL');
      child = null;
    },
    async restart() {
      if (child) await stopChild(child, 'SIGKILL');
      await launch(port);
    },
    async stop() {
      if (child) await stopChild(child, 'SIGTERM');
      child = null;
    },
  };
}

/** The server on a port is not the child started for it (another process listens there). */
class PortTaken extends Error {}

/**
 * Resolves once `child` answers on `port`. Readiness is a reply to INFO naming the child's own
 * process id (with loglevel warning redis prints nothing when ready): a PONG alone could come from
 * another test file's server that took the port first, and two files sharing one server see each
 * other's restarts.
 */
async function waitForOwnRedis(port: number, child: ChildProcess): Promise<void> {
  const { Socket } = await import('node:net');
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new PortTaken(`redis-server exited (${child.exitCode ?? child.signalCode}) before it was ready (port ${port})`);
    const pid = await new Promise<number | null>((resolve) => {
      const socket = new Socket();
      let seen = '';
      const finish = (value: number | null): void => {
        socket.destroy();
        resolve(value);
      };
      socket.setTimeout(500, () => finish(null));
      socket.once('error', () => finish(null));
      socket.connect(port, '127.0.0.1', () => socket.write('INFO server\r\n'));
      socket.on('data', (d) => {
        seen += d.toString();
        const m = /\r\nprocess_id:(\d+)\r\n/.exec(seen);
        if (m) finish(Number(m[1]));
        else if (seen.startsWith('-')) finish(null);
      });
    });
    if (pid !== null && pid === child.pid) return;
    if (pid !== null) throw new PortTaken(`port ${port} is answered by redis-server pid ${pid}, not ours (${child.pid})`);
    if (Date.now() - started > READY_TIMEOUT_MS)
      throw new Error(`redis-server on port ${port} did not answer INFO within ${READY_TIMEOUT_MS} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface PostgresServer {
  readonly port: number;
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication, loopback only). */
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * initdb into a temporary directory and start postgres on 127.0.0.1 on a free port, or on `port`
 * (a URL handed out before the server is up, for tests of a database that comes late).
 */
export async function startPostgres(options: { port?: number } = {}): Promise<PostgresServer> {
  const binDir = postgresBinDir();
  const bin = (name: string): string => {
    const path = binDir === null ? which(name) : join(binDir, name);
    if (path === null || !existsSync(path)) throw missing(name);
    return path;
  };
  const initdb = bin('initdb');
  const postgres = bin('postgres');
  const dir = mkdtempSync(join(tmpdir(), 'tidal-pg-'));
  const data = join(dir, 'data');
  const ids = asRoot() ? { uid: NOBODY, gid: NOBODY } : {};
  if (asRoot()) {
    chownSync(dir, NOBODY, NOBODY);
    chmodSync(dir, 0o700);
  }
  const init = spawnSync(initdb, ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8', '--locale=C'], {
    ...ids,
    encoding: 'utf8',
    timeout: READY_TIMEOUT_MS,
    env: { ...process.env, LC_ALL: 'C' },
  });
  if (init.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    // initdb reports some failures (a bootstrap backend that could not start) on stdout.
    const said = `${init.stderr ?? ''}\n${init.stdout ?? ''}`.trim().slice(-2000);
    throw new Error(`initdb failed (${init.status ?? init.signal ?? init.error?.message}): ${said}`);
  }
  const port = options.port ?? (await freePort());
  const child = spawn(
    postgres,
    [
      '-D',
      data,
      '-p',
      String(port),
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      `unix_socket_directories=${dir}`,
      '-c',
      'fsync=off',
      '-c',
      'max_connections=50',
      '-c',
      'shared_buffers=16MB',
    ],
    { ...ids, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LC_ALL: 'C' } },
  );
  running.add(child);
  try {
    await waitForOutput(child, /database system is ready to accept connections/, 'postgres');
  } catch (err) {
    await stopChild(child, 'SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  child.stdout?.resume();
  child.stderr?.resume();
  let stopped: Promise<void> | null = null;
  return {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop() {
      // SIGQUIT is PostgreSQL's immediate shutdown: nothing of a throw-away cluster is worth a checkpoint.
      stopped ??= stopChild(child, 'SIGQUIT').then(() => rmSync(dir, { recursive: true, force: true }));
      return stopped;
    },
  };
}
