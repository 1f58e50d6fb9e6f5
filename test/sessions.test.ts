import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  CapacityError,
  ClosedError,
  InvalidInputError,
  RateLimitedError,
  RateLimiterConfig,
  SessionClosedError,
  TidalDb,
  type SessionHandle,
  type SessionSummary,
  type TidalDbBuilder,
} from 'tidal-core';

const CHILD = fileURLToPath(new URL('./fixtures/sessions-exit.mjs', import.meta.url));
const NOW = Date.UTC(2025, 0, 1);
const MINUTE = 60_000;
const CAPACITY = { items: 10_000, signalSlots: 10_000 };
const schema = {
  signals: [
    { name: 'view', halfLifeMs: 3_600_000 },
    { name: 'like', halfLifeMs: 86_400_000 },
  ],
};

/** The database's clock: tests move it by hand, nothing reads the wall clock. */
const clock = { now: NOW };

const dirs: string[] = [];
const open: TidalDb[] = [];

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-sessions-'));
  dirs.push(dir);
  return dir;
}

async function openDb(configure: (b: TidalDbBuilder) => TidalDbBuilder = (b) => b, dir?: string): Promise<TidalDb> {
  // A small capacity keeps this process's reserved address space small: forking the child
  // processes below fails with ENOMEM under heuristic overcommit once several default-sized
  // signal stores (hundreds of MiB of reservation each) are waiting for the garbage collector.
  const base = TidalDb.builder()
    .workers(1)
    .schema(schema)
    .capacity(CAPACITY)
    .clock(() => clock.now);
  const db = await configure(dir === undefined ? base.ephemeral() : base.path(dir)).open();
  open.push(db);
  return db;
}

/** Items a…e, each viewed once more than the next, so `popular` ranks them a, b, c, d, e. */
async function seed(db: TidalDb): Promise<void> {
  const ids = ['a', 'b', 'c', 'd', 'e'];
  await db.upsertItems(ids.map((id) => ({ id, createdAt: NOW })));
  await db.signals(ids.flatMap((id, i) => Array.from({ length: 5 - i }, () => ({ item: id, kind: 'view', at: NOW }))));
}

async function ranked(db: TidalDb, session?: SessionHandle): Promise<string[]> {
  const res = await db.retrieve(session === undefined ? { profile: 'popular' } : { profile: 'popular', session });
  return res.items.map((i) => i.id);
}

/** Lets queued promise reactions (a background close, a callback) run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

afterEach(async () => {
  vi.useRealTimers();
  vi.restoreAllMocks();
  clock.now = NOW;
  await Promise.all(open.splice(0).map((db) => db.close().catch(() => {})));
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Runs test/fixtures/sessions-exit.mjs on `dir`: `close` closes the database, `kill` SIGKILLs itself. */
function runChild(
  dir: string,
  mode: 'close' | 'kill',
): Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string; err: string }> {
  const child = spawn(process.execPath, [CHILD, dir, mode], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolve) => {
    // The bound only keeps a broken build from hanging the suite; the assertion is that it exits.
    const guard = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('exit', (code, signal) => {
      clearTimeout(guard);
      resolve({ code, signal, out, err });
    });
  });
}
// First in the file: the children are forked before this process has opened any database.
describe('process lifecycle', () => {
  it('a process with workers, sessions, a rate limiter and the sweeper exits by itself after close(), which closes its sessions', async () => {
    const dir = tempDir();
    const r = await runChild(dir, 'close');
    expect(r.err).toBe('');
    expect(r.signal).toBeNull();
    expect(r.code).toBe(0);
    const { kept, other } = JSON.parse(r.out) as { kept: SessionHandle; other: SessionHandle; closed: string };

    clock.now = NOW + 1000;
    const db = await openDb((b) => b, dir);
    expect(db.openSessions()).toEqual([]);
    await expect(db.sessionSignal(kept, { item: 'a', kind: 'like' })).rejects.toBeInstanceOf(SessionClosedError);
    await expect(db.closeSession(other)).rejects.toBeInstanceOf(SessionClosedError);
    // The session signal still queued at close() was written: d has the closed session's like and it.
    expect(db.itemSignals('d').like!.count).toBe(2);
    expect(await ranked(db)).toEqual(['a', 'b', 'c', 'd']);
  });

  it('acknowledged session signals survive kill -9', async () => {
    const dir = tempDir();
    const r = await runChild(dir, 'kill');
    expect(r.signal).toBe('SIGKILL');
    const { kept, other } = JSON.parse(r.out) as { kept: SessionHandle; other: SessionHandle };

    clock.now = NOW + 1000;
    const db = await openDb((b) => b, dir);
    expect(db.openSessions().map((s) => [s.id, s.signalsWritten, s.seenItems])).toEqual([
      [kept.id, 2, 2],
      [other.id, 1, 1],
    ]);
    expect(await ranked(db, kept)).toEqual(['c', 'd']);
    expect(db.itemSignals('a').like!.count).toBe(1);
  });
});

describe('sessions', () => {
  it('opens, writes real signals attributed to the session, and closes with a summary', async () => {
    const db = await openDb();
    await seed(db);
    const h = db.openSession({ agent: 'agent-7' });
    expect(Object.keys(h).sort()).toEqual(['agentId', 'id']);
    expect(h.agentId).toBe('agent-7');

    clock.now = NOW + 1000;
    const before = db.itemSignals('c').like?.count ?? 0;
    const seq = await db.sessionSignal(h, { item: 'c', kind: 'like' });
    expect(typeof seq).toBe('number');
    await db.sessionSignal(h, { item: 'c', kind: 'like', weight: 2 });
    // A real signal: it updates the item's state like any other.
    expect(db.itemSignals('c').like!.count).toBe(before + 2);
    expect(db.openSessions()).toMatchObject([{ id: h.id, agentId: 'agent-7', signalsWritten: 2, seenItems: 1, lastActiveAt: NOW + 1000 }]);

    clock.now = NOW + 5000;
    const summary = await db.closeSession(h);
    expect(summary).toEqual({
      id: h.id,
      agentId: 'agent-7',
      openedAt: NOW,
      closedAt: NOW + 5000,
      durationMs: 5000,
      signalsWritten: 2,
      rejections: 0,
      autoClosed: false,
    } satisfies SessionSummary);
    expect(db.openSessions()).toEqual([]);

    const closedSignal = db.sessionSignal(h, { item: 'c', kind: 'like' });
    await expect(closedSignal).rejects.toBeInstanceOf(SessionClosedError);
    await expect(closedSignal).rejects.toMatchObject({ code: 'TIDAL_SESSION_CLOSED', sessionId: h.id });
    await expect(db.closeSession(h)).rejects.toThrow(`cannot close a session: session ${JSON.stringify(h.id)} is closed`);
    await expect(db.retrieve({ profile: 'popular', session: h })).rejects.toBeInstanceOf(SessionClosedError);
    expect(db.itemSignals('c').like!.count).toBe(before + 2);
  });

  it('leaves out of a retrieve the items the session has signalled, and only for that session', async () => {
    const db = await openDb();
    await seed(db);
    const s1 = db.openSession({ agent: 'agent-1' });
    const s2 = db.openSession({ agent: 'agent-2' });
    expect(await ranked(db, s1)).toEqual(['a', 'b', 'c', 'd', 'e']);

    await db.sessionSignal(s1, { item: 'a', kind: 'view' });
    expect(await ranked(db, s1)).toEqual(['b', 'c', 'd', 'e']);
    await db.sessionSignal(s1, { item: 'c', kind: 'like' });
    await db.sessionSignal(s1, { item: 'c', kind: 'view' });
    expect(await ranked(db, s1)).toEqual(['b', 'd', 'e']);
    // Another session, and no session, see everything: a (6 signals), c (5), b (4), d, e.
    expect(await ranked(db, s2)).toEqual(['a', 'c', 'b', 'd', 'e']);
    expect(await ranked(db)).toEqual(['a', 'c', 'b', 'd', 'e']);
    // Plain signals are not attributed to any session.
    await db.signal({ item: 'e', kind: 'view' });
    expect(await ranked(db, s1)).toEqual(['b', 'd', 'e']);
    expect((await db.closeSession(s1)).signalsWritten).toBe(3);
  });

  it('validates its input and writes nothing on a bad session signal', async () => {
    const db = await openDb();
    await seed(db);
    expect(() => db.openSession({ agent: '' })).toThrow(
      'agent must be a non-empty string of at most 512 characters, got "" (string of length 0)',
    );
    expect(() => db.openSession({ agent: 'x'.repeat(513) })).toThrow(InvalidInputError);
    expect(() => db.openSession({ agent: 7 as unknown as string })).toThrow(
      'agent must be a non-empty string of at most 512 characters, got 7 (number)',
    );
    expect(() => db.openSession({ agent: 'a', ttlMs: 0 })).toThrow('ttlMs must be a whole number from 1 to 31536000000, got 0 (number)');
    expect(() => db.openSession({ agent: 'a', ttlMs: 1.5 })).toThrow(
      'ttlMs must be a whole number from 1 to 31536000000, got 1.5 (number)',
    );
    expect(() => db.openSession({ agent: 'a', ttlMs: Number.POSITIVE_INFINITY })).toThrow(InvalidInputError);
    expect(() => db.openSession(null as unknown as { agent: string })).toThrow(InvalidInputError);
    expect(db.openSessions()).toEqual([]);

    const h = db.openSession({ agent: 'agent-1' });
    await expect(db.sessionSignal(h, { item: 'a', kind: 'share' })).rejects.toMatchObject({
      code: 'TIDAL_INVALID_INPUT',
      field: 'signal.kind',
    });
    await expect(db.sessionSignal(h, { item: 'a', kind: 'like', weight: Number.NaN })).rejects.toMatchObject({ field: 'signal.weight' });
    await expect(db.sessionSignal(h, { item: '', kind: 'like' })).rejects.toMatchObject({ field: 'signal.item' });
    await expect(db.sessionSignal(null as unknown as SessionHandle, { item: 'a', kind: 'like' })).rejects.toMatchObject({
      field: 'session',
    });
    await expect(db.sessionSignal({ id: h.id, agentId: 'someone-else' }, { item: 'a', kind: 'like' })).rejects.toThrow(
      'session.agentId must be the agent the session was opened for ("agent-1"), got "someone-else" (string of length 12)',
    );
    await expect(db.sessionSignal({ id: 'no-such-session', agentId: 'agent-1' }, { item: 'a', kind: 'like' })).rejects.toBeInstanceOf(
      SessionClosedError,
    );
    expect(db.itemSignals('a').like).toBeUndefined();
    expect(await ranked(db, h)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(await db.closeSession(h)).toMatchObject({ signalsWritten: 0, rejections: 0 });
  });

  it('refuses to open with an invalid rate limiter or session option, naming the option and the value', async () => {
    const cases: [(b: TidalDbBuilder) => TidalDbBuilder, string][] = [
      [
        (b) => b.rateLimiter(RateLimiterConfig.limited(-1, 5)),
        'rateLimiter.ratePerSecond must be a positive finite number, got -1 (number)',
      ],
      [
        (b) => b.rateLimiter(RateLimiterConfig.limited(Number.NaN, 5)),
        'rateLimiter.ratePerSecond must be a positive finite number, got NaN (number)',
      ],
      [
        (b) => b.rateLimiter(RateLimiterConfig.limited(10, 0)),
        'rateLimiter.burst must be a whole number from 1 to 1000000000, got 0 (number)',
      ],
      [
        (b) => b.rateLimiter(RateLimiterConfig.limited(10, 2.5)),
        'rateLimiter.burst must be a whole number from 1 to 1000000000, got 2.5 (number)',
      ],
      [
        (b) => b.rateLimiter(RateLimiterConfig.limited(10, 5, { maxBuckets: -1 })),
        'rateLimiter.maxBuckets must be a whole number from 1 to 16777216, got -1 (number)',
      ],
      [
        (b) => b.rateLimiter({ ratePerSecond: 10, burst: 5 } as unknown as RateLimiterConfig),
        'rateLimiter must be RateLimiterConfig.unlimited() or RateLimiterConfig.limited(ratePerSecond, burst)',
      ],
      [(b) => b.sweepIntervalMs(0), 'sessions.sweepIntervalMs must be a whole number from 1 to 2147483647, got 0 (number)'],
      [(b) => b.sweepIntervalMs(2 ** 31), 'sessions.sweepIntervalMs must be a whole number from 1 to 2147483647, got 2147483648 (number)'],
      [(b) => b.sessions({ defaultTtlMs: -5 }), 'sessions.defaultTtlMs must be a whole number from 1 to 31536000000, got -5 (number)'],
      [(b) => b.sessions({ maxOpen: 0 }), 'sessions.maxOpen must be a whole number from 1 to 16777216, got 0 (number)'],
      [
        (b) => b.onSessionExpired('log' as unknown as () => void),
        'sessions.onExpired must be a function taking a SessionSummary, got "log" (string of length 3)',
      ],
    ];
    for (const [configure, message] of cases) {
      const opening = configure(TidalDb.builder().ephemeral().workers(1).schema(schema).capacity(CAPACITY)).open();
      await expect(opening).rejects.toBeInstanceOf(InvalidInputError);
      await expect(opening).rejects.toThrow(message);
    }
  });
});

describe('rate limiting', () => {
  it('refuses past the burst with the exact wait, writes nothing refused, and counts rejections', async () => {
    const db = await openDb((b) => b.rateLimiter(RateLimiterConfig.limited(10, 2)));
    await seed(db);
    const h = db.openSession({ agent: 'agent-7' });
    const other = db.openSession({ agent: 'agent-7' });
    await db.sessionSignal(h, { item: 'a', kind: 'like' });
    await db.sessionSignal(h, { item: 'a', kind: 'like' });

    const refused = db.sessionSignal(h, { item: 'b', kind: 'like' });
    await expect(refused).rejects.toBeInstanceOf(RateLimitedError);
    await expect(refused).rejects.toMatchObject({
      code: 'TIDAL_RATE_LIMITED',
      agentId: 'agent-7',
      sessionId: h.id,
      ratePerSecond: 10,
      burst: 2,
      retryAfterMs: 100,
    });
    clock.now = NOW + 30;
    await expect(db.sessionSignal(h, { item: 'b', kind: 'like' })).rejects.toMatchObject({ retryAfterMs: 70 });
    // Another session of the same agent has a bucket of its own; plain signals are never limited.
    await db.sessionSignal(other, { item: 'c', kind: 'like' });
    for (let i = 0; i < 50; i++) await db.signal({ item: 'd', kind: 'like' });
    clock.now = NOW + 100;
    await db.sessionSignal(h, { item: 'b', kind: 'like' });

    expect(db.itemSignals('a').like!.count).toBe(2);
    expect(db.itemSignals('b').like!.count).toBe(1);
    expect(db.itemSignals('d').like!.count).toBe(50);
    // d (2 views, 50 likes), c (3 views, 1 like), e; a and b were signalled by the session.
    expect(await ranked(db, h)).toEqual(['d', 'c', 'e']);
    expect(await db.closeSession(h)).toMatchObject({ signalsWritten: 3, rejections: 2 });
    expect(await db.closeSession(other)).toMatchObject({ signalsWritten: 1, rejections: 0 });
  });

  it('is unlimited by default', async () => {
    const db = await openDb();
    const h = db.openSession({ agent: 'busy' });
    await Promise.all(Array.from({ length: 500 }, (_, i) => db.sessionSignal(h, { item: `item-${i % 7}`, kind: 'view' })));
    expect(await db.closeSession(h)).toMatchObject({ signalsWritten: 500, rejections: 0 });
  });

  it('past maxBuckets new sessions share one overflow bucket; a closed session frees its bucket', async () => {
    const db = await openDb((b) => b.rateLimiter(RateLimiterConfig.limited(1, 1, { maxBuckets: 1 })));
    const a = db.openSession({ agent: 'x' });
    const b = db.openSession({ agent: 'y' });
    const c = db.openSession({ agent: 'z' });
    await db.sessionSignal(a, { item: 'i', kind: 'view' }); // the one bucket of its own
    await db.sessionSignal(b, { item: 'i', kind: 'view' }); // overflow bucket, now empty
    await expect(db.sessionSignal(c, { item: 'i', kind: 'view' })).rejects.toMatchObject({ sessionId: c.id, retryAfterMs: 1000 });
    await expect(db.sessionSignal(a, { item: 'i', kind: 'view' })).rejects.toMatchObject({ sessionId: a.id, retryAfterMs: 1000 });
    await db.closeSession(a);
    // a's bucket is gone: c gets a full one of its own; b is still on the empty overflow bucket.
    await db.sessionSignal(c, { item: 'i', kind: 'view' });
    await expect(db.sessionSignal(b, { item: 'i', kind: 'view' })).rejects.toBeInstanceOf(RateLimitedError);
    expect(db.openSessions().map((s) => [s.agentId, s.signalsWritten, s.rejections])).toEqual([
      ['y', 1, 1],
      ['z', 1, 1],
    ]);
  });
});

describe('TTL and the sweeper', () => {
  it('expires a session ttlMs after its last accepted signal, closing it on the next call', async () => {
    const expired: SessionSummary[] = [];
    const db = await openDb((b) => b.onSessionExpired((s) => void expired.push(s)));
    const h = db.openSession({ agent: 'agent-1', ttlMs: 1000 });
    clock.now = NOW + 999;
    await db.sessionSignal(h, { item: 'a', kind: 'view' });
    clock.now = NOW + 1998; // 999 ms after the last signal: still open
    await db.sessionSignal(h, { item: 'b', kind: 'view' });
    expect(db.openSessions()).toMatchObject([{ id: h.id, expiresAt: NOW + 2998 }]);
    clock.now = NOW + 2998;
    expect(db.openSessions()).toEqual([]);
    await expect(db.sessionSignal(h, { item: 'c', kind: 'view' })).rejects.toBeInstanceOf(SessionClosedError);
    await settle();
    expect(expired).toEqual([
      {
        id: h.id,
        agentId: 'agent-1',
        openedAt: NOW,
        closedAt: NOW + 2998,
        durationMs: 2998,
        signalsWritten: 2,
        rejections: 0,
        autoClosed: true,
      },
    ]);
    await expect(db.closeSession(h)).rejects.toBeInstanceOf(SessionClosedError);
    expect(db.itemSignals('c')).toEqual({});
  });

  it('uses sessions.defaultTtlMs, 30 minutes unless configured', async () => {
    const db = await openDb();
    const h = db.openSession({ agent: 'a' });
    const db2 = await openDb((b) => b.sessions({ defaultTtlMs: 5 * MINUTE }));
    const h2 = db2.openSession({ agent: 'a' });
    expect(db.openSessions()).toMatchObject([{ id: h.id, ttlMs: 30 * MINUTE, expiresAt: NOW + 30 * MINUTE }]);
    expect(db2.openSessions()).toMatchObject([{ id: h2.id, ttlMs: 5 * MINUTE }]);
  });

  it('sweeps every sweepIntervalMs, closing expired sessions with autoClosed and telling the application', async () => {
    const db = await openDb((b) => b.sweepIntervalMs(MINUTE).onSessionExpired((s) => void expired.push(s)));
    const expired: SessionSummary[] = [];
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const short = db.openSession({ agent: 'a', ttlMs: 10_000 });
    const long = db.openSession({ agent: 'b', ttlMs: 5 * MINUTE });
    expect(vi.getTimerCount()).toBe(1);

    clock.now = NOW + 20_000;
    vi.advanceTimersByTime(MINUTE - 1);
    await settle();
    expect(expired).toEqual([]); // not swept yet: the next call would still find it expired
    vi.advanceTimersByTime(1);
    await settle();
    expect(expired.map((s) => [s.id, s.closedAt, s.autoClosed])).toEqual([[short.id, NOW + 10_000, true]]);
    expect(db.openSessions().map((s) => s.id)).toEqual([long.id]);

    clock.now = NOW + 6 * MINUTE;
    vi.advanceTimersByTime(MINUTE);
    await settle();
    expect(expired.map((s) => s.id)).toEqual([short.id, long.id]);
    // No open session, no timer; the next one starts it again.
    expect(vi.getTimerCount()).toBe(0);
    db.openSession({ agent: 'c' });
    expect(vi.getTimerCount()).toBe(1);
    await db.close();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('sweepSessions() closes what is due now; a throwing callback is reported and does not stop the sweep', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const seen: string[] = [];
    const db = await openDb((b) =>
      b.onSessionExpired((s) => {
        seen.push(s.agentId);
        if (s.agentId === 'first') throw new Error('callback broke');
      }),
    );
    db.openSession({ agent: 'first', ttlMs: 100 });
    db.openSession({ agent: 'second', ttlMs: 100 });
    db.openSession({ agent: 'third', ttlMs: 1000 });
    clock.now = NOW + 100;
    const swept = await db.sweepSessions();
    expect(swept.map((s) => s.agentId)).toEqual(['first', 'second']);
    expect(seen).toEqual(['first', 'second']);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]![0]).toBe('onSessionExpired threw: callback broke');
    expect(warn.mock.calls[0]![1]).toMatchObject({ type: 'TidalWarning', code: 'TIDAL_SESSION_CALLBACK_FAILED' });
    expect(await db.sweepSessions()).toEqual([]);
  });

  it("the sweeper's real timer is unref()ed and cleared by close()", async () => {
    const setSpy = vi.spyOn(globalThis, 'setInterval');
    const clearSpy = vi.spyOn(globalThis, 'clearInterval');
    const db = await openDb((b) => b.sweepIntervalMs(12_345));
    db.openSession({ agent: 'a' });
    const calls = setSpy.mock.calls.map((args, i) => ({ delay: args[1], timer: setSpy.mock.results[i]!.value as NodeJS.Timeout }));
    const sweeper = calls.filter((c) => c.delay === 12_345);
    expect(sweeper).toHaveLength(1);
    expect(sweeper[0]!.timer.hasRef()).toBe(false);
    expect(clearSpy).not.toHaveBeenCalledWith(sweeper[0]!.timer);
    await db.close();
    expect(clearSpy).toHaveBeenCalledWith(sweeper[0]!.timer);
  });
});

describe('closing', () => {
  it('closeSession waits for the signals already sent and counts them; later ones are refused', async () => {
    const db = await openDb((b) => b.groupCommit({ maxDelayMs: 50 }));
    const h = db.openSession({ agent: 'agent-1' });
    const first = db.sessionSignal(h, { item: 'a', kind: 'view' });
    const second = db.sessionSignal(h, { item: 'b', kind: 'view' });
    const closing = db.closeSession(h);
    await expect(db.sessionSignal(h, { item: 'c', kind: 'view' })).rejects.toBeInstanceOf(SessionClosedError);
    const order: string[] = [];
    await Promise.all([
      first.then(() => order.push('first')),
      second.then(() => order.push('second')),
      closing.then(() => order.push('closed')),
    ]);
    expect(order).toEqual(['first', 'second', 'closed']);
    expect((await closing).signalsWritten).toBe(2);
    expect(db.itemSignals('a').view!.count).toBe(1);
    expect(db.itemSignals('c')).toEqual({});
  });

  it('refuses sessions past sessions.maxOpen with CapacityError until one closes', async () => {
    const db = await openDb((b) => b.sessions({ maxOpen: 2 }));
    const a = db.openSession({ agent: 'a' });
    db.openSession({ agent: 'b' });
    let caught: unknown;
    try {
      db.openSession({ agent: 'c' });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(CapacityError);
    expect(caught).toMatchObject({ code: 'TIDAL_CAPACITY', resource: 'open sessions', capacity: 2 });
    await db.closeSession(a);
    expect(db.openSession({ agent: 'c' }).agentId).toBe('c');
  });

  it('after close() every session call throws ClosedError', async () => {
    const db = await openDb();
    const h = db.openSession({ agent: 'a' });
    await db.close();
    expect(() => db.openSession({ agent: 'a' })).toThrow(ClosedError);
    expect(() => db.openSessions()).toThrow(ClosedError);
    await expect(db.sessionSignal(h, { item: 'a', kind: 'view' })).rejects.toBeInstanceOf(ClosedError);
    await expect(db.closeSession(h)).rejects.toBeInstanceOf(ClosedError);
    await expect(db.sweepSessions()).rejects.toBeInstanceOf(ClosedError);
  });
});

describe('persistence', () => {
  it('open sessions survive a crash with their counts and seen items, even after the log was checkpointed away', async () => {
    const dir = tempDir();
    // The child checkpoints after every event, so the log holds none of the session's signals.
    const r = await runChild(dir, 'kill');
    expect(r.signal).toBe('SIGKILL');
    const { kept, closed } = JSON.parse(r.out) as { kept: SessionHandle; other: SessionHandle; closed: string };

    clock.now = NOW + 30_000;
    const db = await openDb((b) => b, dir);
    const stored = JSON.parse(JSON.stringify(kept)) as SessionHandle;
    expect(db.openSessions().find((s) => s.id === kept.id)).toEqual({
      id: kept.id,
      agentId: 'agent-1',
      openedAt: NOW,
      ttlMs: 60_000,
      lastActiveAt: NOW,
      expiresAt: NOW + 60_000,
      signalsWritten: 2,
      rejections: 0,
      seenItems: 2,
    });
    expect(await ranked(db, stored)).toEqual(['c', 'd']);
    await db.sessionSignal(stored, { item: 'c', kind: 'like' });
    expect(await ranked(db, stored)).toEqual(['d']);
    clock.now = NOW + 40_000;
    expect(await db.closeSession(stored)).toEqual({
      id: kept.id,
      agentId: 'agent-1',
      openedAt: NOW,
      closedAt: NOW + 40_000,
      durationMs: 40_000,
      signalsWritten: 3,
      rejections: 0,
      autoClosed: false,
    });
    await expect(db.sessionSignal(stored, { item: 'a', kind: 'like' })).rejects.toBeInstanceOf(SessionClosedError);
    expect(db.openSessions().some((s) => s.id === closed)).toBe(false);
  });

  it('sessions that expired while the process was down are closed on open, with autoClosed', async () => {
    const dir = tempDir();
    const r = await runChild(dir, 'kill');
    expect(r.signal).toBe('SIGKILL');
    const { kept, other } = JSON.parse(r.out) as { kept: SessionHandle; other: SessionHandle; closed: string };

    // Both had a 60 s TTL and their last activity at NOW.
    clock.now = NOW + 30 * MINUTE;
    const expired: SessionSummary[] = [];
    const reopened = await openDb((b) => b.onSessionExpired((s) => void expired.push(s)), dir);
    expect(expired.map((s) => [s.id, s.closedAt, s.durationMs, s.signalsWritten, s.autoClosed])).toEqual([
      [kept.id, NOW + 60_000, 60_000, 2, true],
      [other.id, NOW + 60_000, 60_000, 1, true],
    ]);
    expect(reopened.openSessions()).toEqual([]);
    await expect(reopened.sessionSignal(kept, { item: 'x', kind: 'view' })).rejects.toBeInstanceOf(SessionClosedError);
  });

  it('close() closes the sessions still open, and they stay closed', async () => {
    const dir = tempDir();
    const db = await openDb((b) => b, dir);
    const h = db.openSession({ agent: 'agent-1' });
    await db.sessionSignal(h, { item: 'a', kind: 'view' });
    await db.close();
    const reopened = await openDb((b) => b, dir);
    expect(reopened.openSessions()).toEqual([]);
    await expect(reopened.sessionSignal(h, { item: 'a', kind: 'view' })).rejects.toBeInstanceOf(SessionClosedError);
    expect(reopened.itemSignals('a').view!.count).toBe(1);
  });
});

describe('session activity', () => {
  afterEach(async () => {
    for (const db of open.splice(0)) await db.close();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    clock.now = NOW;
  });

  it('only a committed signal extends the TTL: a refused one is not activity, in memory or on disk', async () => {
    const dir = tempDir();
    const db = await openDb((b) => b, dir);
    const kept = db.openSession({ agent: 'agent-1', ttlMs: 1_000 });
    const dropped = db.openSession({ agent: 'agent-2', ttlMs: 1_000 });
    clock.now = NOW + 800;
    await db.sessionSignal(kept, { item: 'a', kind: 'view' });
    await expect(db.sessionSignal(dropped, { item: 'a', kind: 'nope' })).rejects.toBeInstanceOf(InvalidInputError);
    clock.now = NOW + 1_500;
    // `dropped` expired at +1000 (its refused signal at +800 did not count); `kept` lives to +1800.
    await expect(db.sessionSignal(dropped, { item: 'a', kind: 'view' })).rejects.toBeInstanceOf(SessionClosedError);
    expect(db.openSessions().map((s) => s.id)).toEqual([kept.id]);
    // What a restart would resume from: the stored activity time is the committed signal's.
    const file = new Database(join(dir, 'tidal.db'), { readonly: true });
    try {
      expect(file.prepare('SELECT last_active_at FROM sessions WHERE id = ?').pluck().get(kept.id)).toBe(NOW + 800);
    } finally {
      file.close();
    }
    clock.now = NOW + 1_800;
    await expect(db.sessionSignal(kept, { item: 'a', kind: 'view' })).rejects.toBeInstanceOf(SessionClosedError);
  });
});
