/**
 * SharedSlots against a real PostgreSQL that is not there at first: the slots start in process,
 * with a warning, and move to the database once it is started, and back when it goes away.
 * Waiting for the background re-connect is a bounded poll on a state, never a timed assertion.
 */
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { TidalWarning } from 'tidal-load';
import { SharedSlots, SlotTimeoutError, openSlotSource } from '../src/index.js';
import { freePort, servicesSkipped, startPostgres, type PostgresServer } from './helpers/services.js';

async function until(what: string, done: () => boolean, timeoutMs = 60_000): Promise<void> {
  const started = Date.now();
  while (!done()) {
    if (Date.now() - started > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

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
      // Long enough for a second attempt beside the first to have been made (20 ms after).
      await new Promise((r) => setTimeout(r, 200));
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
  }, 60_000);

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
