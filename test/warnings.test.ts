import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES, WARNING_CODES } from 'tidal-core';
import * as load from 'tidal-load';
import { REFUSAL_CODES, SERVE_ERROR_CODES } from 'tidal-serve/internal';

const root = fileURLToPath(new URL('..', import.meta.url));
const doc = readFileSync(join(root, 'docs/warnings.md'), 'utf8');
const rows = [...doc.matchAll(/^\| `(TIDAL_[A-Z_]+)` \|(.*)\|$/gm)].map((m) => ({
  code: m[1]!,
  cells: m[2]!.split(' | ').map((c) => c.trim()),
}));

/** Every TIDAL_ string literal in the packages' sources, with the file it is in. */
function codesInSources(): { code: string; file: string }[] {
  const found: { code: string; file: string }[] = [];
  const packages = join(root, 'packages');
  for (const pkg of readdirSync(packages)) {
    const src = join(packages, pkg, 'src');
    for (const entry of readdirSync(src, { recursive: true, encoding: 'utf8' })) {
      if (!entry.endsWith('.ts')) continue;
      const file = join(src, entry);
      for (const m of readFileSync(file, 'utf8').matchAll(/'(TIDAL_[A-Z_]+)'/g)) found.push({ code: m[1]!, file: `${pkg}/src/${entry}` });
    }
  }
  return found;
}

describe('docs/warnings.md', () => {
  it('lists every warning code, and only those', () => {
    expect(rows.map((r) => r.code).sort()).toEqual([...WARNING_CODES].sort());
  });

  it('says, for each code, when it is raised, what to do and its fields', () => {
    for (const { code, cells } of rows) {
      expect(cells, code).toHaveLength(3);
      for (const cell of cells) expect(cell.length, `${code}: an empty cell`).toBeGreaterThan(10);
      expect(cells[2], code).toMatch(/^`code`, `message`/);
    }
  });
});

describe('the warning catalogue', () => {
  it('lives beside the errors in tidal-load, and tidal-core exports that one', () => {
    expect(load.WARNING_CODES).toBe(WARNING_CODES);
    const both = [...WARNING_CODES, ...ERROR_CODES];
    expect(new Set(both).size, 'a code is both a warning and an error').toBe(both.length);
  });

  it('is complete: every TIDAL_ code in the sources is a catalogued warning or error, and every warning is raised somewhere', () => {
    // tidal-serve's HTTP refusals are answers, not thrown errors: their catalogue is REFUSAL_CODES.
    const known = new Set<string>([...WARNING_CODES, ...ERROR_CODES, ...SERVE_ERROR_CODES, ...Object.values(REFUSAL_CODES)]);
    const found = codesInSources();
    const unknown = found.filter((f) => !known.has(f.code));
    expect(unknown, 'codes used in the sources but in neither catalogue').toEqual([]);
    const raisedOutsideCatalogue = new Set(found.filter((f) => !f.file.endsWith('/warnings.ts')).map((f) => f.code));
    const neverRaised = WARNING_CODES.filter((c) => !raisedOutsideCatalogue.has(c));
    expect(neverRaised, 'catalogued warnings no source raises').toEqual([]);
  });
});
