/**
 * The packages as a user gets them: `npm run pack` writes the tarballs, and a fresh ESM app outside
 * the repository installs them with its own `npm install` (no workspace links), without tidal-fleet,
 * with TypeScript 5.2 (the oldest supported) and install scripts off. There the README's quickstart
 * is type-checked (skipLibCheck false) and run verbatim, `node -e` loads tidal-core both ways, and
 * `tidal serve` answers a request and stops when `npx`, its documented launcher, gets SIGTERM.
 *
 * Install scripts are off so the test needs only the npm registry (or its cache) and stays within
 * about a minute: the missing native binding is itself a case to test (its error names the fix),
 * after which the app gets the better-sqlite3 addon this repository built (the same version, pinned
 * by an override, for the same Node) instead of compiling it a second time.
 * `TIDAL_SKIP_PACK=1` skips the file.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PACKAGES = ['tidal-load', 'tidal-wal', 'tidal-query', 'tidal-core', 'tidal-serve', 'tidal-fleet'];
/** What the app installs: everything but tidal-fleet, which `tidal serve` needs only for --redis and the like. */
const INSTALLED = PACKAGES.filter((p) => p !== 'tidal-fleet');
const OLDEST_TYPESCRIPT = '5.2.2';
const version = (pkg: string) =>
  (JSON.parse(readFileSync(join(ROOT, 'node_modules', pkg, 'package.json'), 'utf8')) as { version: string }).version;

/** The environment of a child npm or node: this process's, less what an enclosing `npm test` set for its own npm. */
function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  env.PATH = `${dirname(process.execPath)}:${env.PATH ?? ''}`;
  return env;
}

async function sh(file: string, args: string[], cwd: string): Promise<{ stdout: string; stderr: string }> {
  try {
    return await run(file, args, { cwd, env: childEnv(), maxBuffer: 64 << 20, timeout: 180_000 });
  } catch (err) {
    const e = err as Error & { stdout?: string; stderr?: string };
    throw new Error(`${file} ${args.join(' ')} failed in ${cwd}: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`, { cause: err });
  }
}

function files(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => statSync(join(dir, f)).isFile());
}

describe.skipIf(process.env.TIDAL_SKIP_PACK === '1')('the packed packages, installed in a fresh app', () => {
  let work: string;
  let tarballs: Record<string, string>;
  let app: string;
  /** What `npm install` of the tarballs printed. */
  let installLog = '';

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'tidal-pack-'));
    const out = join(work, 'tarballs');
    const { stdout } = await sh(process.execPath, [join(ROOT, 'scripts', 'pack.mjs'), out], ROOT);
    tarballs = Object.fromEntries(
      stdout
        .trim()
        .split('\n')
        .map((path) => [/([a-z-]+)-\d+\.\d+\.\d+\.tgz$/.exec(path)![1]!, path]),
    );
    expect(Object.keys(tarballs).sort()).toEqual([...PACKAGES].sort());

    app = join(work, 'app');
    mkdirSync(app);
    writeFileSync(
      join(app, 'package.json'),
      JSON.stringify({ name: 'tidal-app', private: true, type: 'module', overrides: { 'better-sqlite3': version('better-sqlite3') } }),
    );
    const installed = await sh(
      'npm',
      [
        'install',
        ...INSTALLED.map((p) => tarballs[p]!),
        `typescript@${OLDEST_TYPESCRIPT}`,
        // The Node types of the Node it runs on; the newest @types/node needs a newer TypeScript.
        `@types/node@${version('@types/node')}`,
        '--ignore-scripts',
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
      ],
      app,
    );
    installLog = installed.stdout + installed.stderr;
  }, 240_000);

  afterAll(() => {
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  it('installs on the Node it runs on without an engine warning', () => {
    // fastify's light-my-request took cookie@2 (node >=22) from 6.8 on: tidal-serve holds it at 6.6.
    expect(installLog).not.toMatch(/EBADENGINE/);
  });

  it("every tarball holds the root's LICENSE, a README, and source maps whose sources it ships", async () => {
    const license = readFileSync(join(ROOT, 'LICENSE'), 'utf8');
    expect(license).toContain('Apache License\n                           Version 2.0, January 2004');
    expect(license).toContain('END OF TERMS AND CONDITIONS');
    for (const pkg of PACKAGES) {
      const dir = join(work, 'unpacked', pkg);
      mkdirSync(dir, { recursive: true });
      await sh('tar', ['-xzf', tarballs[pkg]!, '-C', dir], work);
      const root = join(dir, 'package');
      expect(readFileSync(join(root, 'LICENSE'), 'utf8'), pkg).toBe(license);
      expect(readFileSync(join(root, 'README.md'), 'utf8'), pkg).toMatch(/^# tidal-[a-z]+\n[\s\S]*npm install tidal-/);
      const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as Record<string, unknown>;
      for (const field of ['description', 'keywords', 'repository', 'engines', 'license'])
        expect(manifest[field], `${pkg} package.json ${field}`).toBeTruthy();
      const all = files(root);
      const maps = all.filter((f) => f.endsWith('.map'));
      expect(maps.length, pkg).toBeGreaterThan(0);
      for (const map of maps) {
        const { sources } = JSON.parse(readFileSync(join(root, map), 'utf8')) as { sources: string[] };
        for (const source of sources) {
          const target = relative(root, join(root, dirname(map), source));
          expect(all, `${pkg}/${map} names ${source}`).toContain(target);
        }
      }
    }
  });

  it('publint and arethetypeswrong (ESM-only profile) find no problem in any tarball', async () => {
    const bin = (name: string) => join(ROOT, 'node_modules', '.bin', name);
    for (const pkg of PACKAGES) {
      const lint = await sh(bin('publint'), ['run', tarballs[pkg]!, '--strict'], work);
      expect(lint.stdout, pkg).toContain('All good!');
      // Exits non-zero on any problem the profile counts; tidal is ESM only, so CommonJS resolution
      // (node10, require without require(esm)) is out of it.
      await sh(bin('attw'), [tarballs[pkg]!, '--profile', 'esm-only', '--no-emoji', '--no-color'], work);
    }
  }, 180_000);

  it("open() without better-sqlite3's native binding names the package and the command that fixes it", async () => {
    const probe = join(app, 'probe.mjs');
    writeFileSync(
      probe,
      `import { TidalDb } from 'tidal-core';
try {
  await TidalDb.builder().ephemeral().schema({ signals: [{ name: 'view', halfLifeMs: 1000 }] }).open();
  console.log('opened');
} catch (err) {
  console.log(JSON.stringify({ code: err.code, packageName: err.packageName, fix: err.fix, message: err.message }));
}
`,
    );
    const { stdout } = await sh(process.execPath, [probe], app);
    const err = JSON.parse(stdout) as { code: string; packageName: string; fix: string; message: string };
    expect(err).toMatchObject({ code: 'TIDAL_MISSING_PACKAGE', packageName: 'better-sqlite3', fix: 'npm rebuild better-sqlite3' });
    expect(err.message).toMatch(/^opening a database needs the package better-sqlite3, which has no native binding built for Node v/);

    // The addon this repository's install built, for the same version and Node (see the header).
    const addon = join('better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
    mkdirSync(dirname(join(app, 'node_modules', addon)), { recursive: true });
    copyFileSync(join(ROOT, 'node_modules', addon), join(app, 'node_modules', addon));
    expect((await sh(process.execPath, [probe], app)).stdout).toBe('opened\n');
  });

  it("the README's quickstart type-checks with TypeScript 5.2, skipLibCheck off, and prints what it says", async () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const code = /\n## Quickstart\n\n```ts\n([\s\S]*?)```\n/.exec(readme)?.[1];
    expect(code, 'README.md has a ## Quickstart section opening with a ts block').toBeDefined();
    expect(code!.split('\n').length).toBeLessThanOrEqual(25);
    const expected = /console\.log\(.*\); \/\/ (.*)$/m.exec(code!)?.[1];
    expect(expected, "the quickstart's console.log line ends with the output as a comment").toBeDefined();
    writeFileSync(join(app, 'quickstart.mts'), code!);
    const tsconfig = {
      compilerOptions: {
        module: 'nodenext',
        moduleResolution: 'nodenext',
        target: 'es2022',
        strict: true,
        skipLibCheck: false,
        outDir: 'out',
      },
      files: ['quickstart.mts'],
    };
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify(tsconfig));
    const oldest = await sh(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '--version'], app);
    expect(oldest.stdout.trim()).toBe(`Version ${OLDEST_TYPESCRIPT}`);
    await sh(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', '.'], app);
    const { stdout } = await sh(process.execPath, [join(app, 'out', 'quickstart.mjs')], app);
    expect(stdout.trim()).toBe(expected);
  });

  it('a CommonJS TypeScript project (module commonjs, moduleResolution node10) type-checks against the packages', async () => {
    const dir = join(app, 'cjs');
    mkdirSync(dir);
    writeFileSync(
      join(dir, 'main.ts'),
      `import type { TidalDb, RetrieveResults } from 'tidal-core';
export async function trending(db: TidalDb): Promise<RetrieveResults> {
  return db.retrieve({ profile: 'trending', limit: 10 });
}
`,
    );
    // esModuleInterop as `tsc --init` sets it: the declarations import better-sqlite3's types by default import.
    const options = {
      module: 'commonjs',
      moduleResolution: 'node10',
      esModuleInterop: true,
      target: 'es2022',
      strict: true,
      skipLibCheck: false,
      noEmit: true,
    };
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: options, files: ['main.ts'] }));
    await sh(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir], app);
  });

  it('node -e loads tidal-core with require (require(esm)) and with import()', async () => {
    const required = await sh(process.execPath, ['-e', "console.log(typeof require('tidal-core').TidalDb, __dirname)"], app);
    expect(required.stdout).toBe('function .\n');
    const imported = await sh(process.execPath, ['-e', "import('tidal-core').then((m) => console.log(typeof m.TidalDb, __dirname))"], app);
    expect(imported.stdout).toBe('function .\n');
  });

  it('tidal --version, and --redis without tidal-fleet refuses to start naming it', async () => {
    const tidal = join(app, 'node_modules', '.bin', 'tidal');
    expect((await sh(tidal, ['--version'], app)).stdout).toMatch(/^tidal-serve \d+\.\d+\.\d+ \(tidal-core \d+\.\d+\.\d+, Node v/);
    const refused = await sh(tidal, ['serve', '--demo', '--redis', 'redis://127.0.0.1:1'], app).then(
      () => undefined,
      (err: Error) => err.message,
    );
    expect(refused).toContain('tidal serve --redis needs the package tidal-fleet, which is not installed: run `npm install tidal-fleet`');
  });

  it('npx tidal serve answers a request, and stops (drains, exits) when npx gets SIGTERM', async () => {
    writeFileSync(
      join(app, 'schema.json'),
      JSON.stringify({ signals: [{ name: 'view', halfLifeMs: 3_600_000, velocity: true }], metadata: { category: 'string' } }),
    );
    const npx = spawn('npx', ['--no', 'tidal', 'serve', '--path', './data', '--schema', 'schema.json', '--port', '0', '--workers', '1'], {
      cwd: app,
      env: childEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    npx.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: npx.stdout }).on('line', (l) => l.startsWith('tidal serve listening on ') && resolve(l));
        npx.on('exit', (code) => reject(new Error(`npx exited ${code} before listening: ${stderr}`)));
      });
      const url = line.slice('tidal serve listening on '.length);
      const post = (path: string, body: unknown) =>
        fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      expect((await post('/items', { id: 'post-1', text: 'late night jazz', metadata: { category: 'music' } })).status).toBe(200);
      expect((await post('/signals', { item: 'post-1', kind: 'view' })).status).toBe(200);
      const res = await post('/retrieve', { profile: 'trending', limit: 5 });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { items: { id: string }[] }).items.map((i) => i.id)).toEqual(['post-1']);

      const exited = new Promise((resolve) => npx.on('exit', resolve));
      npx.kill('SIGTERM');
      await exited;
      // npx does not pass SIGTERM on; the server notices its launcher is gone, drains and closes
      // its listener. The event awaited is the refusal of a new connection.
      for (;;) {
        const answered = await fetch(`${url}/healthz`).then(
          () => true,
          () => false,
        );
        if (!answered) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    } finally {
      killTree(npx);
    }
  }, 180_000);
});

/** If the test failed half-way: npx goes, and the server follows it within a second (its parent check). */
function killTree(child: ChildProcess): void {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}
