/**
 * Packages meet only at their public entries: no file of a package's sources or tests reaches into
 * another package's `src/` or `dist/` by path (or by a bare `<package>/src/...` specifier), and
 * neither do the cross-package tests (test/) or the bench. What they need from a package is exported
 * there (for example `tidal-wal/storage`, `tidal-core/internal`).
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

describe('package boundaries', () => {
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
