import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidInputError, LocalSlotSource } from 'tidal-load';
import { PooledSessionError, PostgresSlots, SlotTimeoutError, openSlotSource } from '../src/index.js';
import { checkSessionPinned, slotKey } from '../src/pg-slots.js';
import { servicesSkipped, startPostgres, type PostgresServer } from './helpers/services.js';

const holder = fileURLToPath(new URL('./fixtures/slot-holder.mjs', import.meta.url));

describe.skipIf(servicesSkipped)('PostgresSlots on a real PostgreSQL', () => {
  let server: PostgresServer;
  const open: PostgresSlots[] = [];
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    server = await startPostgres();
  });
  afterAll(async () => {
    // A failed test must not leave its replica behind.
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await Promise.all(open.map((s) => s.close()));
    await server?.stop();
  });

  async function replica(pollMs = 50): Promise<PostgresSlots> {
    const slots = await PostgresSlots.open({ connectionString: server.url, pollMs });
    open.push(slots);
    return slots;
  }

  async function advisoryLocksHeld(resource: string): Promise<number> {
    const c = new pg.Client({ connectionString: server.url });
    await c.connect();
    const { rows } = await c.query(
      "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::bigint::oid",
      [slotKey(resource)],
    );
    await c.end();
    return (rows[0] as { n: number }).n;
  }

  /** Asks the database until `done` answers true (one client, bounded only against a hang). */
  async function untilDb(what: string, done: (c: pg.Client) => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
    const c = new pg.Client({ connectionString: server.url });
    await c.connect();
    try {
      const started = Date.now();
      while (!(await done(c))) {
        if (Date.now() - started > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      await c.end();
    }
  }

  it("holds a limit across replicas: slot n is an advisory lock on each replica's own session", async () => {
    const [a, b] = [await replica(), await replica()];
    expect(await a.backendPid()).not.toBe(await b.backendPid());
    const first = await a.acquire('embedder', 2, { deadlineMs: Date.now() + 5_000 });
    const second = await b.acquire('embedder', 2, { deadlineMs: Date.now() + 5_000 });
    expect([first.backend, first.slot, second.slot]).toEqual(['postgres', 0, 1]);
    expect(await advisoryLocksHeld('embedder')).toBe(2);
    expect(await a.tryAcquire('embedder', 2), 'both slots are held, one by each replica').toBeNull();
    expect(await b.tryAcquire('embedder', 2)).toBeNull();
    // The session lock is re-entrant on the server; the replica must not hand its own slot out twice.
    expect(a.held('embedder')).toBe(1);
    first.release();
    first.release();
    const again = await b.acquire('embedder', 2, { deadlineMs: Date.now() + 5_000 });
    expect(again.slot).toBe(0);
    second.release();
    again.release();
    // A release sends its unlock on the replica's session at once: a round trip on each session
    // after it is one the unlocks came before.
    await Promise.all([a.backendPid(), b.backendPid()]);
    expect(await advisoryLocksHeld('embedder')).toBe(0);
  });

  it("a waiter is woken by another replica's release, and the wait counts against its deadline", async () => {
    // A poll far longer than the test: only the NOTIFY can wake the waiter in time.
    const [a, b] = [await replica(), await replica(60_000)];
    const held = await a.acquire('one-at-a-time', 1, { deadlineMs: Date.now() + 5_000 });
    const waiterPid = await b.backendPid();
    const started = Date.now();
    const waiting = b.acquire('one-at-a-time', 1, { deadlineMs: started + 30_000 });
    let got = false;
    void waiting.then(() => (got = true));
    // The waiter has tried once and found the slot taken: its session is idle after the try.
    await untilDb('the waiter tried and waits', async (c) => {
      const { rows } = await c.query<{ state: string; query: string }>('SELECT state, query FROM pg_stat_activity WHERE pid = $1', [
        waiterPid,
      ]);
      return rows[0]?.state === 'idle' && rows[0].query.includes('pg_try_advisory_lock');
    });
    expect(got).toBe(false);
    held.release();
    const lease = await waiting;
    expect(lease.backend).toBe('postgres');
    expect(Date.now() - started, 'woken by the release, not by the 60 s poll').toBeLessThan(20_000);
    lease.release();
  });

  it('fails a call whose deadline passes while it waits, naming the limit and the wait', async () => {
    const [a, b] = [await replica(), await replica()];
    const held = await a.acquire('slow', 1, { deadlineMs: Date.now() + 5_000 });
    const err = await b.acquire('slow', 1, { deadlineMs: Date.now() + 150 }).catch((e: unknown) => e);
    expect(SlotTimeoutError.is(err)).toBe(true);
    const timeout = err as SlotTimeoutError;
    expect([timeout.dependency, timeout.maxConcurrentCalls]).toEqual(['slow', 1]);
    expect(timeout.waitedMs).toBeGreaterThanOrEqual(100);
    expect(timeout.message).toMatch(/"slow" takes 1 call at once; this one waited \d+ ms/);
    held.release();
  });

  it('frees the slots of a replica killed with SIGKILL for the others', async () => {
    const child = spawn(process.execPath, [holder, server.url, 'killed', '2', '2'], { stdio: ['pipe', 'pipe', 'inherit'] });
    children.push(child);
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(out);
      });
      child.once('exit', (code) => reject(new Error(`slot holder exited (${code}) before holding its slots`)));
    });
    expect(line).toMatch(/^held 0,1 pid \d+/);
    const me = await replica();
    expect(await me.tryAcquire('killed', 2), 'the child holds both slots').toBeNull();
    const waiting = me.acquire('killed', 2, { deadlineMs: Date.now() + 30_000 });
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
    const lease = await waiting;
    expect(lease.backend).toBe('postgres');
    expect(await me.tryAcquire('killed', 2), "both of the dead replica's slots are free").not.toBeNull();
  });

  it('opens its lock session again after losing it, and a lease of the lost session frees nothing of the new one', async () => {
    const [a, b] = [await replica(), await replica()];
    const old = await a.acquire('reborn', 1, { deadlineMs: Date.now() + 5_000 });
    const oldPid = await a.backendPid();
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    await admin.query('SELECT pg_terminate_backend($1)', [oldPid]);
    await admin.end();
    // The server released the lost session's lock: the other replica can have the slot now.
    const taken = await b.acquire('reborn', 1, { deadlineMs: Date.now() + 5_000 });
    taken.release();
    let lease = null;
    for (let i = 0; i < 100 && lease === null; i++) {
      lease = await a.acquire('reborn', 1, { deadlineMs: Date.now() + 5_000 }).catch(() => null);
      if (lease === null) await new Promise((r) => setTimeout(r, 50));
    }
    expect(lease?.backend).toBe('postgres');
    expect(await a.backendPid()).not.toBe(oldPid);
    old.release();
    // A round trip on the new session: an unlock the old lease sent on it would have come before.
    await a.backendPid();
    expect(await b.tryAcquire('reborn', 1), 'the old lease released nothing of the new session').toBeNull();
    if (lease === null) throw new Error('the new session holds no lease');
    lease.release();
  });

  it('refuses a connection that does not keep one session (a transaction-pooling proxy)', async () => {
    const clients = [new pg.Client({ connectionString: server.url }), new pg.Client({ connectionString: server.url })];
    await Promise.all(clients.map((c) => c.connect()));
    // What a transaction-mode pooler does: each statement goes to whichever server session is free.
    let turn = 0;
    const pooled = (text: string, values?: unknown[]) => clients[turn++ % 2]!.query(text, values);
    const err = await checkSessionPinned(pooled).catch((e: unknown) => e);
    expect(PooledSessionError.is(err)).toBe(true);
    expect((err as PooledSessionError).evidence).toMatch(/^backend pid \d+, then \d+, then \d+/);
    // A pooler that happens to keep the pid but not the locks (the lock taken on one session, checked on another).
    const pinnedPid = async (text: string, values?: unknown[]) =>
      text.includes('pg_locks') ? clients[1]!.query(text, values) : clients[0]!.query(text, values);
    const lockErr = await checkSessionPinned(pinnedPid).catch((e: unknown) => e);
    expect(PooledSessionError.is(lockErr)).toBe(true);
    expect((lockErr as PooledSessionError).evidence).toMatch(/is not held by the session of the next/);
    await expect(checkSessionPinned((t, v) => clients[0]!.query(t, v))).resolves.toBeUndefined();
    await Promise.all(clients.map((c) => c.end()));
  });

  it('sends one statement at a time on its lock session, however many calls overlap', async () => {
    // pg 8 queues a statement sent while another is in flight, with a deprecation warning; pg 9 will not.
    const inFlight = new Map<pg.Client, number>();
    let most = 0;
    let statements = 0;
    // eslint-disable-next-line @typescript-eslint/unbound-method -- put back as it was, and applied to its client
    const original = pg.Client.prototype.query;
    const counted = function (this: pg.Client, ...args: unknown[]): unknown {
      const n = (inFlight.get(this) ?? 0) + 1;
      inFlight.set(this, n);
      most = Math.max(most, n);
      statements++;
      const result = (original as (...a: unknown[]) => unknown).apply(this, args);
      if (!(result instanceof Promise)) return result;
      return result.finally(() => inFlight.set(this, (inFlight.get(this) ?? 1) - 1));
    };
    pg.Client.prototype.query = counted as typeof original;
    try {
      const slots = await replica();
      const deadlineMs = Date.now() + 10_000;
      const [leases] = await Promise.all([
        Promise.all([0, 1, 2, 3].map(() => slots.acquire('overlap', 4, { deadlineMs }))),
        slots.backendPid(),
        slots.sessions(),
      ]);
      expect(leases.map((l) => l.slot).sort()).toEqual([0, 1, 2, 3]);
      for (const lease of leases) lease.release();
      await Promise.all([slots.backendPid(), slots.sessions()]);
      const [again] = await Promise.all([slots.tryAcquire('overlap', 4), slots.backendPid()]);
      expect(again?.slot, 'the four unlocks were sent before the round trips behind them').toBe(0);
      again?.release();
      await slots.backendPid();
      expect(statements).toBeGreaterThanOrEqual(15);
      expect(most, 'statements in flight at once on one client').toBe(1);
    } finally {
      pg.Client.prototype.query = original;
    }
  });

  it('refuses a limit that is not a whole number from 1 to 32', async () => {
    const slots = await replica();
    for (const bad of [0, 2.5, 33, Number.NaN])
      await expect(slots.acquire('x', bad, { deadlineMs: Date.now() + 100 })).rejects.toThrow(InvalidInputError);
  });
});

describe('openSlotSource without a database', () => {
  it('holds the limit in this process alone', async () => {
    const source = await openSlotSource(undefined);
    expect(source).toBeInstanceOf(LocalSlotSource);
    const lease = await source.acquire('up', 1, { deadlineMs: Date.now() + 1_000 });
    expect(lease.backend).toBe('local');
    await expect(source.acquire('up', 1, { deadlineMs: Date.now() + 20 })).rejects.toSatisfy((e: unknown) => SlotTimeoutError.is(e));
    await source.close();
  });
});
