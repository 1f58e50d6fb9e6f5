/**
 * The scheduler, the level choice and work sharing on their own, with deferred promises and
 * injected clocks: what starts, in which order, and what never starts is decided by the test's
 * order of events, never by timing.
 */
import { describe, expect, it } from 'vitest';
import { AbortedError, DegradationLevel, TimeoutError } from 'tidal-load';
import { chooseLevel, type LevelInputs } from '../src/level-choice.js';
import type { Executed } from '../src/query-pool.js';
import { Dropped, PRIORITY, QueryScheduler } from '../src/scheduler.js';
import { canonicalKey, resolveWorkSharing, WorkSharing, type Caller, type ExecutionControl } from '../src/sharing.js';

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (v: T) => void;
  reject: (e: unknown) => void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets every queued microtask (and p-queue's next-entry hop) run. */
const settle = () => new Promise((r) => setImmediate(r));

describe('QueryScheduler', () => {
  it('starts at most `depth` entries, the highest priority first and equal priorities in arrival order', async () => {
    const s = new QueryScheduler({ depth: 1 });
    const started: string[] = [];
    const gates = new Map<string, Deferred<void>>();
    const submit = (name: string, priority: number) => {
      const gate = deferred<void>();
      gates.set(name, gate);
      return s.submit(
        () => {
          started.push(name);
          return gate.promise;
        },
        { priority, signal: null },
      );
    };
    const all = [
      submit('first', PRIORITY.default),
      submit('shed-1', PRIORITY.sheddable),
      submit('default-1', PRIORITY.default),
      submit('critical', PRIORITY.critical),
      submit('shed-2', PRIORITY.sheddable),
      submit('default-2', PRIORITY.default),
    ];
    expect(started).toEqual(['first']);
    expect([s.running, s.waiting]).toEqual([1, 5]);
    for (let i = 0; i < 6; i++) {
      gates.get(started[i]!)!.resolve();
      await settle();
      expect(s.running).toBe(i < 5 ? 1 : 0);
    }
    await Promise.all(all);
    expect(started).toEqual(['first', 'critical', 'default-1', 'default-2', 'shed-1', 'shed-2']);
    expect(s.dispatched).toBe(6);
  });

  it('an entry aborted while it waits leaves the queue at once and never starts; one aborted while running keeps its slot', async () => {
    const s = new QueryScheduler({ depth: 1 });
    const started: string[] = [];
    const hold = deferred<void>();
    const running = new AbortController();
    const head = s.submit(() => (started.push('head'), hold.promise), { priority: 1, signal: running.signal });
    const waiting = new AbortController();
    const abandoned = s.submit(() => (started.push('abandoned'), Promise.resolve()), { priority: 1, signal: waiting.signal });
    const kept = s.submit(() => (started.push('kept'), Promise.resolve()), { priority: 1, signal: null });
    expect(s.waiting).toBe(2);
    waiting.abort();
    await expect(abandoned).rejects.toBeInstanceOf(Dropped);
    expect(s.waiting).toBe(1);
    // Aborting the running entry does not free its slot: the task it started is still out.
    running.abort();
    await settle();
    expect([s.running, s.waiting]).toEqual([1, 1]);
    hold.resolve();
    await head;
    await kept;
    expect(started).toEqual(['head', 'kept']);
    expect([s.dispatched, s.dropped]).toEqual([2, 1]);
    // Already aborted: never queued.
    await expect(s.submit(() => Promise.resolve(), { priority: 1, signal: AbortSignal.abort() })).rejects.toBeInstanceOf(Dropped);
    expect(s.dropped).toBe(2);
  });

  it('drops an entry found expired when it reaches the head, by the injected clock', async () => {
    let now = 0;
    const s = new QueryScheduler({ depth: 1, now: () => now });
    const hold = deferred<void>();
    const started: string[] = [];
    const head = s.submit(() => (started.push('head'), hold.promise), { priority: 1, signal: null });
    const deadline = 10;
    const late = s.submit(() => (started.push('late'), Promise.resolve()), {
      priority: 1,
      signal: null,
      expired: () => s.now() >= deadline,
    });
    const onTime = s.submit(() => (started.push('on time'), Promise.resolve()), {
      priority: 1,
      signal: null,
      expired: () => s.now() >= 1_000,
    });
    now = 10;
    hold.resolve();
    await head;
    const err = await late.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Dropped);
    expect((err as Dropped).reason).toBe('expired');
    await onTime;
    expect(started).toEqual(['head', 'on time']);
    expect([s.dispatched, s.dropped]).toEqual([2, 1]);
  });
});

describe('chooseLevel', () => {
  const base: LevelInputs = {
    loadLevel: DegradationLevel.Full,
    criticalityLevel: DegradationLevel.Full,
    requested: null,
    remainingMs: null,
    queueMs: 0,
    serviceMs: (l) => [40, 25, 8, 3][l]!,
    loadManagement: true,
  };

  it('takes the cheapest of load, criticality, request and deadline, naming the reason', () => {
    expect(chooseLevel(base)).toEqual({ level: 0, reason: 'load' });
    expect(chooseLevel({ ...base, loadLevel: 2, criticalityLevel: 2 })).toEqual({ level: 2, reason: 'load' });
    expect(chooseLevel({ ...base, criticalityLevel: 1 })).toEqual({ level: 1, reason: 'criticality' });
    expect(chooseLevel({ ...base, requested: 3 })).toEqual({ level: 3, reason: 'requested' });
    // A request never makes a query better than the load allows.
    expect(chooseLevel({ ...base, loadLevel: 2, criticalityLevel: 2, requested: 0 })).toEqual({ level: 2, reason: 'load' });
    expect(chooseLevel({ ...base, loadLevel: 2, criticalityLevel: 2, requested: 2 })).toEqual({ level: 2, reason: 'load' });
  });

  it('picks the best level whose queueing plus service time fits the remaining budget', () => {
    expect(chooseLevel({ ...base, remainingMs: 100 })).toEqual({ level: 0, reason: 'load' });
    expect(chooseLevel({ ...base, remainingMs: 40 })).toEqual({ level: 0, reason: 'load' });
    expect(chooseLevel({ ...base, remainingMs: 39 })).toEqual({ level: 1, reason: 'deadline' });
    expect(chooseLevel({ ...base, remainingMs: 20 })).toEqual({ level: 2, reason: 'deadline' });
    expect(chooseLevel({ ...base, remainingMs: 20, queueMs: 15 })).toEqual({ level: 3, reason: 'deadline' });
    // Nothing fits: the cheapest.
    expect(chooseLevel({ ...base, remainingMs: 1 })).toEqual({ level: 3, reason: 'deadline' });
    // The deadline starts from what the others allow, and never improves it.
    expect(chooseLevel({ ...base, requested: 2, remainingMs: 1_000 })).toEqual({ level: 2, reason: 'requested' });
  });

  it('with load management off only the request degrades', () => {
    const off = { ...base, loadManagement: false, loadLevel: 3, criticalityLevel: 3, remainingMs: 1 } as const;
    expect(chooseLevel(off)).toEqual({ level: 0, reason: 'load' });
    expect(chooseLevel({ ...off, requested: 1 })).toEqual({ level: 1, reason: 'requested' });
  });
});

describe('canonicalKey', () => {
  it('is the same for equal tasks whatever the key order, and differs for any different value', () => {
    const a = { profile: 'popular', filter: { genre: 'jazz', createdAt: { gt: 1, lt: 5 } }, context: Float32Array.of(1, 0.5), limit: 10 };
    const b = { limit: 10, context: Float32Array.of(1, 0.5), filter: { createdAt: { lt: 5, gt: 1 }, genre: 'jazz' }, profile: 'popular' };
    expect(canonicalKey(a)).toBe(canonicalKey(b));
    expect(canonicalKey({ ...a, context: Float32Array.of(1, 0.5000001) })).not.toBe(canonicalKey(a));
    expect(canonicalKey({ ...a, limit: 11 })).not.toBe(canonicalKey(a));
    expect(canonicalKey({ ...a, filter: { genre: 'jazz"', createdAt: { gt: 1, lt: 5 } } })).not.toBe(canonicalKey(a));
    expect(canonicalKey({ x: null })).not.toBe(canonicalKey({ x: 'null' }));
  });
});

describe('WorkSharing', () => {
  const NOW = 1_000_000;

  /** A WorkSharing with an injected clock, and executions the test completes by hand. */
  function setup(options = resolveWorkSharing(undefined)) {
    const clock = { now: NOW, mono: 0 };
    const sharing = new WorkSharing(
      options,
      () => clock.now,
      () => clock.mono,
    );
    const executions: { control: ExecutionControl; done: Deferred<Executed<string>> }[] = [];
    const execute = (control: ExecutionControl) => {
      const done = deferred<Executed<string>>();
      executions.push({ control, done });
      return done.promise;
    };
    let settled = 0;
    const caller = (extra: Partial<Caller> = {}): Caller => ({
      signal: null,
      timeoutMs: null,
      operation: 'retrieve',
      onSettled: () => settled++,
      ...extra,
    });
    /** Dispatches execution `i` (stamps its clock now) and completes it with `value`. */
    const complete = (i: number, value: string) => {
      const e = executions[i]!;
      e.control.onDispatch(clock.now);
      e.done.resolve({ result: value, nowMs: clock.now });
    };
    const run = (key: string | null, level: DegradationLevel, c: Caller = caller(), version = 1) =>
      sharing.run(key, level, version, c, execute, () => 100);
    return { sharing, clock, executions, caller, complete, run, settled: () => settled };
  }

  it('identical queries waiting for a worker share one execution, at every level', async () => {
    const t = setup();
    const a = t.run('k', DegradationLevel.Full);
    const b = t.run('k', DegradationLevel.Full);
    const other = t.run('other', DegradationLevel.Full);
    const unshared = [t.run(null, DegradationLevel.Full), t.run(null, DegradationLevel.Full)];
    expect(t.executions).toHaveLength(5 - 1);
    t.complete(0, 'r');
    expect(await a).toEqual({ result: 'r', ageMs: 0, source: 'executed' });
    expect(await b).toEqual({ result: 'r', ageMs: 0, source: 'shared' });
    for (let i = 1; i < 4; i++) t.complete(i, `r${i}`);
    await Promise.all([other, ...unshared]);
    expect(t.settled()).toBe(5);
  });

  it('at Full an execution already dispatched is never joined, and no result is kept', async () => {
    const t = setup();
    const a = t.run('k', DegradationLevel.Full);
    t.executions[0]!.control.onDispatch(t.clock.now);
    // Same millisecond, but it may have read the state before a write this caller saw: not joined.
    const b = t.run('k', DegradationLevel.Full);
    expect(t.executions).toHaveLength(2);
    t.complete(0, 'a');
    t.complete(1, 'b');
    await Promise.all([a, b]);
    const c = t.run('k', DegradationLevel.Full);
    expect(t.executions).toHaveLength(3);
    t.complete(2, 'c');
    expect(await c).toMatchObject({ result: 'c', source: 'executed' });
  });

  it('at CoarseAggregates and NoDiversity answers from a result at most maxStalenessMs old, with its age', async () => {
    const t = setup();
    const first = t.run('k', DegradationLevel.CoarseAggregates);
    t.complete(0, 'coarse');
    await first;
    t.clock.now += 250;
    expect(await t.run('k', DegradationLevel.CoarseAggregates)).toEqual({ result: 'coarse', ageMs: 250, source: 'cached' });
    expect(t.executions).toHaveLength(1);
    t.clock.now += 1;
    const fresh = t.run('k', DegradationLevel.CoarseAggregates);
    expect(t.executions).toHaveLength(2);
    t.complete(1, 'newer');
    expect(await fresh).toEqual({ result: 'newer', ageMs: 0, source: 'executed' });
    // NoDiversity keeps results for 1000 ms; a running execution is joined within it too.
    const nd = t.run('n', DegradationLevel.NoDiversity);
    t.executions[2]!.control.onDispatch(t.clock.now);
    t.clock.now += 400;
    const joined = t.run('n', DegradationLevel.NoDiversity);
    expect(t.executions).toHaveLength(3);
    t.executions[2]!.done.resolve({ result: 'nd', nowMs: t.clock.now - 400 });
    expect(await nd).toMatchObject({ result: 'nd', ageMs: 0 });
    expect(await joined).toEqual({ result: 'nd', ageMs: 400, source: 'shared' });
    t.clock.now += 600;
    expect(await t.run('n', DegradationLevel.NoDiversity)).toMatchObject({ ageMs: 1000, source: 'cached' });
    t.clock.now += 1;
    void t.run('n', DegradationLevel.NoDiversity);
    expect(t.executions).toHaveLength(4);
  });

  it('keeps nothing at Full and ReducedCandidates, and drops kept results when the items change', async () => {
    const t = setup();
    for (const level of [DegradationLevel.Full, DegradationLevel.ReducedCandidates]) {
      const p = t.run(`k${level}`, level);
      t.complete(t.executions.length - 1, 'x');
      await p;
      void t.run(`k${level}`, level);
      expect(t.executions).toHaveLength(level === DegradationLevel.Full ? 2 : 4);
      t.complete(t.executions.length - 1, 'x');
    }
    const p = t.run('c', DegradationLevel.CoarseAggregates, t.caller(), 1);
    t.complete(4, 'v1');
    await p;
    expect(t.sharing.kept.entries).toBe(1);
    // A newer items version (a query after an upsert) clears what was kept.
    void t.run('c', DegradationLevel.CoarseAggregates, t.caller(), 2);
    expect(t.sharing.kept.entries).toBe(0);
    expect(t.executions).toHaveLength(6);
  });

  it('bounds the kept results by entries and bytes, oldest first', async () => {
    const t = setup(resolveWorkSharing({ maxEntries: 2, maxBytes: 1_000 }));
    for (const k of ['a', 'b', 'c']) {
      const p = t.run(k, DegradationLevel.NoDiversity);
      t.complete(t.executions.length - 1, k);
      await p;
    }
    expect(t.sharing.kept).toEqual({ entries: 2, bytes: 2 * (100 + 2) });
    expect((await t.run('c', DegradationLevel.NoDiversity)).source).toBe('cached');
    void t.run('a', DegradationLevel.NoDiversity);
    expect(t.executions).toHaveLength(4);
  });

  it('a caller that gives up leaves alone; the execution is given up only when no caller waits', async () => {
    const t = setup();
    const c1 = new AbortController();
    const c2 = new AbortController();
    const a = t.run('k', DegradationLevel.Full, t.caller({ signal: c1.signal }));
    const b = t.run('k', DegradationLevel.Full, t.caller({ signal: c2.signal }));
    const exec = t.executions[0]!.control;
    c1.abort();
    await expect(a).rejects.toBeInstanceOf(AbortedError);
    expect(exec.signal!.aborted).toBe(false);
    c2.abort();
    await expect(b).rejects.toBeInstanceOf(AbortedError);
    expect(exec.signal!.aborted).toBe(true);
    // A new identical caller does not join the abandoned execution.
    void t.run('k', DegradationLevel.Full);
    expect(t.executions).toHaveLength(2);
    // Slots are released only when the execution settles, even for callers that left.
    expect(t.settled()).toBe(0);
    t.executions[0]!.done.reject(new Dropped('aborted'));
    await settle();
    expect(t.settled()).toBe(2);
  });

  it('expires an execution only when every caller has a deadline and all have passed, answering TimeoutError', async () => {
    const t = setup();
    const a = t.run('k', DegradationLevel.Full, t.caller({ timeoutMs: 50 }));
    const exec = t.executions[0]!.control;
    t.clock.mono = 60;
    expect(exec.expired()).toBe(true);
    const b = t.run('k', DegradationLevel.Full, t.caller({ timeoutMs: 100 }));
    expect(exec.expired()).toBe(false);
    t.clock.mono = 160;
    expect(exec.expired()).toBe(true);
    t.executions[0]!.done.reject(new Dropped('expired'));
    await expect(a).rejects.toBeInstanceOf(TimeoutError);
    await expect(b).rejects.toMatchObject({ code: 'TIDAL_TIMEOUT', timeoutMs: 100 });
    const c = t.run('z', DegradationLevel.Full, t.caller({ timeoutMs: 5 }));
    void t.run('z', DegradationLevel.Full);
    t.clock.mono = 1e9;
    expect(t.executions[1]!.control.expired()).toBe(false);
    t.complete(1, 'ok');
    expect((await c).result).toBe('ok');
  });
});
