/**
 * Packages meet only at their public entries: no file of a package's sources or tests reaches into
 * another package's `src/` or `dist/` by path (or by a bare `<package>/src/...` specifier), and
 * neither do the cross-package tests (test/) or the bench. What they need from a package is exported
 * there (for example `tidal-wal/storage`, `tidal-core/internal`). A package's tests import nothing
 * above it: no package of a higher level, no bench, no cross-package test helper; what serves them
 * lives in their own `test/helpers/`, and a test of several packages lives in test/.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const packagesDir = join(root, 'packages');
const packages = readdirSync(packagesDir);

const SOURCE = /\.(?:[cm]?ts|[cm]?js)$/;
// Static imports and re-exports, dynamic import(), require() and `new URL(..., import.meta.url)`.
const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire\s*\(\s*|\bnew URL\(\s*)(['"`])([^'"`\n]+)\1/g;

function sourceFiles(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir, { recursive: true, encoding: 'utf8' });
  } catch {
    return [];
  }
  return names.filter((f) => SOURCE.test(f) && !f.split(sep).includes('node_modules')).map((f) => join(dir, f));
}

/** The other package and the folder of it (`src`, `dist`) that `specifier` in `file` of `own` reaches, or null. */
export function crossing(own: string, file: string, specifier: string): string | null {
  if (specifier.startsWith('.')) {
    const target = relative(packagesDir, resolve(dirname(file), specifier)).split(sep);
    if (target[0] === '..' || target.length < 2) return null;
    const [pkg, folder] = target;
    return pkg !== own && packages.includes(pkg!) && (folder === 'src' || folder === 'dist') ? `${pkg}/${folder}` : null;
  }
  const [pkg, folder] = specifier.split('/');
  return pkg !== own && packages.includes(pkg!) && (folder === 'src' || folder === 'dist') ? `${pkg}/${folder}` : null;
}

/**
 * Each package's level: 0 for a package that depends on no other, else one above the highest of the
 * packages it depends on (tidal-load 0; tidal-wal, tidal-query and tidal-fleet 1; tidal-core 2; tidal-serve 3).
 */
function levels(): Map<string, number> {
  const deps = new Map(
    packages.map((name) => {
      const manifest = JSON.parse(readFileSync(join(packagesDir, name, 'package.json'), 'utf8')) as {
        dependencies?: Record<string, string>;
      };
      return [name, Object.keys(manifest.dependencies ?? {}).filter((d) => packages.includes(d))];
    }),
  );
  const level = new Map<string, number>();
  const of = (name: string, path: string[] = []): number => {
    const known = level.get(name);
    if (known !== undefined) return known;
    if (path.includes(name)) throw new Error(`a dependency cycle: ${[...path, name].join(' → ')}`);
    const l = Math.max(-1, ...deps.get(name)!.map((d) => of(d, [...path, name]))) + 1;
    level.set(name, l);
    return l;
  };
  for (const name of packages) of(name);
  return level;
}

/**
 * What `specifier` in a test file of `own` reaches above it: a package of a higher level (by name or
 * by path), the bench, or the cross-package tests at the root; null when it stays at its level or below.
 */
export function reachesUp(own: string, file: string, specifier: string, level: Map<string, number>): string | null {
  const above = (name: string): boolean => packages.includes(name) && level.get(name)! > level.get(own)!;
  if (specifier.startsWith('.')) {
    const target = relative(root, resolve(dirname(file), specifier)).split(sep);
    if (target[0] === 'packages') return target[1] !== undefined && above(target[1]) ? `packages/${target[1]}` : null;
    return target[0] === '..' ? null : target[0]!;
  }
  const [name] = specifier.split('/');
  if (name === 'tidal-bench') return 'bench';
  return above(name!) ? name! : null;
}

describe('package boundaries', () => {
  it("no package's tests import the bench, the cross-package tests or a package above it", () => {
    const found: string[] = [];
    let scanned = 0;
    const level = levels();
    expect(level.get('tidal-load')).toBe(0);
    expect(level.get('tidal-serve')).toBeGreaterThan(level.get('tidal-core')!);
    for (const pkg of packages) {
      for (const file of sourceFiles(join(packagesDir, pkg, 'test'))) {
        scanned++;
        for (const [, , specifier] of readFileSync(file, 'utf8').matchAll(SPECIFIER)) {
          const reached = reachesUp(pkg, file, specifier!, level);
          if (reached !== null) found.push(`${relative(root, file)} imports ${specifier} (${reached})`);
        }
      }
    }
    expect(scanned).toBeGreaterThan(50);
    expect(found).toEqual([]);
  });

  it("no package's sources or tests import another package's src/ or dist/", () => {
    const found: string[] = [];
    let scanned = 0;
    for (const pkg of packages) {
      for (const part of ['src', 'test']) {
        for (const file of sourceFiles(join(packagesDir, pkg, part))) {
          scanned++;
          const text = readFileSync(file, 'utf8');
          for (const [, , specifier] of text.matchAll(SPECIFIER)) {
            const reached = crossing(pkg, file, specifier!);
            if (reached !== null) found.push(`${relative(root, file)} imports ${specifier} (${reached})`);
          }
        }
      }
    }
    expect(scanned).toBeGreaterThan(100);
    expect(found).toEqual([]);
  });

  it("the cross-package tests and the bench import no package's src/ or dist/", () => {
    const found: string[] = [];
    const files = [
      ...sourceFiles(join(root, 'test')),
      ...sourceFiles(join(root, 'bench', 'src')),
      ...sourceFiles(join(root, 'bench', 'probes')),
    ];
    for (const file of files) {
      for (const [, , specifier] of readFileSync(file, 'utf8').matchAll(SPECIFIER)) {
        const reached = crossing('', file, specifier!);
        if (reached !== null) found.push(`${relative(root, file)} imports ${specifier} (${reached})`);
      }
    }
    expect(files.length).toBeGreaterThan(50);
    expect(found).toEqual([]);
  });

  it('tidal_meta is read and written only through the typed keys of tidal-wal/storage', () => {
    const owner = join(packagesDir, 'tidal-wal', 'src', 'storage') + sep;
    // SQL naming the table, or a stored key name as a literal (comments may name them).
    const raw = /(['"`])[^'"`\n]*\btidal_meta\b[^'"`\n]*\1|(['"`])(?:last_seq|checkpoint_seq|checkpoint_chunk_bytes|cursor_secret)\2/;
    const comment = /^\s*(?:\*|\/\/|\/\*)/;
    const found: string[] = [];
    for (const pkg of packages) {
      for (const file of sourceFiles(join(packagesDir, pkg, 'src'))) {
        if (file.startsWith(owner)) continue;
        const lines = readFileSync(file, 'utf8').split('\n');
        lines.forEach((line, i) => {
          if (!comment.test(line) && raw.test(line)) found.push(`${relative(root, file)}:${i + 1}: ${line.trim()}`);
        });
      }
    }
    expect(found).toEqual([]);
  });

  it('every table and index of the file format is created in tidal-wal/src/storage/ddl.ts alone', () => {
    const ddl = join(packagesDir, 'tidal-wal', 'src', 'storage', 'ddl.ts');
    const create = /\bCREATE\s+(?:VIRTUAL\s+|UNIQUE\s+)?(?:TABLE|INDEX)\b|\bALTER\s+TABLE\b/i;
    const found: string[] = [];
    for (const pkg of packages) {
      for (const file of sourceFiles(join(packagesDir, pkg, 'src'))) {
        if (file !== ddl && create.test(readFileSync(file, 'utf8'))) found.push(relative(root, file));
      }
    }
    expect(found).toEqual([]);
    expect(readFileSync(ddl, 'utf8')).toMatch(create);
  });

  it('the scan sees each way of reaching into another package', () => {
    const file = join(packagesDir, 'tidal-query', 'test', 'x.test.ts');
    expect(crossing('tidal-query', file, '../../tidal-core/src/storage.js')).toBe('tidal-core/src');
    expect(crossing('tidal-query', file, '../../tidal-wal/dist/index.js')).toBe('tidal-wal/dist');
    expect(crossing('tidal-query', file, 'tidal-core/src/db.js')).toBe('tidal-core/src');
    // Its own sources and build, public entries and subpaths, and other folders are fine.
    expect(crossing('tidal-query', file, '../src/signals/store.js')).toBeNull();
    expect(crossing('tidal-query', file, '../dist/signals/store.js')).toBeNull();
    expect(crossing('tidal-query', file, 'tidal-wal/storage')).toBeNull();
    expect(crossing('tidal-query', file, 'tidal-core')).toBeNull();
    expect(crossing('tidal-query', file, '../../../bench/src/random.js')).toBeNull();
    // A package's tests stay at its level or below: no upper package by name or path, no bench, no root tests.
    const level = levels();
    expect(reachesUp('tidal-query', file, '../../../bench/src/random.js', level)).toBe('bench');
    expect(reachesUp('tidal-query', file, 'tidal-serve/demo', level)).toBe('tidal-serve');
    expect(reachesUp('tidal-query', file, '../../tidal-core/test/helpers.js', level)).toBe('packages/tidal-core');
    expect(reachesUp('tidal-query', file, '../../../test/helpers.js', level)).toBe('test');
    expect(reachesUp('tidal-query', file, 'tidal-bench', level)).toBe('bench');
    expect(reachesUp('tidal-query', file, './helpers/random.js', level)).toBeNull();
    expect(reachesUp('tidal-query', file, 'tidal-load', level)).toBeNull();
    expect(reachesUp('tidal-query', file, 'tidal-wal/storage', level)).toBeNull();
    expect(reachesUp('tidal-query', file, 'vitest', level)).toBeNull();
    const matched = [
      ...`import { a } from '../../tidal-core/src/a.js';\nconst m = await import("../../tidal-load/src/b.js");
export * from '../../tidal-wal/src/c.js';\nnew URL('../../tidal-core/dist/d.js', import.meta.url);`.matchAll(SPECIFIER),
    ].map((m) => m[2]);
    expect(matched).toEqual([
      '../../tidal-core/src/a.js',
      '../../tidal-load/src/b.js',
      '../../tidal-wal/src/c.js',
      '../../tidal-core/dist/d.js',
    ]);
  });
});
