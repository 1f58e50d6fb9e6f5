/**
 * A worker module (builder.workerModule): code in every query worker thread, with a thread-local
 * handle whose reads run in that thread and whose writes go to the database's thread. The fixture
 * (fixtures/worker-module.mjs) lets the test call the handle over loopback HTTP in each thread.
 */
import { BroadcastChannel } from 'node:worker_threads';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { DegradationLevel, TidalDb, type CursorOptions, type SchemaDefinition } from 'tidal-core';
import { SCHEMA } from './helpers.js';

const MODULE = new URL('./fixtures/worker-module.mjs', import.meta.url);

/** SCHEMA with creators and a preference-moving `like`: what the personalized profiles read. */
const PERSONAL: SchemaDefinition = {
  ...SCHEMA,
  signals: SCHEMA.signals.map((k) => (k.name === 'like' ? { ...k, preference: 0.5 } : k)),
  creatorField: 'creator',
};

interface Opened {
  db: TidalDb;
  ports: number[];
  gate: Int32Array;
}

const open: TidalDb[] = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((db) => db.close()));
});

async function openWithModule(
  thresholds?: { reducedCandidates: number; coarseAggregates: number; noDiversity: number },
  workers = 2,
  cursors?: CursorOptions,
  schema: SchemaDefinition = SCHEMA,
  sharedCatalogMinItems?: number,
): Promise<Opened> {
  const channel = `worker-module-test-${Math.random()}`;
  const gate = new Int32Array(new SharedArrayBuffer(8));
  const ports: number[] = [];
  const ch = new BroadcastChannel(channel);
  const reported = new Promise<void>((resolve) => {
    ch.onmessage = (ev) => {
      ports.push(((ev as MessageEvent).data as { port: number }).port);
      if (ports.length === workers) resolve();
    };
  });
  let b = TidalDb.builder().ephemeral().schema(schema).workers(workers).workerModule(MODULE, { channel, gate: gate.buffer });
  if (thresholds) b = b.loadThresholds(thresholds);
  if (cursors) b = b.cursors(cursors);
  if (sharedCatalogMinItems !== undefined) b = b.sharedCatalogMinItems(sharedCatalogMinItems);
  const db = await b.open();
  open.push(db);
  await reported;
  ch.close();
  return { db, ports, gate };
}

interface CallAnswer {
  ok: boolean;
  value?: unknown;
  code?: string;
  field?: string;
  message?: string;
  counts: { local: number; forwarded: number };
  threadId: number;
  isClass?: boolean;
}

async function call(port: number, method: string, ...args: unknown[]): Promise<CallAnswer> {
  const res = await fetch(`http://127.0.0.1:${port}/call`, { method: 'POST', body: JSON.stringify({ method, args }) });
  return (await res.json()) as CallAnswer;
}

const ITEMS = Array.from({ length: 30 }, (_, i) => ({
  id: `item-${String(i).padStart(2, '0')}`,
  text: i % 2 === 0 ? `jazz piano number ${i}` : `rock guitar number ${i}`,
  embedding: [1, i / 30, 0, 0],
  metadata: { category: i % 3 === 0 ? 'jazz' : 'rock', creator: `c${i % 5}`, duration: i },
  createdAt: Date.UTC(2025, 0, 1) + i * 60_000,
}));

describe('worker modules', () => {
  it('every worker starts the module once it is warm, each in its own thread', async () => {
    const { ports } = await openWithModule();
    expect(ports).toHaveLength(2);
    const a = await call(ports[0]!, 'openSessions');
    const b = await call(ports[1]!, 'openSessions');
    expect(a.ok && b.ok).toBe(true);
    expect(a.threadId).not.toBe(b.threadId);
  });

  it('reads run in the thread, writes reach the database thread and are durable, and a write is seen by the next read', async () => {
    const { db, ports } = await openWithModule();
    const w = await call(ports[0]!, 'upsertItems', ITEMS);
    expect(w.ok).toBe(true);
    expect(w.counts.forwarded).toBe(1);
    // Written through one thread, read in the other: the items version crossed through shared memory.
    const r = await call(ports[1]!, 'retrieve', { profile: 'new', limit: 5 });
    expect(r.ok).toBe(true);
    expect(r.counts).toEqual({ local: 1, forwarded: 0 });
    const here = await db.retrieve({ profile: 'new', limit: 5 });
    expect((r.value as { items: { id: string }[] }).items.map((i) => i.id)).toEqual(here.items.map((i) => i.id));
    expect((r.value as { items: unknown[] }).items.map((i) => (i as { id: string }).id)).toEqual([
      'item-29',
      'item-28',
      'item-27',
      'item-26',
      'item-25',
    ]);

    const s = await call(ports[1]!, 'signals', [
      { item: 'item-03', kind: 'view' },
      { item: 'item-03', kind: 'view' },
    ]);
    expect(s.ok).toBe(true);
    expect(typeof s.value).toBe('number');
    expect(db.itemSignals('item-03').view!.count).toBe(2);
    const hits = await call(ports[0]!, 'search', { text: 'jazz piano', limit: 3 });
    expect(hits.ok).toBe(true);
    expect((hits.value as { hits: { id: string }[] }).hits.map((h) => h.id)).toEqual(
      (await db.search({ text: 'jazz piano', limit: 3 })).hits.map((h) => h.id),
    );
  });

  it('module threads read the catalog image in place, and see writes made through another thread after it', async () => {
    const { db, ports } = await openWithModule(undefined, 2, undefined, SCHEMA, 1);
    expect((await call(ports[0]!, 'upsertItems', ITEMS)).ok).toBe(true);
    // One thread reads the 30 rows and writes the image; the other takes it.
    const warmed = await db.warm();
    expect(warmed.map((w) => w.refreshedRows).sort((a, b) => a - b)).toEqual([0, 30]);
    expect(db.stats().memory.catalogImage).toMatchObject({ images: 1, threads: 2 });
    const ask = async (port: number): Promise<unknown[]> => {
      const t = await call(port, 'search', { text: 'jazz piano', limit: 5 });
      const f = await call(port, 'retrieve', { profile: 'new', filter: { category: 'rock' }, limit: 5 });
      // Both answered in the thread (its counts are since it started): nothing forwarded between them.
      expect(f.counts).toEqual({ local: t.counts.local + 1, forwarded: t.counts.forwarded });
      return [
        (t.value as { hits: { id: string }[] }).hits.map((h) => h.id),
        (f.value as { items: { id: string }[] }).items.map((i) => i.id),
      ];
    };
    const expected = async (): Promise<unknown[]> => [
      (await db.search({ text: 'jazz piano', limit: 5 })).hits.map((h) => h.id),
      (await db.retrieve({ profile: 'new', filter: { category: 'rock' }, limit: 5 })).items.map((i) => i.id),
    ];
    expect(await ask(ports[1]!)).toEqual(await expected());
    // Texts and categories replaced through thread 1, read in thread 0 from its own rows beside the image.
    const changed = ITEMS.slice(0, 10).map((it) => ({
      ...it,
      text: `jazz piano ${it.text}`,
      metadata: { ...it.metadata, category: 'rock' },
    }));
    expect((await call(ports[1]!, 'upsertItems', changed)).ok).toBe(true);
    expect(await ask(ports[0]!)).toEqual(await expected());
    expect(await ask(ports[1]!)).toEqual(await expected());
  });

  it('errors cross with their code and fields, from a local read and from a forwarded write', async () => {
    const { ports } = await openWithModule();
    const bad = await call(ports[0]!, 'retrieve', { profile: 'trending', limit: 0 });
    expect(bad).toMatchObject({ ok: false, code: 'TIDAL_INVALID_INPUT', field: 'limit' });
    expect(bad.counts.forwarded).toBe(0);
    expect(bad.isClass).toBe(true);
    const badWrite = await call(ports[0]!, 'signals', [{ item: '', kind: 'view' }]);
    // Made again as its own class on this side of the link: instanceof InvalidInputError holds.
    expect(badWrite).toMatchObject({ ok: false, code: 'TIDAL_INVALID_INPUT', name: 'InvalidInputError', isClass: true });
    const closed = await call(ports[0]!, 'sessionSignal', { id: 'no-such-session', agentId: 'a' }, { item: 'x', kind: 'view' });
    expect(closed).toMatchObject({ ok: false, code: 'TIDAL_SESSION_CLOSED', name: 'SessionClosedError', isClass: true });
    expect(closed.value).toBeUndefined();
    expect(badWrite.field).toMatch(/item/);
    expect(badWrite.counts.forwarded).toBe(1);
  });

  it('personalized queries (for_you, following, related, unseen, a session) are answered in the thread, with no message to the database thread', async () => {
    const { db, ports } = await openWithModule(undefined, 2, undefined, PERSONAL);
    await db.upsertItems(ITEMS);
    await db.upsertUsers([{ id: 'u1', embedding: [1, 0.5, 0, 0] }, { id: 'u2' }]);
    await db.hide({ user: 'u1', item: 'item-29' });
    await db.block({ user: 'u1', creator: 'c3' });
    await db.follow({ user: 'u1', creator: 'c1' });
    // u2 and u1 engage with the same items: co-engagement for 'related'.
    for (const user of ['u1', 'u2']) {
      await db.signals([
        { item: 'item-10', kind: 'like', user },
        { item: 'item-12', kind: 'like', user },
        { item: 'item-14', kind: 'view', user },
      ]);
    }
    const session = db.openSession({ agent: 'agent-1' });
    await db.sessionSignal(session, { item: 'item-28', kind: 'view' });
    const queries = [
      { profile: 'for_you', user: 'u1', limit: 5 },
      { profile: 'following', user: 'u1', limit: 5 },
      { profile: 'related', item: 'item-10', limit: 5 },
      { profile: 'new', user: 'u1', userFilter: { unseen: true }, limit: 5 },
      { profile: 'new', session, limit: 5 },
    ] as const;
    for (const [i, q] of queries.entries()) {
      const port = ports[i % 2]!;
      // The thread's forwarded count so far (this call is one of them), then the query: none more.
      const before = (await call(port, 'openSessions')).counts.forwarded;
      const r = await call(port, 'retrieve', q);
      expect(r.ok, JSON.stringify(r)).toBe(true);
      expect(r.counts.forwarded, q.profile).toBe(before);
      const here = await db.retrieve(q);
      const ids = (r.value as { items: { id: string }[] }).items.map((x) => x.id);
      expect(ids, JSON.stringify(q)).toEqual(here.items.map((x) => x.id));
      expect(ids.length).toBeGreaterThan(0);
      if ('user' in q) {
        expect(ids).not.toContain('item-29');
        expect(ids.some((id) => Number(id.slice(5)) % 5 === 3)).toBe(false);
      }
      if ('session' in q) expect(ids).not.toContain('item-28');
    }
    const s = await call(ports[0]!, 'search', { text: 'jazz', user: 'u1', limit: 5 });
    expect(s.ok).toBe(true);
    expect((s.value as { hits: { id: string }[] }).hits.map((h) => h.id)).toEqual(
      (await db.search({ text: 'jazz', user: 'u1', limit: 5 })).hits.map((h) => h.id),
    );
  });

  it('in a thread, a personalized query refuses what the database thread refuses, with the same code and field', async () => {
    const { db, ports } = await openWithModule();
    await db.upsertItems(ITEMS);
    await db.upsertUsers([{ id: 'u1' }]);
    const unknown = await call(ports[0]!, 'retrieve', { profile: 'for_you', user: 'nobody', limit: 3 });
    expect(unknown).toMatchObject({ ok: false, code: 'TIDAL_INVALID_INPUT', field: 'user' });
    expect(unknown.counts.forwarded).toBe(0);
    const session = db.openSession({ agent: 'agent-1' });
    const wrongAgent = await call(ports[0]!, 'retrieve', { profile: 'new', session: { ...session, agentId: 'other' }, limit: 3 });
    expect(wrongAgent).toMatchObject({ ok: false, code: 'TIDAL_INVALID_INPUT', field: 'session.agentId' });
    await db.closeSession(session);
    const closed = await call(ports[1]!, 'retrieve', { profile: 'new', session, limit: 3 });
    expect(closed).toMatchObject({ ok: false, code: 'TIDAL_SESSION_CLOSED' });
    expect(closed.counts.forwarded).toBe(0);
    await db.deleteUser('u1');
    const gone = await call(ports[1]!, 'retrieve', { profile: 'for_you', user: 'u1', limit: 3 });
    expect(gone).toMatchObject({ ok: false, code: 'TIDAL_INVALID_INPUT', field: 'user' });
    // An item nothing co-engaged with: the database thread answers (it knows whether the item exists).
    const lonely = await call(ports[0]!, 'retrieve', { profile: 'related', item: 'item-01', limit: 3 });
    expect(lonely).toMatchObject({ ok: true });
    expect(lonely.counts.forwarded).toBe(1);
    const missing = await call(ports[0]!, 'retrieve', { profile: 'related', item: 'no-such-item', limit: 3 });
    expect(missing).toMatchObject({ ok: false, code: 'TIDAL_INVALID_INPUT', field: 'item' });
  });

  it('read-your-writes in every thread: a hide, block, follow or signal acknowledged anywhere is honoured by the next read in any thread', async () => {
    const { db, ports } = await openWithModule(undefined, 2, undefined, PERSONAL);
    await db.upsertItems(ITEMS);
    await db.upsertUsers([
      { id: 'u1', embedding: [1, 0.2, 0, 0] },
      { id: 'u2', embedding: [0, 1, 0, 0] },
    ]);
    type Write =
      | { op: 'hide' | 'unhide'; user: string; item: string }
      | { op: 'block' | 'unblock' | 'follow' | 'unfollow'; user: string; creator: string }
      | { op: 'signals'; user: string; item: string; kind: 'view' | 'like' };
    const user = fc.constantFrom('u1', 'u2');
    const item = fc.integer({ min: 0, max: 29 }).map((i) => `item-${String(i).padStart(2, '0')}`);
    const creator = fc.integer({ min: 0, max: 4 }).map((c) => `c${c}`);
    const write: fc.Arbitrary<Write> = fc.oneof(
      fc.record({ op: fc.constantFrom('hide' as const, 'unhide' as const), user, item }),
      fc.record({ op: fc.constantFrom('block' as const, 'unblock' as const, 'follow' as const, 'unfollow' as const), user, creator }),
      fc.record({ op: fc.constant('signals' as const), user, item, kind: fc.constantFrom('view' as const, 'like' as const) }),
    );
    // Where the write is made (-1: the database's thread, else a worker thread) and where the read runs.
    const step = fc.record({ write, via: fc.integer({ min: -1, max: 1 }), readIn: fc.integer({ min: 0, max: 1 }), q: fc.nat(3) });
    const reads = (u: string) => [
      { profile: 'for_you', user: u, limit: 8 },
      { profile: 'following', user: u, limit: 8 },
      { profile: 'new', user: u, userFilter: { unseen: true }, limit: 8 },
      { profile: 'related', item: 'item-10', user: u, limit: 8 },
    ];
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 8 }), async (steps) => {
        for (const st of steps) {
          const w = st.write;
          const arg =
            w.op === 'signals'
              ? [
                  [
                    { item: w.item, kind: w.kind, user: w.user },
                    { item: 'item-10', kind: 'like', user: w.user },
                  ],
                ]
              : ['item' in w ? { user: w.user, item: w.item } : { user: w.user, creator: w.creator }];
          if (st.via < 0) await (db[w.op] as (...a: unknown[]) => Promise<unknown>).apply(db, arg);
          else expect((await call(ports[st.via]!, w.op, ...arg)).ok).toBe(true);
          const q = reads(w.user)[st.q]!;
          const there = await call(ports[st.readIn]!, 'retrieve', q);
          const here = await db.retrieve(q as Parameters<TidalDb['retrieve']>[0]);
          expect(there.ok, JSON.stringify(there)).toBe(true);
          expect(
            (there.value as { items: { id: string }[] }).items.map((x) => x.id),
            JSON.stringify({ st, q }),
          ).toEqual(here.items.map((x) => x.id));
        }
      }),
      { numRuns: 15, seed: 20250101 },
    );
  });

  it('a cursor chain started in a worker thread is pinned in the database thread and pages on from any thread', async () => {
    const { db, ports } = await openWithModule();
    await db.upsertItems(ITEMS);
    const first = await call(ports[0]!, 'retrieve', { profile: 'new', limit: 4, paginate: true });
    const page1 = first.value as { items: { id: string }[]; nextCursor: string };
    expect(page1.nextCursor).toEqual(expect.any(String));
    expect(first.counts).toEqual({ local: 0, forwarded: 1 });
    expect(db.stats().cursors.pinned).toBe(1);
    const page2 = await db.retrieve({ profile: 'new', limit: 4, cursor: page1.nextCursor });
    expect(page2.items.map((i) => i.id)).toEqual(['item-25', 'item-24', 'item-23', 'item-22']);
    const back = await call(ports[1]!, 'retrieve', { profile: 'new', limit: 4, cursor: page2.nextCursor });
    expect((back.value as { items: { id: string }[] }).items.map((i) => i.id)).toEqual(['item-21', 'item-20', 'item-19', 'item-18']);
    // Without paginate, a thread answers the query itself and gives no cursor.
    const plain = await call(ports[0]!, 'retrieve', { profile: 'new', limit: 4 });
    expect(plain.counts).toEqual({ local: 1, forwarded: 1 });
    expect((plain.value as { nextCursor: string | null }).nextCursor).toBeNull();
  });

  it("a chain's ranking evicted on the database thread is refused in a worker thread with CursorExpiredError", async () => {
    const { db, ports } = await openWithModule(undefined, 2, { maxRankings: 1 });
    await db.upsertItems(ITEMS);
    const a = await call(ports[0]!, 'retrieve', { profile: 'new', limit: 2, paginate: true });
    await call(ports[1]!, 'retrieve', { profile: 'new', limit: 3, paginate: true });
    const next = await call(ports[0]!, 'retrieve', { profile: 'new', limit: 2, cursor: (a.value as { nextCursor: string }).nextCursor });
    expect(next).toMatchObject({ ok: false, name: 'CursorExpiredError', code: 'TIDAL_CURSOR_EXPIRED', field: 'cursor' });
    expect(next.message).toMatch(/evicted/);
  });

  it('queries a thread took count in the one in-flight count: the database thread sees them and its level follows', async () => {
    const { db, ports, gate } = await openWithModule({ reducedCandidates: 3, coarseAggregates: 5, noDiversity: 7 });
    await db.upsertItems(ITEMS);
    const held = fetch(`http://127.0.0.1:${ports[0]}/hold`, { method: 'POST', body: JSON.stringify({ k: 6 }) });
    // The worker sets cell 1 to the count it saw once its six queries were admitted, then holds.
    while (Atomics.load(gate, 1) === 0) await new Promise((r) => setTimeout(r, 5));
    expect(Atomics.load(gate, 1)).toBe(6);
    expect(db.load.inFlight).toBe(6);
    // The database thread's next query is the seventh in flight: NoDiversity.
    expect(db.load.level).toBe(DegradationLevel.NoDiversity);
    Atomics.store(gate, 0, 1);
    Atomics.notify(gate, 0);
    const out = (await (await held).json()) as { levels: DegradationLevel[] };
    // Levels picked at entry from the count: 1, 2 Full; 3, 4 Reduced; 5, 6 Coarse.
    expect(out.levels).toEqual([0, 0, 1, 1, 2, 2]);
    expect(db.load.inFlight).toBe(0);
  });

  it('a query whose deadline passed while its thread was busy is never run: TIDAL_TIMEOUT, and the in-flight count falls back', async () => {
    const { db, ports, gate } = await openWithModule();
    await db.upsertItems(ITEMS);
    // Three queries with a 1 ms deadline are admitted, then the thread is held until the test has
    // read the count and until the deadline has passed (the fixture measures it).
    const held = fetch(`http://127.0.0.1:${ports[0]}/hold`, { method: 'POST', body: JSON.stringify({ k: 3, timeoutMs: 1 }) });
    while (Atomics.load(gate, 1) === 0) await new Promise((r) => setTimeout(r, 5));
    expect(db.load.inFlight).toBe(3);
    Atomics.store(gate, 0, 1);
    Atomics.notify(gate, 0);
    const out = (await (await held).json()) as { codes: (string | null)[]; counts: { local: number } };
    expect(out.codes).toEqual(['TIDAL_TIMEOUT', 'TIDAL_TIMEOUT', 'TIDAL_TIMEOUT']);
    expect(out.counts.local).toBe(0);
    expect(db.load.inFlight).toBe(0);
  });

  it('the database thread records the queries the threads answered', async () => {
    const { db, ports } = await openWithModule();
    await db.upsertItems(ITEMS);
    const served = () => Object.values(db.stats().served).reduce((a, b) => a + b, 0);
    const before = served();
    for (let i = 0; i < 5; i++) expect((await call(ports[i % 2]!, 'retrieve', { profile: 'new', limit: 2 })).ok).toBe(true);
    // Records travel in batches every 100 ms; wait until they arrived (bounded).
    for (const end = Date.now() + 30_000; served() - before < 5 && Date.now() < end;) await new Promise((r) => setTimeout(r, 10));
    expect(served() - before).toBe(5);
  });

  it('a module that fails to start fails the open, naming it', async () => {
    const gate = new SharedArrayBuffer(8);
    await expect(
      TidalDb.builder().ephemeral().schema(SCHEMA).workers(1).workerModule(MODULE, { fail: true, gate, channel: 'unused' }).open(),
    ).rejects.toThrow(/worker-module\.mjs failed to start in worker thread \d+: refusing to start, as asked/);
  });

  it('refuses a relative path and data the structured clone cannot copy, naming the field', async () => {
    await expect(TidalDb.builder().ephemeral().schema(SCHEMA).workerModule('./x.mjs').open()).rejects.toMatchObject({
      code: 'TIDAL_INVALID_INPUT',
      field: 'workerModule.url',
    });
    await expect(
      TidalDb.builder()
        .ephemeral()
        .schema(SCHEMA)
        .workerModule(MODULE, { f: () => 1 })
        .open(),
    ).rejects.toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'workerModule.data' });
  });
});
