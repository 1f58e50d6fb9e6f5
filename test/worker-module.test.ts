/**
 * A worker module (builder.workerModule): code in every query worker thread, with a thread-local
 * handle whose reads run in that thread and whose writes go to the database's thread. The fixture
 * (fixtures/worker-module.mjs) lets the test call the handle over loopback HTTP in each thread.
 */
import { BroadcastChannel } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { DegradationLevel, TidalDb, type CursorOptions } from 'tidal-core';
import { SCHEMA } from './helpers.js';

const MODULE = new URL('./fixtures/worker-module.mjs', import.meta.url);

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
  let b = TidalDb.builder().ephemeral().schema(SCHEMA).workers(workers).workerModule(MODULE, { channel, gate: gate.buffer });
  if (thresholds) b = b.loadThresholds(thresholds);
  if (cursors) b = b.cursors(cursors);
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

  it('errors cross with their code and fields, from a local read and from a forwarded write', async () => {
    const { ports } = await openWithModule();
    const bad = await call(ports[0]!, 'retrieve', { profile: 'trending', limit: 0 });
    expect(bad).toMatchObject({ ok: false, code: 'TIDAL_INVALID_INPUT', field: 'limit' });
    expect(bad.counts.forwarded).toBe(0);
    const badWrite = await call(ports[0]!, 'signals', [{ item: '', kind: 'view' }]);
    expect(badWrite).toMatchObject({ ok: false, code: 'TIDAL_INVALID_INPUT' });
    expect(badWrite.field).toMatch(/item/);
    expect(badWrite.counts.forwarded).toBe(1);
  });

  it('queries needing a user or session go to the database thread; the rest stay', async () => {
    const { db, ports } = await openWithModule();
    await db.upsertItems(ITEMS);
    await db.upsertUsers([{ id: 'u1' }]);
    await db.hide({ user: 'u1', item: 'item-29' });
    const r = await call(ports[0]!, 'retrieve', { profile: 'new', user: 'u1', limit: 3 });
    expect(r.ok).toBe(true);
    expect(r.counts).toEqual({ local: 0, forwarded: 1 });
    expect((r.value as { items: { id: string }[] }).items.map((i) => i.id)).toEqual(['item-28', 'item-27', 'item-26']);
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
