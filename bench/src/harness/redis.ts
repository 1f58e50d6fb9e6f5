/** A throwaway redis-server for the suites that need one (fleet, replication). */

import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, Socket, type AddressInfo } from 'node:net';

/** A TCP port free on 127.0.0.1 when asked (the kernel's pick for port 0). */
export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/**
 * Starts `redis-server` on a free port, without persistence, and waits (up to 5 s) until it accepts
 * connections. Exits the process if the binary cannot start. The caller kills `child` when done.
 */
export async function startRedis(): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  child.on('error', (err) => {
    process.stderr.write(`redis-server could not start (${err.message}); run node scripts/ensure-services.mjs\n`);
    process.exit(1);
  });
  for (let i = 0; i < 200; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = new Socket();
      s.once('error', () => resolve(false));
      s.connect(port, '127.0.0.1', () => (s.destroy(), resolve(true)));
    });
    if (ok) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  return { url: `redis://127.0.0.1:${port}`, child };
}
