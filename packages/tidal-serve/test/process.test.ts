/**
 * `tidal` as a process among others: `--version`, a server whose launcher went away without passing
 * SIGTERM on (npx, npm exec) drains by itself, and tidal-fleet loaded only by the flags that need it.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { MissingPackageError } from 'tidal-core';
import { handleShutdown } from '../src/shutdown.js';
import { loadFleetModule } from '../src/fleet-loader.js';
import { parseServeArgs } from '../src/config.js';

const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };

describe('tidal --version', () => {
  it.each([['--version'], ['-v'], ['version']])('%s prints the version and exits 0', (flag) => {
    const r = spawnSync(process.execPath, [CLI, flag], { encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(`tidal-serve ${manifest.version} (tidal-core ${manifest.version}, Node ${process.version})\n`);
  });
});

describe('a server whose parent process goes away', () => {
  it('drains and exits 0, as on SIGTERM', async () => {
    let parent = 4242;
    const lines: string[] = [];
    let closedWith: { drainMs?: number } | undefined;
    let remove = (): void => {};
    const exited = new Promise<number>((resolve) => {
      remove = handleShutdown(
        {
          inFlight: 3,
          close: (o) => {
            closedWith = o;
            return Promise.resolve();
          },
        },
        { drainMs: 777, parentCheckMs: 1, parentPid: () => parent, log: (l) => lines.push(l), exit: resolve },
      );
      // The launcher exits: this process is re-parented (to init or a subreaper).
      setImmediate(() => (parent = 1));
    });
    expect(await exited).toBe(0);
    remove();
    expect(closedWith).toEqual({ drainMs: 777 });
    expect(lines[0]).toBe('tidal serve: the parent process 4242 is gone (now 1), draining 3 in-flight requests (up to 777 ms)');
  });

  it('keeps running while the parent stays', async () => {
    let checks = 0;
    let exitCode: number | undefined;
    let remove = (): void => {};
    // The tenth check is the event this waits for; nine unchanged parents before it must not stop it.
    await new Promise<void>((resolve) => {
      remove = handleShutdown(
        { inFlight: 0, close: () => Promise.resolve() },
        {
          drainMs: 1,
          parentCheckMs: 1,
          parentPid: () => (++checks === 11 ? resolve() : undefined, 4242),
          log: () => {},
          exit: (code) => (exitCode = code),
        },
      );
    });
    remove();
    expect(exitCode).toBeUndefined();
  });
});

describe('--no-parent-check', () => {
  it('turns the check off: the parent is never read', () => {
    let reads = 0;
    const remove = handleShutdown(
      { inFlight: 0, close: () => Promise.resolve() },
      { drainMs: 1, parentCheckMs: 0, parentPid: () => ++reads, log: () => {}, exit: () => {} },
    );
    remove();
    expect(reads).toBe(0);
  });

  it('is what the flag sets', () => {
    expect(parseServeArgs(['--demo', '--no-parent-check']).parentCheck).toBe(false);
    expect(parseServeArgs(['--demo']).parentCheck).toBe(true);
  });
});

describe('tidal-fleet, an optional peer', () => {
  const notFound = Object.assign(
    new Error("Cannot find package 'tidal-fleet' imported from /app/node_modules/tidal-serve/dist/admission/shared-fleet.js"),
    { code: 'ERR_MODULE_NOT_FOUND' },
  );

  it('is not loaded without --redis, --replicate or --embedder', async () => {
    let loaded = 0;
    const module = await loadFleetModule({ redis: undefined, replicate: false, embedder: undefined }, () => {
      loaded++;
      return Promise.reject(notFound);
    });
    expect(module).toBeUndefined();
    expect(loaded).toBe(0);
  });

  it.each([
    [{ redis: 'redis://127.0.0.1:6379', replicate: false, embedder: undefined }, '--redis'],
    [{ redis: 'redis://127.0.0.1:6379', replicate: true, embedder: undefined }, '--replicate'],
    [{ redis: undefined, replicate: false, embedder: 'http://127.0.0.1:1' }, '--embedder'],
  ])('missing, it is named with the flag that needs it and the command to install it (%j)', async (config, flag) => {
    const err = await loadFleetModule(config, () => Promise.reject(notFound)).catch((e: unknown) => e);
    expect(MissingPackageError.is(err)).toBe(true);
    expect(err).toMatchObject({ packageName: 'tidal-fleet', neededBy: `tidal serve ${flag}`, fix: 'npm install tidal-fleet' });
    expect((err as Error).message).toBe(
      `tidal serve ${flag} needs the package tidal-fleet, which is not installed: run \`npm install tidal-fleet\``,
    );
  });

  it('passes on any other failure to load as it was', async () => {
    const other = new SyntaxError('bad module');
    const err = await loadFleetModule({ redis: 'redis://x', replicate: false, embedder: undefined }, () => Promise.reject(other)).catch(
      (e: unknown) => e,
    );
    expect(err).toBe(other);
  });
});
