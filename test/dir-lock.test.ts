/**
 * One directory, one owner: a second opener (another real process, or this one) is refused with
 * DirectoryLockedError naming the owner's pid; a lock left by a process killed with SIGKILL is
 * taken over by the next open.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, onTestFinished } from 'vitest';
import { DirectoryLockedError, TidalDb } from 'tidal-core';

const HOLDER = fileURLToPath(new URL('./fixtures/hold-open.mjs', import.meta.url));
const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000 }] };

function dataDir(): string {
  const root = mkdtempSync(join(tmpdir(), 'tidal-lock-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  return join(root, 'data');
}

function open(dir: string) {
  return TidalDb.builder().path(dir).workers(1).schema(SCHEMA).open();
}

describe('the directory lock', () => {
  it('refuses a second process while the first has it open, and is taken over once that one is killed', async () => {
    const dir = dataDir();
    const child = spawn(process.execPath, [HOLDER, dir], { stdio: ['ignore', 'pipe', 'inherit'] });
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    const line = await new Promise<string>((resolve) => createInterface({ input: child.stdout }).once('line', resolve));
    expect(line).toBe(`OPEN ${child.pid}`);
    const err = await open(dir).then(
      () => null,
      (e: unknown) => e,
    );
    expect(DirectoryLockedError.is(err)).toBe(true);
    expect(err).toMatchObject({ code: 'TIDAL_DIRECTORY_LOCKED', path: dir, pid: child.pid });
    expect((err as Error).message).toContain(`process ${child.pid}`);

    const exited = new Promise((resolve) => child.on('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    // The lock file is still there (nothing closed it), but its process is gone: taken over.
    expect(existsSync(join(dir, 'tidal.lock'))).toBe(true);
    const db = await open(dir);
    expect(db.itemSignals('held').view?.count).toBe(1);
    await db.close();
    expect(existsSync(join(dir, 'tidal.lock'))).toBe(false);
  });

  it('refuses a second database of the same process until the first closes', async () => {
    const dir = dataDir();
    const first = await open(dir);
    await expect(open(dir)).rejects.toMatchObject({
      code: 'TIDAL_DIRECTORY_LOCKED',
      pid: process.pid,
      message: expect.stringMatching(/already open in this process/),
    });
    await first.close();
    const again = await open(dir);
    await again.close();
  });

  it('takes over a lock file that holds no readable owner (its writer died between create and write)', async () => {
    const dir = dataDir();
    await (await open(dir)).close();
    writeFileSync(join(dir, 'tidal.lock'), '');
    const db = await open(dir);
    await db.close();
  });
});
