/**
 * Replication through a Redis Stream, end to end: three replicas, each a child process with its
 * own database directory, against one real redis-server on a loopback port. Every check waits for
 * a state (polling, with a generous bound), never for a duration: a slow machine takes longer to
 * converge, it does not fail.
 *
 * The workload is deterministic (fixtures/replication-events.mjs), so the counts every replica
 * must reach are known exactly: an event applied twice, or lost, shows as a wrong count.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Replica } from '../packages/tidal-fleet/test/helpers/replicas.js';
import { servicesSkipped, startRedis, trimStream, type RedisServer } from '../packages/tidal-fleet/test/helpers/services.js';
import { ITEMS_PER_REPLICA, itemId, signalsOf, userId, creatorOf } from './fixtures/replication-events.mjs';

const REPLICA = fileURLToPath(new URL('./fixtures/replica.mjs', import.meta.url));
const CLOSE_EXIT = fileURLToPath(new URL('./fixtures/replica-close-exit.mjs', import.meta.url));
const CONVERGE_MS = 60_000;
/** A test's bound: its phases each wait at most CONVERGE_MS, plus the replicas' starts. */
const E2E_TIMEOUT_MS = 240_000;

interface Values {
  count: number;
  score: number;
  [k: string]: unknown;
}
interface State {
  signals: Record<string, Record<string, Values>>;
  items: Record<string, unknown>;
  rankings: Record<string, string[] | null>;
  users: Record<string, { hidden: string[]; blocked: string[]; following: string[]; seen: string[] } | null>;
  replication: {
    replicaId: string;
    unpublished: number;
    retained: number;
    origins: { origin: string; seq: number; lagMs: number }[];
  } | null;
  warnings: string[];
  /** Not compared: per for_you ranking, its level, explain, first scores and the user's vectors (for a failure's message). */
  diag?: Record<string, unknown>;
}

type Signal = { item: string; kind: string; weight: number; at: number; user?: string };
const signalsFor = signalsOf as (r: number, n: number) => Signal[];
const userFor = userId as (r: number) => string;

/** The count per item and kind after `rounds[r]` rounds of replica r. */
function expectedCounts(rounds: readonly number[]): Map<string, number> {
  const counts = new Map<string, number>();
  rounds.forEach((n, r) => {
    for (let i = 0; i < n; i++) {
      for (const s of signalsFor(r, i)) counts.set(`${s.item}/${s.kind}`, (counts.get(`${s.item}/${s.kind}`) ?? 0) + 1);
    }
  });
  return counts;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.skipIf(servicesSkipped)('replication: three replicas on one Redis Stream', () => {
  let redis: RedisServer;
  let dirs: string[] = [];
  let replicas: (Replica | null)[] = [];
  let stream: string;
  let streamNo = 0;

  beforeAll(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    await Promise.all(replicas.map((r) => r?.kill() ?? Promise.resolve()));
    replicas = [];
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
    dirs = [];
  });
  afterAll(async () => {
    await redis?.stop();
  });

  async function start(i: number, extra: string[] = []): Promise<Replica> {
    const replica = new Replica(REPLICA, [dirs[i]!, redis.url, stream, String(i), ...extra]);
    const ready = JSON.parse(await replica.next(60_000)) as { ready: boolean };
    expect(ready.ready).toBe(true);
    replicas[i] = replica;
    return replica;
  }

  async function startAll(extra: string[] = []): Promise<Replica[]> {
    stream = `test:replication:${++streamNo}`;
    dirs = [0, 1, 2].map(() => mkdtempSync(join(tmpdir(), 'tidal-repl-')));
    return Promise.all([0, 1, 2].map((i) => start(i, extra)));
  }

  async function ask<T>(r: Replica, op: string, extra: Record<string, unknown> = {}): Promise<T> {
    const answer = JSON.parse(await r.ask(JSON.stringify({ op, ...extra }))) as T & { error?: string };
    if (answer.error !== undefined) throw new Error(`replica answered ${answer.error}`);
    return answer;
  }

  const states = (): Promise<State[]> => Promise.all(replicas.map((r) => ask<State>(r!, 'state')));

  /** Whether `s` holds exactly the expected counts (every kind of every item). */
  function countsMatch(s: State, expected: Map<string, number>): boolean {
    for (const [key, n] of expected) {
      const [item, kind] = key.split('/') as [string, string];
      if ((s.signals[item]?.[kind]?.count ?? 0) !== n) return false;
    }
    return true;
  }

  /** What must be equal everywhere once replication caught up, apart from the counts. */
  const view = (s: State): string => JSON.stringify([s.rankings, s.items, s.users]);

  /**
   * Polls until every replica holds the expected counts, an empty outbox and the same items, users
   * and rankings as the others; returns the states.
   */
  async function converged(expected: Map<string, number>): Promise<State[]> {
    const deadline = Date.now() + CONVERGE_MS;
    let last: State[] = [];
    while (Date.now() < deadline) {
      last = await states();
      const same = last.every((s) => view(s) === view(last[0]!));
      if (same && last.every((s) => s.replication?.unpublished === 0 && countsMatch(s, expected))) return last;
      await sleep(100);
    }
    const summary = last.map((s) => ({
      replicaId: s.replication?.replicaId,
      unpublished: s.replication?.unpublished,
      counts: countsMatch(s, expected),
      sameView: view(s) === view(last[0]!),
      differs: viewDiff(s, last[0]!),
      diag: Object.fromEntries(
        Object.entries(s.diag ?? {}).filter(
          ([k]) => JSON.stringify(s.rankings[k]) !== JSON.stringify(last[0]!.rankings[k]) || s === last[0],
        ),
      ),
      origins: s.replication?.origins,
    }));
    throw new Error(`no convergence within ${CONVERGE_MS} ms: ${JSON.stringify(summary)}; the stream holds ${await streamSummary()}`);
  }

  /** The parts of `s`'s view that differ from `base`'s (rankings by name, then items and users), for a failure's message. */
  function viewDiff(s: State, base: State): string[] {
    const out = Object.keys({ ...s.rankings, ...base.rankings }).filter(
      (k) => JSON.stringify(s.rankings[k]) !== JSON.stringify(base.rankings[k]),
    );
    const part = (name: 'items' | 'users') => {
      const keys = Object.keys({ ...s[name], ...base[name] });
      return keys.filter((k) => JSON.stringify(s[name][k]) !== JSON.stringify(base[name][k])).map((k) => `${name}.${k}`);
    };
    return [
      ...out.map((k) => `rankings.${k}: ${JSON.stringify(s.rankings[k])} against ${JSON.stringify(base.rankings[k])}`),
      ...part('items'),
      ...part('users'),
    ].slice(0, 6);
  }

  /** What the stream holds per origin (its entries' first seqs, the last few), for a failure's message. */
  async function streamSummary(): Promise<string> {
    const client = createClient({ url: redis.url });
    try {
      await client.connect();
      const reply = await client.sendCommand<[string, string[]][]>(['XRANGE', stream, '-', '+']);
      const byOrigin = new Map<string, string[]>();
      for (const [id, fields] of reply) {
        const f = new Map<string, string>();
        for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i]!, fields[i + 1]!);
        const list = byOrigin.get(f.get('o') ?? '?') ?? [];
        list.push(`${f.get('s')}@${id}`);
        byOrigin.set(f.get('o') ?? '?', list);
      }
      return JSON.stringify([...byOrigin].map(([o, l]) => ({ origin: o, entries: l.length, last: l.slice(-4) })));
    } catch (err) {
      return `(unreadable: ${(err as Error).message})`;
    } finally {
      await client.quit().catch(() => {});
    }
  }

  /** Every replica's state is the first one's: counts exactly, scores within float tolerance, rankings equal. */
  function expectSame(all: State[]): void {
    const [first, ...rest] = all as [State, ...State[]];
    for (const s of rest) {
      expect(s.rankings).toEqual(first.rankings);
      expect(s.users).toEqual(first.users);
      expect(s.items).toEqual(first.items);
      for (const [item, kinds] of Object.entries(first.signals)) {
        for (const [kind, v] of Object.entries(kinds)) {
          const other = s.signals[item]![kind]!;
          expect(other.count).toBe(v.count);
          expect(other.score).toBeCloseTo(v.score, 9);
        }
      }
    }
  }

  it(
    'writes to all three converge: equal counts, scores and rankings; hides and blocks travel',
    async () => {
      const all = await startAll();
      await Promise.all(all.map((r) => ask(r, 'setup')));
      const rounds = [0, 0, 0];
      for (let n = 0; n < 8; n++) {
        await Promise.all(all.map((r) => ask(r, 'round', { n })));
        rounds.fill(n + 1);
        if (n === 3) await Promise.all(all.map((r) => ask(r, 'edges')));
      }
      await ask(all[2]!, 'remove');
      const final = await converged(expectedCounts(rounds));
      expectSame(final);
      const s = final[0]!;
      // Every replica applied both others, and none its own.
      for (const f of final) {
        expect(f.replication!.origins.map((o) => o.origin).sort()).toEqual(
          final
            .map((x) => x.replication!.replicaId)
            .filter((id) => id !== f.replication!.replicaId)
            .sort(),
        );
      }
      // The deleted item is gone everywhere; the hidden item and the blocked creator never come back to their user.
      expect(s.items[itemId(2, ITEMS_PER_REPLICA - 1)]).toBeNull();
      for (const r of [0, 1, 2]) {
        const user = userFor(r);
        expect(s.users[user]!.hidden).toEqual([itemId((r + 1) % 3, 1)]);
        expect(s.users[user]!.blocked).toEqual([creatorOf((r + 2) % 3)]);
        for (const f of final) {
          for (const profile of [`for_you:${user}`, `popular:${user}`]) {
            const ids = f.rankings[profile]!;
            expect(ids.length).toBeGreaterThan(0);
            expect(ids).not.toContain(itemId((r + 1) % 3, 1));
            expect(ids.filter((id) => id.startsWith(`item-${(r + 2) % 3}-`))).toEqual([]);
          }
        }
      }
    },
    E2E_TIMEOUT_MS,
  );
  it(
    'a replica SIGKILLed while it applies, then restarted, converges with nothing applied twice',
    async () => {
      const all = await startAll();
      await Promise.all(all.map((r) => ask(r, 'setup')));
      const rounds = [0, 0, 0];
      // Replica 1 writes and is acknowledged, then is killed while the other two keep writing.
      for (let n = 0; n < 3; n++) await ask(all[1]!, 'round', { n });
      rounds[1] = 3;
      const writers = (async () => {
        for (let n = 0; n < 12; n++) {
          await Promise.all([ask(all[0]!, 'round', { n }), ask(all[2]!, 'round', { n })]);
          rounds[0] = rounds[2] = n + 1;
        }
      })();
      // Killed once it has applied some of the others' batches but (most likely) not all.
      const deadline = Date.now() + CONVERGE_MS;
      for (;;) {
        const s = await ask<State>(all[1]!, 'state');
        if (s.replication!.origins.some((o) => o.seq > 0) || Date.now() > deadline) break;
        await sleep(20);
      }
      await all[1]!.kill();
      await writers;
      const restarted = await start(1);
      await ask(restarted, 'round', { n: 3 });
      rounds[1] = 4;
      const final = await converged(expectedCounts(rounds));
      expectSame(final);
    },
    E2E_TIMEOUT_MS,
  );

  it(
    'Redis killed for a while: writes are acknowledged and served locally, and everything converges once it is back',
    async () => {
      const all = await startAll();
      await Promise.all(all.map((r) => ask(r, 'setup')));
      const rounds = [0, 0, 0];
      for (let n = 0; n < 2; n++) await Promise.all(all.map((r) => ask(r, 'round', { n })));
      rounds.fill(2);
      await converged(expectedCounts(rounds));
      await redis.kill();
      for (let n = 2; n < 5; n++) await Promise.all(all.map((r) => ask(r, 'round', { n })));
      // Served locally while Redis is away: each replica already counts its own writes.
      const away = await states();
      for (let r = 0; r < 3; r++) {
        const seen = [2, 2, 2];
        seen[r] = 5;
        expect(countsMatch(away[r]!, expectedCounts(seen))).toBe(true);
        expect(away[r]!.replication!.unpublished).toBeGreaterThan(0);
      }
      await redis.restart();
      rounds.fill(5);
      const final = await converged(expectedCounts(rounds));
      expectSame(final);
      for (const s of final) expect(s.warnings).toEqual(expect.arrayContaining(['TIDAL_REPLICATION_AWAY', 'TIDAL_REPLICATION_RESTORED']));
    },
    E2E_TIMEOUT_MS,
  );
  it(
    'a replica that joins after the stream was trimmed bootstraps from a peer snapshot and converges',
    async () => {
      // Writes of one signal per batch, then the stream trimmed to nothing (as `maxLen` trims old
      // entries; done here at a known point, so the three are never cut off while they follow).
      const all = await startAll();
      await Promise.all(all.map((r) => ask(r, 'setup')));
      const rounds = [0, 0, 0];
      for (let n = 0; n < 4; n++) await Promise.all(all.map((r) => ask(r, 'round', { n, split: true })));
      rounds.fill(4);
      await converged(expectedCounts(rounds));
      // Every origin released what the others applied (else it would send it all again to a new replica).
      const released = Date.now() + CONVERGE_MS;
      while ((await states()).some((x) => x.replication!.retained !== 0)) {
        if (Date.now() > released) throw new Error(`outboxes not released within ${CONVERGE_MS} ms`);
        await sleep(50);
      }
      await trimStream(redis.url, stream);
      // A replica started empty sees the gap and cannot catch up: neither the stream nor the outboxes hold it.
      dirs[3] = mkdtempSync(join(tmpdir(), 'tidal-repl-'));
      const fresh = await start(3);
      const deadline = Date.now() + CONVERGE_MS;
      let warned = await ask<State>(fresh, 'state');
      while (!warned.warnings.includes('TIDAL_REPLICATION_GAP') && Date.now() < deadline) {
        await sleep(50);
        warned = await ask<State>(fresh, 'state');
      }
      expect(warned.warnings).toContain('TIDAL_REPLICATION_GAP');
      await fresh.kill();
      replicas.length = 3;
      rmSync(dirs[3], { recursive: true, force: true });
      // Bootstrapped from replica 1's snapshot, while the others keep writing.
      const snapshot = join(dirs[1]!, 'snapshot.db');
      await ask(all[1]!, 'snapshot', { file: snapshot });
      dirs[3] = mkdtempSync(join(tmpdir(), 'tidal-repl-'));
      const joined = await start(3, ['', snapshot]);
      for (let n = 4; n < 6; n++) await Promise.all(all.map((r) => ask(r, 'round', { n, split: true })));
      rounds.fill(6);
      const final = await converged(expectedCounts(rounds));
      expectSame(final);
      expect((await ask<State>(joined, 'state')).warnings).not.toContain('TIDAL_REPLICATION_GAP');
    },
    E2E_TIMEOUT_MS,
  );
  it(
    'a process exits by itself once its replicating database is closed',
    async () => {
      stream = `test:replication:${++streamNo}`;
      dirs = [mkdtempSync(join(tmpdir(), 'tidal-repl-'))];
      const child = new Replica(CLOSE_EXIT, [dirs[0]!, redis.url, stream]);
      expect(await child.next(60_000)).toBe('closed, published 1');
      // Exits without being told: nothing the link opened is left holding the event loop.
      for (let i = 0; i < 300 && child.alive; i++) await sleep(100);
      expect(child.alive).toBe(false);
      expect(child.child.exitCode).toBe(0);
    },
    E2E_TIMEOUT_MS,
  );
});
