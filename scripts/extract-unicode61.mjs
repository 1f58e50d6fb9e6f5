// Extracts the Unicode tables of SQLite's unicode61 tokenizer (the FTS5 copy of fts5_unicode2.c in
// the amalgamation) into packages/tidal-query/src/text/unicode61-tables.ts, verbatim: the arrays are
// copied value for value, nothing is recomputed, so the text index splits and folds text as the
// SQLite that better-sqlite3 is built from does.
//
// The source is the sqlite3.c that better-sqlite3 compiles (node_modules/better-sqlite3/deps/sqlite3),
// whose version must be the one the loaded library reports: the tokenizer tests compare the port with
// that library's FTS5. No network.
//
//   node scripts/extract-unicode61.mjs                  rewrite the committed file
//   node scripts/extract-unicode61.mjs --out FILE       write FILE instead
//   node scripts/extract-unicode61.mjs --check          exit 1 when the committed file differs
//   node scripts/extract-unicode61.mjs --sqlite FILE    read another amalgamation (its version is not checked)
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const TARGET = join(root, 'packages', 'tidal-query', 'src', 'text', 'unicode61-tables.ts');

/** Values per line in the generated arrays. */
const PER_LINE = 16;

function fail(message) {
  process.stderr.write(`extract-unicode61: ${message}\n`);
  process.exit(1);
}

function flag(argv, name) {
  const i = argv.indexOf(`--${name}`);
  if (i === -1) return undefined;
  const v = argv[i + 1];
  if (v === undefined || v.startsWith('--')) fail(`--${name} needs a value`);
  return v;
}

/** The text from `from` on, starting at the first `marker`; fails when SQLite's source lacks it. */
function after(src, marker, from = 0) {
  const at = src.indexOf(marker, from);
  if (at === -1) fail(`sqlite3.c has no ${JSON.stringify(marker)}: its fts5_unicode2.c changed; the port must be re-read`);
  return at;
}

/** The body of the C initializer `name[] = { ... };` found at or after `from`. */
function initializer(src, name, from) {
  const marker = `${name}[] = {`;
  const start = after(src, marker, from) + marker.length;
  const end = after(src, '};', start);
  return src.slice(start, end);
}

function numbers(body, name) {
  const out = body
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((s) => {
      if (!/^\d+$/.test(s)) fail(`${name}: ${JSON.stringify(s)} is not a decimal number`);
      return Number(s);
    });
  if (out.length === 0) fail(`${name} is empty`);
  return out;
}

/** aChar: character literals, some OR-ed with HIBIT (0x80). */
function chars(body) {
  const out = [];
  for (const raw of body.split(',')) {
    const s = raw.trim();
    if (s.length === 0) continue;
    const m = /^'(\\0|.)'(\|HIBIT)?$/.exec(s);
    if (!m) fail(`aChar: ${JSON.stringify(s)} is not a character literal`);
    const code = m[1] === '\\0' ? 0 : m[1].charCodeAt(0);
    out.push(m[2] ? code | 0x80 : code);
  }
  return out;
}

/** aEntry: `{iCode, flags, nRange}` triples, flattened. */
function entries(body) {
  const out = [];
  for (const m of body.matchAll(/\{\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\}/g)) out.push(Number(m[1]), Number(m[2]), Number(m[3]));
  const stripped = body.replace(/\{\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\}/g, '').replace(/[\s,]/g, '');
  if (stripped.length > 0 || out.length === 0) fail(`aEntry: unexpected text ${JSON.stringify(stripped.slice(0, 40))}`);
  return out;
}

function mask(src, name, from) {
  const at = after(src, `unsigned int ${name} = 0x`, from);
  const m = /^unsigned int \w+ = 0x([0-9A-Fa-f]+);/.exec(src.slice(at));
  if (!m) fail(`${name} is not a hexadecimal constant`);
  return Number.parseInt(m[1], 16);
}

/** Code the port in tokenizer.ts hard-codes beside the tables: it must still be SQLite's. */
const HARD_CODED = [
  'if( c<768 || c>817 ) return 0;',
  'else if( c>=66560 && c<66600 ){',
  'if( bComplex==0 && (aChar[iRes] & 0x80) ) return c;',
];

export function extract(src) {
  const version = /#define SQLITE_VERSION\s+"([^"]+)"/.exec(src)?.[1];
  if (!version) fail('sqlite3.c has no SQLITE_VERSION');
  // The FTS5 copy of fts5_unicode2.c (FTS3 has its own, with other names, earlier in the file).
  const dia = after(src, 'static int fts5_remove_diacritic(int c, int bComplex){');
  const isDia = after(src, 'static int sqlite3Fts5UnicodeIsdiacritic(int c){', dia);
  const fold = after(src, 'static int sqlite3Fts5UnicodeFold(int c, int eRemoveDiacritic){', isDia);
  const foldEnd = after(src, '\n}\n', fold);
  for (const code of HARD_CODED)
    if (!src.slice(dia, foldEnd).includes(code)) fail(`sqlite3.c no longer has ${JSON.stringify(code)}, which tokenizer.ts ports`);
  return {
    version,
    block: numbers(initializer(src, 'aFts5UnicodeBlock', fold), 'aFts5UnicodeBlock'),
    map: numbers(initializer(src, 'aFts5UnicodeMap', fold), 'aFts5UnicodeMap'),
    data: numbers(initializer(src, 'aFts5UnicodeData', fold), 'aFts5UnicodeData'),
    diaKeys: numbers(initializer(src, 'aDia', dia), 'aDia'),
    diaChars: chars(initializer(src, 'aChar', dia)),
    fold: entries(initializer(src, 'aEntry', fold)),
    offsets: numbers(initializer(src, 'aiOff', fold), 'aiOff'),
    mask0: mask(src, 'mask0', isDia),
    mask1: mask(src, 'mask1', isDia),
  };
}

function array(type, values) {
  const lines = [];
  for (let i = 0; i < values.length; i += PER_LINE) lines.push(`  ${values.slice(i, i + PER_LINE).join(', ')},`);
  return `new ${type}([\n${lines.join('\n')}\n]);`;
}

const hex = (n) => `0x${n.toString(16).toUpperCase().padStart(8, '0')}`;

export function render(t) {
  if (t.map.length !== t.data.length) fail(`aFts5UnicodeMap has ${t.map.length} entries, aFts5UnicodeData ${t.data.length}`);
  if (t.diaKeys.length !== t.diaChars.length) fail(`aDia has ${t.diaKeys.length} entries, aChar ${t.diaChars.length}`);
  return `/**
 * The Unicode tables of SQLite's unicode61 tokenizer (fts5_unicode2.c, public domain), copied
 * verbatim from SQLite ${t.version} so that the text index splits and folds text exactly as FTS5
 * does. Machine-extracted by scripts/extract-unicode61.mjs; do not edit by hand.
 */

/** aFts5UnicodeBlock: per 64 Ki plane, the first entry of aFts5UnicodeMap. */
export const CATEGORY_BLOCK = ${array('Uint16Array', t.block)}

/** aFts5UnicodeMap: the first code point (low 16 bits) of each range. */
export const CATEGORY_MAP = ${array('Uint16Array', t.map)}

/** aFts5UnicodeData: range length << 5 | category. */
export const CATEGORY_DATA = ${array('Uint16Array', t.data)}

/** aDia: code point << 3 | range length of each diacritic-removal rule. */
export const DIACRITIC_KEYS = ${array('Uint16Array', t.diaKeys)}

/** aChar: the ASCII letter each rule maps to; 0x80 marks a "complex" rule (several diacritics). */
export const DIACRITIC_CHARS = ${array('Uint8Array', t.diaChars)}

/** aEntry, flattened: code point, flags, range length. */
export const FOLD_ENTRIES = ${array('Uint16Array', t.fold)}

/** aiOff: the offsets (mod 2^16) the fold rules add. */
export const FOLD_OFFSETS = ${array('Uint16Array', t.offsets)}

/** sqlite3Fts5UnicodeIsdiacritic's masks over U+0300..U+031F and U+0320..U+0331. */
export const DIACRITIC_MASK0 = ${hex(t.mask0)};
export const DIACRITIC_MASK1 = ${hex(t.mask1)};
`;
}

function main(argv) {
  const require = createRequire(import.meta.url);
  const given = flag(argv, 'sqlite');
  const source = given ?? join(dirname(require.resolve('better-sqlite3/package.json')), 'deps', 'sqlite3', 'sqlite3.c');
  const tables = extract(readFileSync(source, 'latin1'));
  if (given === undefined) {
    const Database = require('better-sqlite3');
    const db = new Database(':memory:');
    const loaded = db.prepare('SELECT sqlite_version()').pluck().get();
    db.close();
    if (loaded !== tables.version) fail(`${source} is SQLite ${tables.version}, the loaded better-sqlite3 runs ${loaded}`);
  }
  const text = render(tables);
  if (argv.includes('--check')) {
    if (readFileSync(TARGET, 'utf8') !== text)
      fail(`${TARGET} differs from what SQLite ${tables.version}'s source gives; run node scripts/extract-unicode61.mjs`);
    return;
  }
  writeFileSync(flag(argv, 'out') ?? TARGET, text);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main(process.argv.slice(2));
