/**
 * SharedSlots against a real PostgreSQL that is not there at first: the slots start in process,
 * with a warning, and move to the database once it is started, and back when it goes away.
 * Waiting for the background re-connect is a bounded poll on a state, never a timed assertion.
 */
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import type { SlotLease, TidalWarning } from 'tidal-load';
import { SharedSlots, SlotTimeoutError, openSlotSource } from '../src/index.js';
import { openSharedSlotsWith, type SlotConnection } from '../src/shared-slots.js';
import { freePort, servicesSkipped, startPostgres, type PostgresServer } from './helpers/services.js';

async function until(what: string, done: () => boolean, timeoutMs = 60_000): Promise<void> {
  const started = Date.now();
  while (!done()) {
    if (Date.now() - started > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('SharedSlots: a warning comes with its switch', () => {
  it('reads postgres only once TIDAL_SHARED_SLOTS_RESTORED is raised, and local once TIDAL_SHARED_SLOTS_LOCAL is', async () => {
    // A stand-in lock connection whose session count the test answers: the window between the
    // connection and the switch is held open for as long as the test likes.
    const sessions = deferred<number>();
    const asked = deferred<void>();
    const connected = deferred<void>();
    let fail = true;
    const connection: SlotConnection = {
      sessions: () => {
        asked.resolve();
        return sessions.promise;
      },
      acquire: (resource: string): Promise<SlotLease> =>
        fail ? Promise.reject(new Error('reset')) : Promise.resolve({ backend: 'postgres', resource, slot: 0, release: () => {} }),
      close: () => Promise.resolve(),
    };
    let calls = 0;
    const seen: { code: string; backend: string }[] = [];
    const restored = deferred<void>();
    const opened: { slots?: SharedSlots } = {};
    const slots = await openSharedSlotsWith(
      {
        connectionString: 'postgres://127.0.0.1:1/x',
        retryMinMs: 1,
        retryMaxMs: 1,
        onWarning: (w) => {
          // What a reader of `backend` sees when the warning is raised (before open returns: opening).
          seen.push({ code: w.code, backend: opened.slots?.backend ?? 'opening' });
          if (w.code === 'TIDAL_SHARED_SLOTS_RESTORED') restored.resolve();
        },
      },
      () => {
        // The first connection is refused, the re-connect answers.
        if (++calls === 1) return Promise.reject(new Error('connect ECONNREFUSED'));
        connected.resolve();
        return Promise.resolve(connection);
      },
    );
    opened.slots = slots;
    expect(seen).toEqual([{ code: 'TIDAL_SHARED_SLOTS_LOCAL', backend: 'opening' }]);
    expect(slots.backend).toBe('local');
    await connected.promise;
    await asked.promise;
    // Connected, the replicas on it not yet counted: still in process, and no word of a switch.
    expect(slots.backend).toBe('local');
    expect(seen.map((w) => w.code)).toEqual(['TIDAL_SHARED_SLOTS_LOCAL']);
    const before = await slots.acquire('upstream', 4, { deadlineMs: Date.now() + 1_000 });
    expect(before.backend).toBe('local');
    before.release();
    sessions.resolve(3);
    await restored.promise;
    expect(seen).toEqual([
      { code: 'TIDAL_SHARED_SLOTS_LOCAL', backend: 'opening' },
      { code: 'TIDAL_SHARED_SLOTS_RESTORED', backend: 'postgres' },
    ]);
    expect(slots.stats()).toMatchObject({ backend: 'postgres', replicasLastSeen: 3 });
    // The session fails under a call: the call is served in process, the warning raised with the switch.
    const during = await slots.acquire('upstream', 4, { deadlineMs: Date.now() + 1_000 });
    expect(during.backend).toBe('local');
    expect(seen.at(-1)).toEqual({ code: 'TIDAL_SHARED_SLOTS_LOCAL', backend: 'local' });
    fail = false;
    await slots.close();
  });
});

describe('SharedSlots: a first connection slower than the start wait', () => {
  afterEach(() => vi.useRealTimers());

  it('is finished in the background as the one attempt, however long it takes', async () => {
    vi.useFakeTimers();
    const first = deferred<SlotConnection>();
    let calls = 0;
    const codes: string[] = [];
    const opening = openSharedSlotsWith(
      { connectionString: 'postgres://127.0.0.1:1/x', startWaitMs: 0, retryMinMs: 20, onWarning: (w) => codes.push(w.code) },
      () => {
        calls++;
        return first.promise;
      },
    );
    await vi.advanceTimersByTimeAsync(0);
    const slots = await opening;
    expect(slots.backend).toBe('local');
    // Every re-connect timer there could be has fired: still the one attempt, under way.
    await vi.advanceTimersByTimeAsync(10_000);
    expect(calls).toBe(1);
    first.resolve({
      sessions: () => Promise.resolve(1),
      acquire: () => Promise.reject(new Error('unused')),
      close: () => Promise.resolve(),
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(slots.backend).toBe('postgres');
    expect(codes).toEqual(['TIDAL_SHARED_SLOTS_LOCAL', 'TIDAL_SHARED_SLOTS_RESTORED']);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(calls).toBe(1);
    await slots.close();
  });
});

describe.skipIf(servicesSkipped)('SharedSlots with a PostgreSQL that comes late and goes away', () => {
  let server: PostgresServer | undefined;
  const open: SharedSlots[] = [];
  afterAll(async () => {
    await Promise.all(open.map((s) => s.close()));
    await server?.stop();
  });

  it('starts in process with a warning, moves to the database when it answers, and back when it goes', async () => {
    const port = await freePort();
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    const warnings: TidalWarning[] = [];
    const slots = await SharedSlots.open({
      connectionString: url,
      pollMs: 20,
      retryMinMs: 20,
      retryMaxMs: 100,
      replicas: () => 2,
      onWarning: (w) => warnings.push(w),
    });
    open.push(slots);
    // Nothing listens on the port: refused at once, so open did not wait out its 2 s.
    expect(slots.backend).toBe('local');
    expect(warnings.map((w) => w.code)).toEqual(['TIDAL_SHARED_SLOTS_LOCAL']);
    expect(warnings[0]!.message).toMatch(/ECONNREFUSED/);
    expect(warnings[0]!.message).toMatch(/÷ 2 replicas/);
    // In process, this replica holds its share: a limit of 4 across 2 replicas is 2 here.
    const a = await slots.acquire('upstream', 4, { deadlineMs: Date.now() + 1_000 });
    const b = await slots.acquire('upstream', 4, { deadlineMs: Date.now() + 1_000 });
    expect([a.backend, b.backend]).toEqual(['local', 'local']);
    await expect(slots.acquire('upstream', 4, { deadlineMs: Date.now() })).rejects.toSatisfy((e: unknown) => SlotTimeoutError.is(e));
    a.release();
    b.release();
    expect(slots.stats()).toMatchObject({ backend: 'local', localAcquired: 2, postgresAcquired: 0, fallbacks: 1 });

    server = await startPostgres({ port });
    await until('the slots move to the database', () => slots.backend === 'postgres');
    expect(warnings.map((w) => w.code)).toEqual(['TIDAL_SHARED_SLOTS_LOCAL', 'TIDAL_SHARED_SLOTS_RESTORED']);
    const leases = await Promise.all([0, 1, 2, 3].map(() => slots.acquire('upstream', 4, { deadlineMs: Date.now() + 5_000 })));
    expect(leases.map((l) => l.backend)).toEqual(['postgres', 'postgres', 'postgres', 'postgres']);
    expect(leases.map((l) => l.slot).sort()).toEqual([0, 1, 2, 3]);
    for (const l of leases) l.release();
    expect(slots.stats()).toMatchObject({ postgresAcquired: 4, localAcquired: 2 });

    // The database goes away mid-run: the next call meets the failure and is served in process.
    await server.stop();
    server = undefined;
    const during = await slots.acquire('upstream', 4, { deadlineMs: Date.now() + 5_000 });
    expect(during.backend).toBe('local');
    during.release();
    expect(slots.stats()).toMatchObject({ backend: 'local', fallbacks: 2 });
    expect(warnings.map((w) => w.code)).toEqual(['TIDAL_SHARED_SLOTS_LOCAL', 'TIDAL_SHARED_SLOTS_RESTORED', 'TIDAL_SHARED_SLOTS_LOCAL']);
    await slots.close();
    await expect(slots.acquire('upstream', 4, { deadlineMs: Date.now() + 1_000 })).rejects.toThrow(/closed/);
  }, 120_000);

  it('finishes a first connection slower than its start wait in the background, as the one session', async () => {
    const db = await startPostgres();
    try {
      const warnings: TidalWarning[] = [];
      const slots = await SharedSlots.open({
        connectionString: db.url,
        startWaitMs: 0,
        retryMinMs: 20,
        onWarning: (w) => warnings.push(w),
      });
      open.push(slots);
      expect(slots.backend).toBe('local');
      await until('the first connection lands', () => slots.backend === 'postgres');
      // No second attempt beside the first: the unit test above proves it on a clock it moves.
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      const { rows } = await client.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'tidal-slots'",
      );
      await client.end();
      expect(rows[0]!.n, 'one lock session').toBe(1);
      expect(warnings.map((w) => w.code)).toEqual(['TIDAL_SHARED_SLOTS_LOCAL', 'TIDAL_SHARED_SLOTS_RESTORED']);
      await slots.close();
    } finally {
      await db.stop();
    }
  }, 180_000);

  it('openSlotSource with a database URL is the shared slots; bad options name the field', async () => {
    const port = await freePort();
    const source = await openSlotSource(`postgres://postgres@127.0.0.1:${port}/postgres`, { onWarning: () => {} });
    expect(source).toBeInstanceOf(SharedSlots);
    await source.close();
    await expect(SharedSlots.open({ connectionString: 'mysql://x' })).rejects.toThrow(/options.connectionString/);
    await expect(SharedSlots.open({ connectionString: `postgres://127.0.0.1:${port}/x`, retryMinMs: 0 })).rejects.toThrow(
      /options.retryMinMs must be a whole number from 1/,
    );
  });
});
