/**
 * bench:serve --soak's arithmetic on injected samples: requests into the windows of their
 * scheduled time, windows and memory samples into minutes, minutes into a verdict. No server, no
 * clock.
 */
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { WindowAccumulator, type WindowSample } from '../bench/src/serve/windows.js';
import { checkTargets, renderSoak, soakMinutes, soakVerdict, SOAK_TARGETS, type MemorySample } from '../bench/src/serve/soak.js';
import { memoryComponents, rssSplitOf } from '../bench/src/serve/soak-run.js';

const MIN = 60_000;
const MIB = 2 ** 20;

/** `n` requests spread over minute `m` (0-based), each with `latency(i)` ms and `status(i)`. */
function minuteOf(
  m: number,
  n: number,
  latency: (i: number) => number,
  status: (i: number) => number = () => 200,
  level = 'Full',
  type = 'for_you',
): WindowSample[] {
  return Array.from({ length: n }, (_, i) => {
    const scheduledMs = m * MIN + (i * MIN) / n;
    return { scheduledMs, endMs: scheduledMs + latency(i), status: status(i), counted: level, type };
  });
}

function accumulate(samples: readonly WindowSample[], unansweredIn: number[] = []): WindowAccumulator {
  const acc = new WindowAccumulator(MIN);
  for (const s of samples) {
    acc.sent(s.scheduledMs);
    acc.add(s);
  }
  for (const at of unansweredIn) acc.sent(at);
  return acc;
}

const rssAt = (minute: number, mib: number, components?: Record<string, number>): MemorySample => ({
  atMs: minute * MIN + 30_000,
  rss: mib * MIB,
  ...(components ? { components } : {}),
});

describe('soak windows and minutes', () => {
  it('counts each request in the minute of its SCHEDULED time, however late its answer came', () => {
    // Scheduled at 59.9 s, answered at 61.4 s: minute 1's.
    const acc = accumulate([
      { scheduledMs: 59_900, endMs: 61_400, status: 200, counted: 'Full', type: 'for_you' },
      ...minuteOf(1, 10, () => 5),
    ]);
    const [first, second] = acc.windows();
    expect(first).toMatchObject({ startMs: 0, sent: 1, ok: 1, okLatency: { n: 1, p50: 1_500, p99: 1_500, max: 1_500 } });
    expect(second).toMatchObject({ startMs: MIN, sent: 10, ok: 10, okLatency: { p99: 5 } });
  });

  it('turns windows and RSS samples into minutes: nearest-rank p50/p99 of admitted requests, refusals, levels, writes, RSS max', () => {
    // Minute 1: 100 reads, latency 1..100 ms; 10 of them refused (503), 20 served at NoDiversity.
    const m1 = minuteOf(
      0,
      100,
      (i) => i + 1,
      (i) => (i % 10 === 9 ? 503 : 200),
    ).map((s, i) => (i < 20 ? { ...s, counted: 'NoDiversity' } : s));
    // Minute 2: 50 writes at 4 ms, one 404, one with no answer, two unanswered at the end.
    const m2 = minuteOf(
      1,
      52,
      () => 4,
      (i) => (i === 50 ? 404 : i === 51 ? 0 : 200),
      '(none)',
      'write:signal',
    );
    const windows = accumulate([...m1, ...m2], [MIN + 1, MIN + 2]).windows();
    const rows = soakMinutes(
      windows,
      [
        rssAt(0, 100),
        rssAt(0, 120),
        rssAt(1, 110, { users: 8 * MIB, catalog: 30 * MIB }),
        { atMs: MIN + 50_000, rss: 105 * MIB },
        rssAt(2, 999),
      ],
      MIN,
      2,
    );
    expect(rows).toHaveLength(2);
    const ok1 = Array.from({ length: 100 }, (_, i) => i + 1).filter((l) => l % 10 !== 0);
    expect(rows[0]).toMatchObject({
      minute: 1,
      sent: 100,
      ok: 90,
      refused: 10,
      failed: 0,
      writesOk: 0,
      readsOk: 90,
      rssMax: 120 * MIB,
      components: null,
    });
    // Nearest rank over the 90 admitted latencies.
    expect(rows[0]!.p50).toBe(ok1[44]);
    expect(rows[0]!.p99).toBe(ok1[89]);
    expect(rows[0]!.levels).toEqual({ NoDiversity: 18 / 90, Full: 72 / 90 });
    expect(rows[1]).toMatchObject({
      minute: 2,
      sent: 54,
      ok: 50,
      refused: 0,
      failed: 4,
      writesOk: 50,
      readsOk: 0,
      p50: 4,
      p99: 4,
      rssMax: 110 * MIB,
    });
    expect(rows[1]!.components).toEqual({ users: 8 * MIB, catalog: 30 * MIB });
    // Writes carry no level: the level shares are of the answers that have one.
    expect(rows[1]!.levels).toEqual({});
  });

  it('passes a steady soak and names every broken target: p99, refusals, failures, RSS growth after the settling minutes', () => {
    const steady = [0, 1, 2, 3].flatMap((m) => minuteOf(m, 200, (i) => 10 + (i % 50)));
    const rss = [rssAt(0, 900), rssAt(1, 1_000), rssAt(2, 1_020), rssAt(3, 1_040)];
    const good = soakVerdict(soakMinutes(accumulate(steady).windows(), rss));
    expect(good).toMatchObject({ pass: true, reasons: [], badMinutes: [], rss: { settled: 1_000 * MIB, peak: 1_040 * MIB } });
    expect(good.rss!.growth).toBeCloseTo(0.04, 12);
    expect(renderSoak(soakMinutes(accumulate(steady).windows(), rss), good)).toMatch(/\nPASS \(targets: p99 ≤ 250 ms/);

    // The stall the issue saw: minutes 2-4 with a p99 over a second, refusals, RSS creeping 11 %.
    const stalled = [
      ...minuteOf(0, 200, () => 20),
      ...minuteOf(
        1,
        200,
        (i) => (i % 20 === 0 ? 1_367 : 30),
        (i) => (i % 40 === 1 ? 429 : 200),
      ),
      ...minuteOf(2, 200, () => 251),
      ...minuteOf(3, 200, () => 20),
    ];
    const creep = [rssAt(0, 1_100), rssAt(1, 1_127), rssAt(2, 1_200), rssAt(3, 1_255)];
    const rows = soakMinutes(accumulate(stalled).windows(), creep);
    const bad = soakVerdict(rows);
    expect(bad.pass).toBe(false);
    expect(bad.badMinutes).toEqual([2, 3]);
    expect(bad.reasons).toEqual([
      'minute 2: p99 1367 ms > 250 ms, 5 refused > 0',
      'minute 3: p99 251 ms > 250 ms',
      'RSS grew 11.4 % after minute 2 (1127 → 1255 MiB) > 5 %',
    ]);
    expect(renderSoak(rows, bad)).toMatch(/\nFAIL \(.*\): minute 2: p99 1367 ms/);
    // At the target is within it; the targets are the caller's.
    expect(soakVerdict(rows, { ...SOAK_TARGETS, p99Ms: 1_367, refusals: 5, rssGrowth: 0.2 }).pass).toBe(true);
  });

  it('fails a minute that served nothing, and a soak too short to judge its memory', () => {
    const rows = soakMinutes(
      accumulate([
        ...minuteOf(0, 10, () => 5),
        ...minuteOf(
          1,
          10,
          () => 5,
          () => 0,
        ),
      ]).windows(),
      [rssAt(0, 10), rssAt(1, 10)],
    );
    const v = soakVerdict(rows);
    expect(v.badMinutes).toEqual([2]);
    expect(v.reasons).toEqual(['minute 2: nothing served, 10 failed', 'too short to judge RSS: no sample after minute 2']);
    expect(v.rss).toBeNull();
  });

  it('refuses targets and windows out of range, naming the value', () => {
    expect(() => new WindowAccumulator(0)).toThrow(InvalidInputError);
    expect(() => checkTargets({ ...SOAK_TARGETS, p99Ms: 0 })).toThrow(/p99Ms must be a number of ms > 0, got 0/);
    expect(() => checkTargets({ ...SOAK_TARGETS, refusals: -1 })).toThrow(/refusals/);
    expect(() => checkTargets({ ...SOAK_TARGETS, settleMinutes: 1.5 })).toThrow(/settleMinutes/);
    expect(() => soakVerdict([], { ...SOAK_TARGETS, rssGrowth: Number.NaN })).toThrow(/rssGrowth must be a share ≥ 0/);
  });

  it("flattens /stats' db.memory into components", () => {
    const stats = {
      db: {
        memory: {
          process: { rss: 9, heapUsed: 1, heapTotal: 2, external: 3, arrayBuffers: 4 },
          signals: { bytes: 5, slots: 1 },
          users: { bytes: 64, usedBytes: 40, liveBytes: 30, records: 1, users: 1, sessions: 0 },
          cursors: { bytes: 6, pinned: 0 },
          catalog: { bytes: 7, items: 1, copies: 2 },
          text: { bytes: 8, terms: 1, copies: 2 },
          vectors: { bytes: 9, rows: 1, copies: 2 },
          threads: [
            { threadId: 0, heapUsed: 1 },
            { threadId: 1, heapUsed: 10 },
            { threadId: 2, heapUsed: 20 },
          ],
        },
      },
    };
    expect(memoryComponents(stats)).toEqual({
      mainHeap: 1,
      workerHeaps: 30,
      external: 3,
      signals: 5,
      users: 40,
      cursors: 6,
      catalog: 7,
      text: 8,
      vectors: 9,
    });
    expect(memoryComponents({})).toBeUndefined();
  });

  it('reads the RSS and its split from /proc/PID/status, and keeps the last split of each minute', () => {
    const status = 'Name:\tnode\nVmRSS:\t  1048576 kB\nRssAnon:\t  700000 kB\nRssFile:\t  300000 kB\nRssShmem:\t   48576 kB\nThreads: 12\n';
    const reading = rssSplitOf('self', status);
    expect(reading).toEqual({ rss: 1024 * MIB, split: { anon: 700_000 * 1024, file: 300_000 * 1024, shmem: 48_576 * 1024 } });
    expect(rssSplitOf('self', 'VmRSS:\t 10 kB\n')).toEqual({ rss: 10 * 1024 });
    const own = rssSplitOf('self');
    expect(own.rss).toBeGreaterThan(0);
    expect(own.split!.anon + own.split!.file + own.split!.shmem).toBe(own.rss);
    const split = (anon: number) => ({ anon: anon * MIB, file: MIB, shmem: 0 });
    const rows = soakMinutes(accumulate(minuteOf(0, 10, () => 5)).windows(), [
      { atMs: 1_000, rss: 10 * MIB, split: split(9) },
      { atMs: 2_000, rss: 11 * MIB, split: split(10) },
      { atMs: 3_000, rss: 12 * MIB },
    ]);
    expect(rows[0]).toMatchObject({ rssMax: 12 * MIB, split: split(10) });
    expect(renderSoak(rows, soakVerdict(rows))).toMatch(/\| 12 \| 10 · 1 · 0 \|/);
  });
});
