/**
 * SQLite FTS5's default tokenizer, `unicode61` with its default options (categories "L* N* Co",
 * remove_diacritics=1, no tokenchars or separators), ported from fts5_tokenize.c and
 * fts5_unicode2.c so that the text index holds the same terms, and the same document lengths, as
 * an FTS5 table with the default tokenizer (the tests' oracle):
 *
 * - a token starts at a token character: Unicode categories L*, N*, Co, and code points SQLite's
 *   tables leave unassigned (category 0), except NUL; everything else separates;
 * - inside a token, a combining diacritic (U+0300–U+0331, by SQLite's mask) continues it;
 * - each character is case-folded by SQLite's table (simple folding, BMP and Deseret only), then a
 *   letter with one diacritic becomes its base letter and the diacritics themselves are dropped.
 *
 * Terms are JavaScript strings of the folded code points (FTS5 stores the same code points as
 * UTF-8). Known difference: FTS5 truncates a term to 32 768 UTF-8 bytes; here a term is never cut.
 */
import {
  CATEGORY_BLOCK,
  CATEGORY_DATA,
  CATEGORY_MAP,
  DIACRITIC_CHARS,
  DIACRITIC_KEYS,
  DIACRITIC_MASK0,
  DIACRITIC_MASK1,
  FOLD_ENTRIES,
  FOLD_OFFSETS,
} from './unicode61-tables.js';

/** Token categories of "L* N* Co", plus category 0 (SQLite's unicodeSetCategories sets it always). */
const TOKEN_CATEGORY = new Uint8Array(32);
for (const c of [0, 5, 6, 7, 8, 9, 30, 13, 14, 15, 31]) TOKEN_CATEGORY[c] = 1;

/** sqlite3Fts5UnicodeAscii: the ASCII token characters, from the first entries of the table. */
const ASCII_TOKEN = new Uint8Array(128);
{
  let i = 0;
  let t = 0;
  while (i < 128) {
    const token = TOKEN_CATEGORY[CATEGORY_DATA[t]! & 0x1f]!;
    const n = (CATEGORY_DATA[t]! >> 5) + i;
    for (; i < 128 && i < n; i++) ASCII_TOKEN[i] = token;
    t++;
  }
  ASCII_TOKEN[0] = 0;
}

/** sqlite3Fts5UnicodeCategory. */
function category(cp: number): number {
  if (cp >= 1 << 20) return 0;
  let lo = CATEGORY_BLOCK[cp >> 16]!;
  let hi = CATEGORY_BLOCK[(cp >> 16) + 1]!;
  const key = cp & 0xffff;
  let res = -1;
  while (hi > lo) {
    const mid = (hi + lo) >> 1;
    if (key >= CATEGORY_MAP[mid]!) {
      res = mid;
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (res < 0) return 0;
  if (key >= CATEGORY_MAP[res]! + (CATEGORY_DATA[res]! >> 5)) return 0;
  const ret = CATEGORY_DATA[res]! & 0x1f;
  if (ret !== 30) return ret;
  return (key - CATEGORY_MAP[res]!) & 1 ? 5 : 9;
}

function isTokenChar(cp: number): boolean {
  return TOKEN_CATEGORY[category(cp)] === 1;
}

/** sqlite3Fts5UnicodeIsdiacritic. */
function isDiacritic(cp: number): boolean {
  if (cp < 768 || cp > 817) return false;
  return cp < 800 ? (DIACRITIC_MASK0 & (1 << (cp - 768))) !== 0 : (DIACRITIC_MASK1 & (1 << (cp - 800))) !== 0;
}

/** fts5_remove_diacritic in its "simple" mode (remove_diacritics=1). */
function removeDiacritic(c: number): number {
  const key = ((c << 3) | 7) >>> 0;
  let res = 0;
  let lo = 0;
  let hi = DIACRITIC_KEYS.length - 1;
  while (hi >= lo) {
    const mid = (hi + lo) >> 1;
    if (key >= DIACRITIC_KEYS[mid]!) {
      res = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  const ch = DIACRITIC_CHARS[res]!;
  if (ch & 0x80) return c;
  const base = DIACRITIC_KEYS[res]!;
  return c > (base >> 3) + (base & 7) ? c : ch & 0x7f;
}

/** sqlite3Fts5UnicodeFold with remove_diacritics=1, for a code point ≥ 128. 0 means "drop it". */
function foldNonAscii(c: number): number {
  if (c < 65536) {
    let lo = 0;
    let hi = FOLD_ENTRIES.length / 3 - 1;
    let res = -1;
    while (hi >= lo) {
      const mid = (hi + lo) >> 1;
      if (c - FOLD_ENTRIES[mid * 3]! >= 0) {
        res = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    let ret = c;
    const code = FOLD_ENTRIES[res * 3]!;
    const flags = FOLD_ENTRIES[res * 3 + 1]!;
    const range = FOLD_ENTRIES[res * 3 + 2]!;
    if (c < code + range && (1 & flags & (code ^ c)) === 0) ret = (c + FOLD_OFFSETS[flags >> 1]!) & 0xffff;
    return removeDiacritic(ret);
  }
  if (c >= 66560 && c < 66600) return c + 40;
  return c;
}

/** Non-ASCII code points folded so far (the same few recur: accents, CJK of one text). */
const FOLD_CACHE = new Map<number, number>();
const ALNUM_CACHE = new Map<number, boolean>();
const CACHE_MAX = 1 << 16;

function cachedFold(cp: number): number {
  let f = FOLD_CACHE.get(cp);
  if (f === undefined) {
    f = foldNonAscii(cp);
    if (FOLD_CACHE.size < CACHE_MAX) FOLD_CACHE.set(cp, f);
  }
  return f;
}

function cachedAlnum(cp: number): boolean {
  let a = ALNUM_CACHE.get(cp);
  if (a === undefined) {
    a = isTokenChar(cp);
    if (ALNUM_CACHE.size < CACHE_MAX) ALNUM_CACHE.set(cp, a);
  }
  return a;
}

/**
 * Splits `text` into FTS5 unicode61 terms, in order (repeats kept: their count is the document
 * length FTS5 records). A lone surrogate reads as U+FFFD, as it does once SQLite has the text as
 * UTF-8; so do U+FFFE and U+FFFF (SQLite's READ_UTF8).
 */
export function tokenize(text: string): string[] {
  const out: string[] = [];
  const n = text.length;
  let i = 0;
  // Code points of the current token, used only when it is not a plain slice of `text`.
  let buf: number[] = [];
  while (i < n) {
    // Skip separators.
    let start = -1;
    let first = 0;
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c < 128) {
        if (ASCII_TOKEN[c]) {
          start = i;
          first = c;
          break;
        }
        i++;
      } else {
        const cp = codePoint(text, i, c);
        if (cachedAlnum(cp)) {
          start = i;
          first = cp;
          break;
        }
        i += cp > 0xffff ? 2 : 1;
      }
    }
    if (start < 0) break;
    // The token: a slice of the text while every character is a lower-case ASCII token character,
    // the folded code points from the first one that is not.
    let plain = true;
    let cp = first;
    for (;;) {
      if (cp < 128) {
        if (!ASCII_TOKEN[cp]) break;
        if (cp >= 65 && cp <= 90) {
          if (plain) {
            plain = false;
            buf = [];
            for (let j = start; j < i; j++) buf.push(text.charCodeAt(j));
          }
          buf.push(cp + 32);
        } else if (!plain) {
          buf.push(cp);
        }
        i++;
      } else {
        if (!cachedAlnum(cp) && !isDiacritic(cp)) break;
        if (plain) {
          plain = false;
          buf = [];
          for (let j = start; j < i; j++) buf.push(text.charCodeAt(j));
        }
        const f = cachedFold(cp);
        if (f !== 0) buf.push(f);
        i += cp > 0xffff ? 2 : 1;
      }
      if (i >= n) break;
      const c = text.charCodeAt(i);
      cp = c < 128 ? c : codePoint(text, i, c);
    }
    out.push(plain ? text.slice(start, i) : fromCodePoints(buf));
  }
  return out;
}

function fromCodePoints(cps: number[]): string {
  if (cps.length <= 4096) return String.fromCodePoint(...cps);
  let s = '';
  for (let j = 0; j < cps.length; j += 4096) s += String.fromCodePoint(...cps.slice(j, j + 4096));
  return s;
}

function codePoint(text: string, i: number, c: number): number {
  if (c >= 0xd800 && c <= 0xdbff) {
    const d = i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
    if (d >= 0xdc00 && d <= 0xdfff) return ((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000;
    return 0xfffd;
  }
  if (c >= 0xdc00 && c <= 0xdfff) return 0xfffd;
  if (c === 0xfffe || c === 0xffff) return 0xfffd;
  return c;
}

/**
 * A query's terms: its distinct {@link tokenize} terms in first-seen order, at most `max`. Each
 * is one FTS5 term, so `"term"` in an FTS5 MATCH expression means exactly it.
 */
export function queryTerms(text: string, max = Number.POSITIVE_INFINITY): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  for (const t of tokenize(text)) {
    if (out.length >= max) break;
    if (t.length === 0 || seen.has(t)) continue;
    seen.add(t);
    out.push(t);
  }
  return out;
}
