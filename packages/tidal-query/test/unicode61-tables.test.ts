/** The committed unicode61 tables are what scripts/extract-unicode61.mjs extracts from SQLite's source. */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const SCRIPT = join(root, 'scripts', 'extract-unicode61.mjs');
const COMMITTED = join(root, 'packages', 'tidal-query', 'src', 'text', 'unicode61-tables.ts');
const SQLITE = join(dirname(createRequire(import.meta.url).resolve('better-sqlite3/package.json')), 'deps', 'sqlite3', 'sqlite3.c');
const dir = mkdtempSync(join(tmpdir(), 'tidal-unicode61-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function extract(args: string[]): { status: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, stderr: r.stderr };
}

/** The part of the amalgamation the script reads: its version and the FTS5 copy of fts5_unicode2.c. */
function excerpt(): string {
  const src = readFileSync(SQLITE, 'latin1');
  const version = /#define SQLITE_VERSION\s+"[^"]+"/.exec(src)![0];
  const from = src.indexOf('static int fts5_remove_diacritic(int c, int bComplex){');
  const data = src.indexOf('static u16 aFts5UnicodeData[] = {', from);
  return `${version}\n${src.slice(from, src.indexOf('};', data) + 2)}\n`;
}

describe('unicode61 tables', () => {
  it('regenerated from the SQLite better-sqlite3 is built from, they are the committed file byte for byte', () => {
    const out = join(dir, 'tables.ts');
    execFileSync(process.execPath, [SCRIPT, '--out', out], { timeout: 60_000 });
    expect(readFileSync(out, 'utf8')).toBe(readFileSync(COMMITTED, 'utf8'));
    expect(extract(['--check']).status).toBe(0);
  });

  it('are read from the source, value for value: a changed entry there changes the output there', () => {
    const src = excerpt();
    const file = join(dir, 'excerpt.c');
    writeFileSync(file, src, 'latin1');
    const same = join(dir, 'same.ts');
    expect(extract(['--sqlite', file, '--out', same]).status).toBe(0);
    expect(readFileSync(same, 'utf8')).toBe(readFileSync(COMMITTED, 'utf8'));
    // aFts5UnicodeData's first entry, 1025, becomes 1026.
    const at = src.indexOf('static u16 aFts5UnicodeData[] = {');
    writeFileSync(file, src.slice(0, at) + src.slice(at).replace('1025,', '1026,'), 'latin1');
    const changed = join(dir, 'changed.ts');
    expect(extract(['--sqlite', file, '--out', changed]).status).toBe(0);
    const diff = readFileSync(changed, 'utf8')
      .split('\n')
      .filter((line, i) => line !== readFileSync(COMMITTED, 'utf8').split('\n')[i]);
    expect(diff).toEqual([expect.stringMatching(/^ {2}1026, 61, 117,/)]);
  });

  it('refuses a source whose code beside the tables no longer matches the port', () => {
    const file = join(dir, 'other.c');
    writeFileSync(file, excerpt().replace('if( c<768 || c>817 ) return 0;', 'if( c<768 || c>818 ) return 0;'), 'latin1');
    const r = extract(['--sqlite', file, '--out', join(dir, 'other.ts')]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('c<768 || c>817');
  });
});
