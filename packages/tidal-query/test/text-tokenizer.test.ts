import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { queryTerms, tokenize } from '../src/text/tokenizer.js';

const open: Database.Database[] = [];
afterEach(() => {
  for (const db of open.splice(0)) db.close();
});

/** An FTS5 table with the items table's tokenizer (the default), and its per-token vocabulary. */
function fts(): { db: Database.Database; terms: (texts: readonly string[]) => string[][] } {
  const db = new Database(':memory:');
  open.push(db);
  db.exec(`CREATE VIRTUAL TABLE f USING fts5(text); CREATE VIRTUAL TABLE v USING fts5vocab(f, instance);`);
  const insert = db.prepare('INSERT INTO f (rowid, text) VALUES (?, ?)');
  const read = db.prepare('SELECT doc, term FROM v ORDER BY doc, offset').raw(true);
  return {
    db,
    terms(texts) {
      db.exec('DELETE FROM f');
      db.transaction(() => texts.forEach((t, i) => insert.run(i + 1, t)))();
      const out: string[][] = texts.map(() => []);
      for (const [doc, term] of read.all() as [number, string][]) out[doc - 1]!.push(term);
      return out;
    },
  };
}

describe('tokenize (FTS5 unicode61, remove_diacritics=1)', () => {
  it('splits and folds like FTS5: accents, case, CJK, punctuation', () => {
    const texts = [
      'Crème BRÛLÉE, naïve café — ÀÉÎÕÜ ñ Ç ß ẞ',
      'rock&roll; don’t stop!!! e-mail 3.14 x86_64 ½ ²',
      '東京タワー と 北京 한국어 текст ΕΛΛΗΝΙΚΑ',
      'Ǆemal İstanbul ǅ Ωmega ﬁne Ａｂｃ ℃ 🎸guitar🎸',
      'cafe\u0301 a\u0308b \u0301x tab\there\nnew\u00a0line',
      '',
      '!!!',
    ];
    const want = fts().terms(texts);
    expect(texts.map((t) => tokenize(t))).toEqual(want);
    // Spot checks of the rules, from the FTS5 output above.
    expect(want[0]!.slice(0, 4)).toEqual(['creme', 'brulee', 'naive', 'cafe']);
    expect(want[1]).toContain('rock');
    expect(want[2]![0]).toBe('東京タワー');
  });

  it('agrees with FTS5 on every code point, as a token, inside one and after a capital', () => {
    const f = fts();
    const cps: number[] = [];
    // Every BMP code point, and every 7th above (the tables change in runs, so a stride still
    // crosses every range boundary of SQLite's category table but the longest).
    for (let c = 1; c < 0x110000; c += c < 0x10000 ? 1 : 7) if (c < 0xd800 || c > 0xdfff) cps.push(c);
    const texts: string[] = [];
    for (let i = 0; i < cps.length; i += 512) {
      texts.push(
        cps
          .slice(i, i + 512)
          .map((c) => {
            const ch = String.fromCodePoint(c);
            return `q${ch}q ${ch} Z${ch}`;
          })
          .join(' '),
      );
    }
    const want = f.terms(texts);
    let mismatches = 0;
    for (let i = 0; i < texts.length; i++) {
      const got = tokenize(texts[i]!);
      if (JSON.stringify(got) !== JSON.stringify(want[i])) mismatches++;
    }
    expect(mismatches).toBe(0);
  });

  it('a term is one FTS5 term: quoted in a MATCH it finds exactly the rows holding it', () => {
    const texts = ['Straße São Paulo', 'ÉCOLE école ecole', 'Ωμέγα', 'ǅungla'];
    const terms = new Set(texts.flatMap((t) => tokenize(t)));
    for (const term of terms) expect(tokenize(term)).toEqual([term]);
    const f = fts();
    f.terms(texts);
    const match = f.db.prepare('SELECT rowid FROM f WHERE f MATCH ? ORDER BY rowid').pluck();
    for (const term of terms) {
      const rows = texts.flatMap((t, i) => (tokenize(t).includes(term) ? [i + 1] : []));
      expect(match.all(`"${term}"`)).toEqual(rows);
    }
  });

  it('queryTerms: distinct terms in first-seen order, capped', () => {
    expect(queryTerms('Café cafe CAFÉ jazz, Jazz piano')).toEqual(['cafe', 'jazz', 'piano']);
    expect(queryTerms('a b c d', 2)).toEqual(['a', 'b']);
    expect(queryTerms('!!! ...')).toEqual([]);
  });
});
