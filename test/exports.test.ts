import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as tidal from 'tidal-core';

const root = fileURLToPath(new URL('..', import.meta.url));
const packages = readdirSync(join(root, 'packages'));

interface Manifest {
  name: string;
  exports: Record<string, unknown>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}
const manifest = (pkg: string) => JSON.parse(readFileSync(join(root, 'packages', pkg, 'package.json'), 'utf8')) as Manifest;

/** Whether a package carries its own declarations (otherwise they come from `@types/<name>`). */
function shipsTypes(name: string): boolean {
  const dir = join(root, 'node_modules', name);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { types?: string; typings?: string };
  return Boolean(pkg.types ?? pkg.typings) || existsSync(join(dir, 'index.d.ts'));
}

function declarations(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.d.ts'))
    .map((f) => join(dir, f));
}

describe('tidal-core exports', () => {
  it('the public API, and nothing else', () => {
    expect(Object.keys(tidal).sort()).toEqual(
      [
        'BackpressureError',
        'CapacityError',
        'ClosedError',
        'DEFAULTS',
        'AbortedError',
        'DEFAULT_THRESHOLDS',
        'DegradationLevel',
        'ERROR_CODES',
        'InternalError',
        'InvalidInputError',
        'MAX_BATCH',
        'MAX_ID_LENGTH',
        'MAX_LIMIT',
        'MAX_METADATA_BYTES',
        'MAX_TEXT_LENGTH',
        'MemoryPressureError',
        'OverloadedError',
        'RATE_LIMITER_DEFAULTS',
        'RETRY_AFTER_MAX_MS',
        'RETRY_AFTER_MIN_MS',
        'RateLimitedError',
        'RateLimiterConfig',
        'SESSION_DEFAULTS',
        'SessionClosedError',
        'DirectoryLockedError',
        'TidalDb',
        'TidalDbBuilder',
        'TidalError',
        'TimeoutError',
        'USER_DEFAULTS',
        'WARNING_CODES',
        'WriterFailedError',
        'autoAdmissionLimit',
        'levelName',
        'querySlots',
      ].sort(),
    );
  });
});

describe('package manifests', () => {
  it('each exports map names the entry and its named subpaths alone, so other internals are not importable', () => {
    // tidal-query's worker entry is a second one: tidal-core's worker host wraps it, and runs its
    // queries in the worker's own thread (runInThread). tidal-wal's storage entry is the file format
    // (tables, migrations, typed meta keys), which tidal-core and tidal-query's tests open files with.
    // The internal entries of tidal-core and tidal-serve hold what only the sibling packages, the
    // bench and the tests use; tidal-serve's demo entry is the corpus `tidal serve --demo` loads.
    const extra: Record<string, string[]> = {
      'tidal-core': ['./internal'],
      'tidal-query': ['./worker'],
      'tidal-serve': ['./internal', './demo'],
      'tidal-wal': ['./storage'],
    };
    for (const pkg of packages) expect(Object.keys(manifest(pkg).exports), pkg).toEqual(['.', ...(extra[pkg] ?? [])]);
  });

  it('prom-client is an optional peer of tidal-core, not a dependency', () => {
    const core = manifest('tidal-core');
    expect(core.dependencies?.['prom-client']).toBeUndefined();
    expect(core.peerDependencies?.['prom-client']).toBeDefined();
    expect(core.peerDependenciesMeta?.['prom-client']?.optional).toBe(true);
  });

  it('every package a published declaration names is a declared dependency or peer, with its types', () => {
    for (const pkg of packages) {
      const m = manifest(pkg);
      const declared = new Set([...Object.keys(m.dependencies ?? {}), ...Object.keys(m.peerDependencies ?? {})]);
      const optional = Object.entries(m.peerDependenciesMeta ?? {}).filter(([, meta]) => meta.optional).map(([name]) => name);
      for (const file of declarations(join(root, 'packages', pkg, 'dist'))) {
        const where = `${pkg}: ${file.slice(root.length)}`;
        const text = readFileSync(file, 'utf8');
        for (const [, name] of text.matchAll(/(?:from |import\()['"]((?:@[^/'"]+\/)?[^./'"][^/'"]*)/g)) {
          if (name!.startsWith('node:')) continue;
          expect(declared.has(name!), `${where} names ${name}`).toBe(true);
          if (!shipsTypes(name!)) expect(declared.has(`@types/${name}`), `${where} names ${name}, whose types are @types/${name}`).toBe(true);
          // An application without an optional peer installed must still type-check against tidal.
          expect(optional, `${where} names the optional peer ${name}`).not.toContain(name);
        }
      }
    }
  });
});
