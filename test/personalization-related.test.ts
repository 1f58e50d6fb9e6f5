/**
 * Profile `related` against an oracle written out here: every user signal of a kind without a
 * negative preference rate pairs its item with the user's 8 latest other seen items (seen before
 * the signal), each pair counting e^(−λ·age) in both items' lists; the lists are bounded (the
 * smallest count goes); the index is the same after close and reopen, and hard negatives hold.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidInputError, TidalDb, USER_DEFAULTS, type DegradationLevelName, type SignalInput } from 'tidal-core';
// The pool behind the facade, from tidal-core's internal entry (the same build as 'tidal-core').
import { internalsOf } from 'tidal-core/internal';
import { HOUR, NOW, TestClock, mulberry32 } from './helpers.js';
import { USER_SCHEMA } from './user-helpers.js';

const root = mkdtempSync(join(tmpdir(), 'tidal-related-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const LEVELS: DegradationLevelName[] = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'];
const LAMBDA = Math.LN2 / USER_DEFAULTS.relatedHalfLifeMs;
const WINDOW = USER_DEFAULTS.relatedWindow;
/** A list's scores are Float32 (docs/api.md, `related`): within 1e-6 of the count, relatively. */
function expectScore(got: number, want: number): void {
  expect(Math.abs(got - want)).toBeLessThanOrEqual(1e-6 * Math.abs(want));
}

const ITEMS = Array.from({ length: 20 }, (_, i) => `r${i}`);
const USERS = ['a', 'b', 'c', 'd'];

function stream(): SignalInput[] {
  const rand = mulberry32(0xc0e);
  const out: SignalInput[] = [];
  for (let n = 0; n < 160; n++) {
    const user = USERS[Math.floor(rand() * USERS.length)]!;
    // Each user keeps to a neighbourhood of items, so co-engagement has structure.
    const base = USERS.indexOf(user) * 4;
    const item = ITEMS[(base + Math.floor(rand() * 8)) % ITEMS.length]!;
    out.push({ item, kind: ['view', 'like', 'skip'][Math.floor(rand() * 3)]!, user, at: NOW - Math.floor(rand() * 72) * HOUR });
  }
  return out;
}

/** The written-out index: per item, partner → Σ e^(−λ·(now − at)) over its pair events. */
function oracle(signals: readonly SignalInput[]): Map<string, Map<string, number>> {
  const seen = new Map<string, string[]>();
  const index = new Map<string, Map<string, number>>();
  const add = (x: string, y: string, at: number): void => {
    let m = index.get(x);
    if (!m) index.set(x, (m = new Map<string, number>()));
    m.set(y, (m.get(y) ?? 0) + Math.exp(-LAMBDA * (NOW - at)));
  };
  for (const s of signals) {
    const list = seen.get(s.user!) ?? [];
    if (s.kind !== 'skip') {
      const partners = list.filter((x) => x !== s.item).slice(-WINDOW);
      for (const y of partners) {
        add(s.item, y, s.at!);
        add(y, s.item, s.at!);
      }
    }
    seen.set(s.user!, [...list.filter((x) => x !== s.item), s.item]);
  }
  return index;
}

function ranking(
  index: Map<string, Map<string, number>>,
  item: string,
  skip: (id: string) => boolean = () => false,
): { id: string; score: number }[] {
  return [...(index.get(item) ?? new Map<string, number>())]
    .filter(([id]) => !skip(id))
    .map(([id, score]) => ({ id, score }))
    .sort((x, y) => y.score - x.score || ITEMS.indexOf(x.id) - ITEMS.indexOf(y.id));
}

async function open(dir: string, clock: TestClock): Promise<TidalDb> {
  return TidalDb.builder().path(dir).workers(1).clock(clock.read).schema(USER_SCHEMA).open();
}

describe('related', () => {
  it('ranks the co-engaged items as written out, at every level and after a reopen', async () => {
    const dir = join(root, 'oracle');
    const clock = new TestClock(NOW);
    let db = await open(dir, clock);
    try {
      await db.upsertItems(ITEMS.map((id, i) => ({ id, metadata: { creator: `c${i % 3}` }, createdAt: NOW - i * HOUR })));
      await db.upsertUsers(USERS.map((id) => ({ id })));
      const signals = stream();
      // In several batches, so lists staged by one batch are published before the next.
      for (let i = 0; i < signals.length; i += 40) await db.signals(signals.slice(i, i + 40));
      const index = oracle(signals);
      const check = async (when: string): Promise<void> => {
        let nonEmpty = 0;
        for (const item of ITEMS) {
          const want = ranking(index, item);
          if (want.length > 0) nonEmpty++;
          expect(want.length).toBeLessThanOrEqual(USER_DEFAULTS.relatedPartners);
          for (const level of LEVELS) {
            const r = await db.retrieve({ profile: 'related', item, level, limit: 1000 });
            expect(
              r.items.map((x) => x.id),
              `${item} ${level} ${when}`,
            ).toEqual(want.map((w) => w.id));
            for (let i = 0; i < want.length; i++) expectScore(r.items[i]!.score, want[i]!.score);
          }
        }
        expect(nonEmpty).toBeGreaterThan(10);
      };
      await check('live');
      await db.close();
      db = await open(dir, clock);
      await check('after reopen');

      // Hard negatives and cursors, like every profile.
      await db.hide({ user: 'a', item: ranking(index, 'r1')[0]!.id });
      await db.block({ user: 'a', creator: 'c2' });
      const hidden = ranking(index, 'r1')[0]!.id;
      const want = ranking(index, 'r1', (id) => id === hidden || ITEMS.indexOf(id) % 3 === 2).map((w) => w.id);
      const got: string[] = [];
      let cursor: string | undefined;
      for (;;) {
        const r = await db.retrieve({ profile: 'related', item: 'r1', user: 'a', limit: 2, ...(cursor ? { cursor } : { paginate: true }) });
        got.push(...r.items.map((x) => x.id));
        if (!r.nextCursor) break;
        cursor = r.nextCursor;
      }
      expect(got).toEqual(want);
    } finally {
      await db.close();
    }
  });

  it(`keeps at most ${USER_DEFAULTS.relatedPartners} partners per item (Space-Saving)`, async () => {
    const db = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(USER_SCHEMA)
      .open();
    try {
      const n = USER_DEFAULTS.relatedPartners + 10;
      await db.upsertItems([{ id: 'hub' }, ...Array.from({ length: n }, (_, i) => ({ id: `p${i}` }))]);
      await db.upsertUsers(Array.from({ length: n }, (_, i) => ({ id: `u${i}` })));
      // User i engages p_i, then the hub (i + 1) times: the hub's pair with p_i counts i + 1.
      const signals: SignalInput[] = [];
      for (let i = 0; i < n; i++) {
        signals.push({ item: `p${i}`, kind: 'view', user: `u${i}`, at: NOW });
        for (let k = 0; k <= i; k++) signals.push({ item: 'hub', kind: 'view', user: `u${i}`, at: NOW });
      }
      await db.signals(signals);
      const r = await db.retrieve({ profile: 'related', item: 'hub', limit: 1000 });
      // Space-Saving, written out: the lists fill with p0..p31 (counts 1..32); then p(32+j) takes
      // p(j)'s place and count (j + 1), plus its own 33 + j: the last 32 stay, p(n−1) with count
      // (n − 32) + n.
      const P = USER_DEFAULTS.relatedPartners;
      expect(r.items.map((x) => x.id)).toEqual(Array.from({ length: P }, (_, i) => `p${n - 1 - i}`));
      expectScore(r.items[0]!.score, n - P + n);
      expectScore(r.items.at(-1)!.score, n - P + 1); // p(n − 32), never evicted: its own count
    } finally {
      await db.close();
    }
  });

  it('runs in a query worker like every other profile: queued behind held workers, admitted, counted, with asJson', async () => {
    const db = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(USER_SCHEMA)
      .open();
    const pool = internalsOf(db).pool;
    const gate = new SharedArrayBuffer(4);
    const release = async (): Promise<void> => {
      Atomics.store(new Int32Array(gate), 0, 1);
      Atomics.notify(new Int32Array(gate), 0);
      await Promise.all(held);
    };
    let held: Promise<unknown>[] = [];
    try {
      await db.upsertItems(ITEMS.map((id, i) => ({ id, metadata: { creator: `c${i % 3}` }, createdAt: NOW - i * HOUR })));
      await db.upsertUsers(USERS.map((id) => ({ id })));
      const signals = stream();
      await db.signals(signals);
      const index = oracle(signals);
      const item = ITEMS.find((id) => ranking(index, id).length >= 4)!;
      held = Array.from({ length: pool.depth }, () => pool.run({ op: 'fault', mode: 'block', gate }));
      const servedBefore = db.stats().served;
      const pending = db.retrieve({ profile: 'related', item, limit: 3 });
      // Behind the held pipeline: it waits in the scheduler like any worker query.
      const first = await Promise.race([pending, new Promise<'queued'>((r) => setImmediate(() => r('queued')))]);
      expect(first).toBe('queued');
      expect(pool.scheduler.waiting).toBe(1);
      expect(db.load.inFlight).toBe(1);
      await release();
      const r = await pending;
      expect(r.items.map((x) => x.id)).toEqual(
        ranking(index, item)
          .slice(0, 3)
          .map((w) => w.id),
      );
      expect(r.explain.candidates).toBe(ranking(index, item).length);
      expect(r.explain.serviceMs).toBeGreaterThanOrEqual(0);
      expect(r.degradationLevel).toBe(0);
      expect(db.load.inFlight).toBe(0);
      expect(db.stats().served.Full).toBe(servedBefore.Full + 1);
      // asJson: the worker's serialization of the same items, and no item objects.
      const json = await db.retrieve({ profile: 'related', item, limit: 3, asJson: true });
      expect(json.items).toEqual([]);
      expect(JSON.parse(json.itemsJson!)).toEqual(JSON.parse(JSON.stringify(r.items)));
      expect(json.nextCursor).toBeNull();
      // The next page of a chain continues it.
      const first3 = await db.retrieve({ profile: 'related', item, limit: 3, paginate: true });
      expect(first3.items).toEqual(r.items);
      const next = await db.retrieve({ profile: 'related', item, limit: 3, cursor: first3.nextCursor! });
      expect(next.items.map((x) => x.id)).toEqual(
        ranking(index, item)
          .slice(3, 6)
          .map((w) => w.id),
      );
      // Item writes are seen by the next query: a deleted partner is gone.
      await db.delete(r.items[0]!.id);
      const after = await db.retrieve({ profile: 'related', item, limit: 3, level: 'NoDiversity' });
      expect(after.items.map((x) => x.id)).toEqual(
        ranking(index, item)
          .slice(1, 4)
          .map((w) => w.id),
      );
      expect(after.degradationLevel).toBe(3);
      // An aborted signal is refused like any query's.
      await expect(db.retrieve({ profile: 'related', item, signal: AbortSignal.abort() })).rejects.toSatisfy(
        (err: unknown) => (err as { code?: string }).code === 'TIDAL_ABORTED',
      );
      expect(db.load.inFlight).toBe(0);
    } finally {
      await release();
      await db.close();
    }
  });

  it("returns each item's signals as of its query, after later writes too", async () => {
    const clock = new TestClock(NOW);
    const db = await TidalDb.builder().ephemeral().workers(1).clock(clock.read).schema(USER_SCHEMA).open();
    try {
      await db.upsertItems(ITEMS.map((id, i) => ({ id, metadata: { creator: `c${i % 3}` }, createdAt: NOW - i * HOUR })));
      await db.upsertUsers(USERS.map((id) => ({ id })));
      const signals = stream();
      await db.signals(signals);
      const item = ITEMS.find((id) => ranking(oracle(signals), id).length >= 4)!;
      for (const level of ['Full', 'CoarseAggregates'] as const) {
        // `later` is read only after the writes below.
        const read = await db.retrieve({ profile: 'related', item, level });
        const asOfQuery = JSON.parse(JSON.stringify(read.items)) as unknown[];
        const later = await db.retrieve({ profile: 'related', item, level });
        if (level === 'Full') for (const x of read.items) expect(x.signals).toEqual(db.itemSignals(x.id));
        // New events on every returned item, in two commits, and a later clock.
        clock.advance(10 * 60_000);
        await db.signals(later.items.map((x) => ({ item: x.id, kind: 'view' })));
        await db.signals(later.items.map((x) => ({ item: x.id, kind: 'like', at: NOW })));
        expect(JSON.parse(JSON.stringify(later.items))).toEqual(asOfQuery);
        expect(later.items.map((x) => ({ ...x }))).toEqual(asOfQuery);
        expect(structuredClone(later.items)).toEqual(asOfQuery);
        expect(Object.keys(later.items[0]!)).toEqual(['id', 'score', 'rank', 'signals', 'createdAt']);
        // The writes did change what a query reads now.
        const now = await db.retrieve({ profile: 'related', item, level });
        expect(now.items[0]!.signals.view!.count).toBe((later.items[0]!.signals.view?.count ?? 0) + 1);
      }
    } finally {
      await db.close();
    }
  });

  it('keeps diversity caps, with the scores of the items the greedy pass picked', async () => {
    const db = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(USER_SCHEMA)
      .open();
    try {
      const creator = (id: string): string => `c${ITEMS.indexOf(id) % 3}`;
      await db.upsertItems(ITEMS.map((id) => ({ id, metadata: { creator: creator(id) } })));
      await db.upsertUsers(USERS.map((id) => ({ id })));
      const signals = stream();
      await db.signals(signals);
      const index = oracle(signals);
      let checked = 0;
      for (const item of ITEMS) {
        const want = ranking(index, item);
        // The greedy pass: best first, at most one item per creator.
        const picked = want.filter((w, i) => want.findIndex((x) => creator(x.id) === creator(w.id)) === i).slice(0, 2);
        if (picked.length < 2 || picked[1] === want[1]) continue;
        checked++;
        const r = await db.retrieve({ profile: 'related', item, limit: 2, diversity: { maxPer: { creator: 1 } } });
        expect(
          r.items.map((x) => [x.id, x.rank]),
          item,
        ).toEqual(picked.map((w, i) => [w.id, i + 1]));
        for (let i = 0; i < 2; i++) expectScore(r.items[i]!.score, picked[i]!.score);
        expect(r.explain.diversityApplied).toBe(true);
        // NoDiversity ranks without the caps.
        const plain = await db.retrieve({
          profile: 'related',
          item,
          limit: 2,
          diversity: { maxPer: { creator: 1 } },
          level: 'NoDiversity',
        });
        expect(plain.items.map((x) => x.id)).toEqual(want.slice(0, 2).map((w) => w.id));
      }
      expect(checked).toBeGreaterThan(3);
    } finally {
      await db.close();
    }
  });

  it('refuses a missing or unknown item', async () => {
    const db = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .clock(() => NOW)
      .schema(USER_SCHEMA)
      .open();
    try {
      const refused = (err: unknown): boolean => InvalidInputError.is(err) && err.field === 'item';
      // @ts-expect-error -- the types require `item` for related; an untyped caller gets the error.
      await expect(db.retrieve({ profile: 'related' })).rejects.toSatisfy(refused);
      await expect(db.retrieve({ profile: 'related', item: 'nothing' })).rejects.toSatisfy(refused);
      await expect(db.retrieve({ profile: 'related', item: 'x', context: [1, 0, 0] })).rejects.toSatisfy(
        (err: unknown) => InvalidInputError.is(err) && err.field === 'context',
      );
    } finally {
      await db.close();
    }
  });
});
