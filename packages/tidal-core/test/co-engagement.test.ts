/**
 * The co-engagement index over a real file: batches of pairs are logged, lists written only when
 * the log must give up the rows that changed them, and whatever the log's bound and the order of
 * commits, rolled-back batches and reopens (a crash between two batches), every list equals the
 * one an index that never reopened holds, and the log stays within its bound.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { STORAGE_VERSION, openStorage } from 'tidal-wal/storage';
import { CoEngagementIndex, RELATED_HALF_LIFE_MS, RELATED_PARTNERS } from '../src/co-engagement.js';

const root = mkdtempSync(join(tmpdir(), 'tidal-co-engagement-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const ITEMS = 12;
const NOW = 1_800_000_000_000;

function open(file: string): Database.Database {
  const db = new Database(file);
  openStorage(db, file);
  return db;
}

/** One batch through the write path's steps: begin, count, persist in the transaction, apply after it. */
function batch(db: Database.Database, index: CoEngagementIndex, pairs: readonly [number, number, number][], commit = true): void {
  index.begin();
  for (const [a, b, at] of pairs) index.record(a, b, at);
  try {
    db.transaction(() => {
      index.persist();
      if (!commit) throw new Error('rolled back');
    })();
  } catch (err) {
    if (commit) throw err;
    return;
  }
  index.apply();
}

function lists(index: CoEngagementIndex): Map<number, number>[] {
  return Array.from({ length: ITEMS }, (_, item) => index.partners(item, NOW));
}

const pair = fc.tuple(fc.nat(ITEMS - 1), fc.nat(ITEMS - 1), fc.integer({ min: 0, max: 3_600_000 }));
const step = fc.record({
  pairs: fc.array(pair, { maxLength: 10 }),
  outcome: fc.constantFrom('commit', 'commit', 'commit', 'rollback', 'reopen'),
});

describe('co-engagement index: logged pairs, lists written when the log gives their rows up', () => {
  it('equals an index that never reopened, after any commits, rollbacks and reopens, within the log bound', () => {
    let run = 0;
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 40 }), fc.array(step, { minLength: 1, maxLength: 60 }), (bound, steps) => {
        const file = join(root, `p${run++}.db`);
        let db = open(file);
        let index = new CoEngagementIndex(db, bound);
        const refDb = open(':memory:');
        const ref = new CoEngagementIndex(refDb, Number.MAX_SAFE_INTEGER);
        try {
          for (const s of steps) {
            const pairs = s.pairs.map(([a, b, at]) => [a, b, NOW - at] as [number, number, number]);
            batch(db, index, pairs, s.outcome !== 'rollback');
            if (s.outcome !== 'rollback') batch(refDb, ref, pairs);
            if (s.outcome === 'reopen') {
              db.close();
              db = open(file);
              index = new CoEngagementIndex(db, bound);
            }
            expect(lists(index)).toEqual(lists(ref));
            const rows = db.prepare('SELECT count(*) AS n, coalesce(sum(length(entries)), 0) / 24 AS entries FROM related_log').get() as {
              n: number;
              entries: number;
            };
            expect(index.log).toEqual({ rows: rows.n, entries: rows.entries, unwritten: index.log.unwritten });
            expect(rows.entries).toBeLessThanOrEqual(bound);
          }
        } finally {
          db.close();
          refDb.close();
          rmSync(file, { force: true });
        }
      }),
      { numRuns: 200 },
    );
  });

  it('writes a list once however many batches changed it, when the log gives up the rows', () => {
    const db = open(join(root, 'once.db'));
    const index = new CoEngagementIndex(db, 1_000);
    const listRows = () => db.prepare('SELECT count(*) FROM item_related').pluck().get() as number;
    const changes = () => db.prepare('SELECT total_changes()').pluck().get() as number;
    for (let b = 0; b < 100; b++) batch(db, index, [[0, 1 + (b % 3), NOW - b]]);
    // 200 entries in 100 rows, under the bound: every batch one log row, no list written.
    expect(listRows()).toBe(0);
    expect(changes()).toBe(100);
    expect(index.log).toEqual({ rows: 100, entries: 200, unwritten: 4 });
    // A batch of 900 entries: the 50 oldest rows go, so the four lists they changed are written,
    // once each (two of them changed by the batch too, and written with its pairs): one log row
    // in, four lists, 50 rows out; the batch's other lists stay unwritten.
    batch(db, index, [[0, 1, NOW], ...Array.from({ length: 449 }, (_, i) => [5, 6 + (i % 6), NOW - i] as [number, number, number])]);
    expect(changes()).toBe(100 + 1 + 4 + 50);
    expect(listRows()).toBe(4);
    expect(index.log).toEqual({ rows: 51, entries: 1_000, unwritten: 7 });
    db.close();
  });

  it('opens a format-5 file: its stored lists hold every pair, the log starts empty', () => {
    const file = join(root, 'v5.db');
    const raw = new Database(file);
    openStorage(raw, file);
    raw.exec(`DROP TABLE item_related; DROP TABLE related_log;
      CREATE TABLE item_related (ordinal INTEGER PRIMARY KEY, partners BLOB NOT NULL)`);
    const entries = Float64Array.from([7, 2.5, NOW - 1000, 8, 1, NOW - 2000]);
    raw.prepare('INSERT INTO item_related (ordinal, partners) VALUES (?, ?)').run(3, Buffer.from(entries.buffer));
    raw.pragma('user_version = 5');
    raw.close();
    const db = open(file);
    expect(db.pragma('user_version', { simple: true })).toBe(STORAGE_VERSION);
    const index = new CoEngagementIndex(db, 4);
    expect([...index.partners(3, NOW - 1000).keys()]).toEqual([7, 8]);
    expect(index.partners(3, NOW - 1000).get(7)).toBe(2.5);
    batch(db, index, [[3, 9, NOW]]);
    db.close();
    const again = new CoEngagementIndex(open(file), 4);
    expect([...again.partners(3, NOW).keys()]).toEqual([7, 8, 9]);
    expect(again.log).toEqual({ rows: 1, entries: 2, unwritten: 2 });
  });

  it('decays every score as a count per pair would, whatever the order of the times (one time a list, Float32 scores)', () => {
    const lambda = Math.LN2 / RELATED_HALF_LIFE_MS;
    let run = 0;
    fc.assert(
      fc.property(fc.array(fc.tuple(pair, fc.integer({ min: 0, max: 30 * 86_400_000 })), { minLength: 1, maxLength: 200 }), (events) => {
        const db = open(join(root, `m${run++}.db`));
        const index = new CoEngagementIndex(db);
        // The model: per (item, partner) a Float64 count and the time it refers to.
        const model = new Map<string, { s: number; at: number }>();
        const bump = (a: number, b: number, at: number) => {
          const e = model.get(`${a},${b}`);
          if (e === undefined) model.set(`${a},${b}`, { s: 1, at });
          else if (at >= e.at) model.set(`${a},${b}`, { s: e.s * Math.exp(-lambda * (at - e.at)) + 1, at });
          else e.s += Math.exp(-lambda * (e.at - at));
        };
        for (const [[a, b], at] of events) {
          batch(db, index, [[a, b, NOW - at]]);
          if (a !== b) {
            bump(a, b, NOW - at);
            bump(b, a, NOW - at);
          }
        }
        for (let item = 0; item < ITEMS; item++) {
          const got = index.partners(item, NOW);
          for (const [partner, score] of got) {
            const e = model.get(`${item},${partner}`)!;
            const want = e.s * Math.exp(-lambda * (NOW - e.at));
            expect(Math.abs(score - want)).toBeLessThanOrEqual(1e-5 * want + 1e-30);
          }
          expect(got.size).toBe([...model.keys()].filter((k) => k.startsWith(`${item},`)).length);
        }
        db.close();
      }),
      { numRuns: 100 },
    );
  });

  it('keeps a full list to its bound through the log', () => {
    const file = join(root, 'full.db');
    let db = open(file);
    const index = new CoEngagementIndex(db, 64);
    for (let p = 1; p <= RELATED_PARTNERS + 10; p++) batch(db, index, [[0, 100 + p, NOW - p]]);
    const live = index.partners(0, NOW);
    db.close();
    db = open(file);
    expect(new CoEngagementIndex(db, 64).partners(0, NOW)).toEqual(live);
    expect(live.size).toBe(RELATED_PARTNERS);
    db.close();
  });
});
