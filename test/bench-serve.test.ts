import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
/**
 * The pure parts of bench:serve: whether a phase measured the server or the generator, the
 * `--variants` list, the CPU lists of `--pin`, and the per-thread CPU arithmetic. No server, no
 * clock: inputs are the numbers the generator and /proc report.
 */
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { checkThresholds, judgePhase, VALIDITY_DEFAULTS } from '../bench/src/serve/validity.js';
import type { GeneratorHealth } from '../bench/src/serve/validity.js';
import { DEFAULT_VARIANTS, parseVariants, resolveRuntime } from '../bench/src/serve/variants.js';
import { chooseCpus, parseCpuList, pinnedCommand } from '../bench/src/serve/pinning.js';
import { describeThreads, threadShares } from '../bench/src/serve/threads.js';
import { addLoop, cellRow, renderStageRatios, renderStages, stageOrder, stageRow } from '../bench/src/serve/stages.js';
import { summarizeProfiles } from '../bench/src/serve/profile.js';

const healthy: GeneratorHealth = {
  generator: { loopLagP99Ms: 2 },
  sendLateness: { p99: 1.5, late: 10, sends: 10_000, lateMs: 5 },
  generatorDropped: 0,
};

describe('phase validity (judgePhase)', () => {
  it('a generator that kept its schedule gives a valid phase, and its figures are reported', () => {
    expect(judgePhase(healthy)).toEqual({
      valid: true,
      reasons: [],
      lagP99Ms: 2,
      latenessP99Ms: 1.5,
      lateShare: 0.001,
      poolWaitP99Ms: null,
    });
  });

  it('an event-loop lag p99 above the threshold makes it INVALID; at the threshold it is not', () => {
    const at = { ...healthy, generator: { loopLagP99Ms: VALIDITY_DEFAULTS.maxLagP99Ms } };
    expect(judgePhase(at).valid).toBe(true);
    const over = judgePhase({ ...healthy, generator: { loopLagP99Ms: VALIDITY_DEFAULTS.maxLagP99Ms + 0.1 } });
    expect(over.valid).toBe(false);
    expect(over.reasons).toHaveLength(1);
    expect(over.reasons[0]).toMatch(/event-loop lag p99 10\.1 ms > 10 ms/);
    // The threshold is the caller's.
    expect(judgePhase({ ...healthy, generator: { loopLagP99Ms: 30 } }, { maxLagP99Ms: 50, maxLateShare: 0.01 }).valid).toBe(true);
  });

  it('more late sends than the share allows makes it INVALID, whatever the lag', () => {
    const late = (n: number) => ({ ...healthy, sendLateness: { ...healthy.sendLateness!, late: n } });
    expect(judgePhase(late(100)).valid).toBe(true); // 1 % exactly
    const over = judgePhase(late(101));
    expect(over).toMatchObject({ valid: false, lateShare: 0.0101 });
    expect(over.reasons).toEqual(['1.0 % of sends more than 5 ms late > 1.0 %']);
    expect(judgePhase(late(101), { maxLagP99Ms: 10, maxLateShare: 0.05 }).valid).toBe(true);
  });

  it('lists every reason, and counts dropped arrivals as the generator falling behind', () => {
    const v = judgePhase({
      generator: { loopLagP99Ms: 40 },
      sendLateness: { p99: 80, late: 5_000, sends: 10_000, lateMs: 5 },
      generatorDropped: 3,
    });
    expect(v.valid).toBe(false);
    expect(v.reasons).toHaveLength(3);
    expect(v.reasons[2]).toMatch(/dropped 3 arrivals/);
  });

  it('a closed loop (no lateness) is judged on its lag alone; a phase without sends has no late share', () => {
    expect(judgePhase({ ...healthy, sendLateness: null })).toEqual({
      valid: true,
      reasons: [],
      lagP99Ms: 2,
      latenessP99Ms: null,
      lateShare: null,
      poolWaitP99Ms: null,
    });
    expect(judgePhase({ ...healthy, sendLateness: { p99: 0, late: 0, sends: 0, lateMs: 5 } }).lateShare).toBeNull();
  });

  it("a pool's wait for a free connection, however long, is reported and never makes a phase INVALID", () => {
    const pooled = judgePhase({ ...healthy, poolWait: { p99: 9_000 } });
    expect(pooled).toMatchObject({ valid: true, reasons: [], latenessP99Ms: 1.5, poolWaitP99Ms: 9_000 });
    // The generator's own lateness still does, with or without a pool.
    const late = judgePhase({ ...healthy, sendLateness: { ...healthy.sendLateness!, late: 500 }, poolWait: { p99: 0.1 } });
    expect(late).toMatchObject({ valid: false, poolWaitP99Ms: 0.1 });
    expect(late.reasons).toEqual(['5.0 % of sends more than 5 ms late > 1.0 %']);
  });

  it('refuses thresholds out of range', () => {
    expect(() => checkThresholds({ maxLagP99Ms: -1, maxLateShare: 0.01 })).toThrow(InvalidInputError);
    expect(() => checkThresholds({ maxLagP99Ms: 10, maxLateShare: 2 })).toThrow(/maxLateShare must be a share from 0 to 1, got 2/);
    expect(Object.isFrozen(VALIDITY_DEFAULTS)).toBe(true);
  });
});

describe('bench:serve --variants', () => {
  it('the default is the three presets, with their flags', () => {
    expect(parseVariants(DEFAULT_VARIANTS).map((v) => [v.name, v.runtime, v.args])).toEqual([
      ['on', 'default', []],
      ['off', 'default', ['--no-admission']],
      ['nice0', 'default', ['--worker-nice', '0']],
    ]);
  });

  it('takes a name, a runtime and flags passed through as they are', () => {
    const v = parseVariants(' on ; --acceptors 1;a2=--acceptors 2;node24:--acceptors 2; n24off=node24:off ;x=--tenant-rate=free=5,pro=9');
    expect(v.map((x) => [x.name, x.runtime, x.args])).toEqual([
      ['on', 'default', []],
      ['acceptors 1', 'default', ['--acceptors', '1']],
      ['a2', 'default', ['--acceptors', '2']],
      ['node24 acceptors 2', 'node24', ['--acceptors', '2']],
      ['n24off', 'node24', ['--no-admission']],
      ['x', 'default', ['--tenant-rate=free=5,pro=9']],
    ]);
    expect(v[3]!.heading).toBe('Admission chain on, `--acceptors 2`, node24');
  });

  it('refuses an unknown runtime or preset, duplicate names and an empty list', () => {
    expect(() => parseVariants('node99:--acceptors 2')).toThrow(/runtime of default or node24/);
    expect(() => parseVariants('fast')).toThrow(/a preset \(on, off, nice0\) or server flags/);
    expect(() => parseVariants('on;on')).toThrow(/distinct names/);
    expect(() => parseVariants(' ; ')).toThrow(InvalidInputError);
  });

  it('a node24 variant without scripts/node24.mjs fails with a message naming the script', () => {
    expect(() => resolveRuntime('node24', { node: process.execPath, root: '/nonexistent' }, '/nonexistent')).toThrow(
      /scripts\/node24\.mjs is missing/,
    );
    expect(() => resolveRuntime('default', { node: process.execPath, root: '/nonexistent' }, '/nonexistent')).toThrow(
      /packages\/tidal-serve\/dist\/cli\.js is missing/,
    );
  });
});

describe('bench:serve --pin', () => {
  it('parses CPU lists', () => {
    expect(parseCpuList('--server-cpus', '0')).toEqual([0]);
    expect(parseCpuList('--server-cpus', '3,0-1,1')).toEqual([0, 1, 3]);
    expect(() => parseCpuList('--server-cpus', '1-0')).toThrow(/--server-cpus/);
    expect(() => parseCpuList('--server-cpus', 'a')).toThrow(InvalidInputError);
  });

  it('on 2 CPUs: the server on the first, the generator on the second; given lists must be disjoint and allowed', () => {
    expect(chooseCpus([0, 1], null, null)).toEqual({ server: [0], generator: [1] });
    expect(chooseCpus([0, 1, 2, 3], null, null)).toEqual({ server: [0, 1, 2], generator: [3] });
    expect(chooseCpus([0, 1], [1], [0])).toEqual({ server: [1], generator: [0] });
    expect(() => chooseCpus([0, 1], [0, 1], [1])).toThrow(/disjoint/);
    expect(() => chooseCpus([0, 1], [2], [1])).toThrow(/--server-cpus must be CPUs this process may use/);
    expect(() => chooseCpus([0], null, null)).toThrow(/2 CPUs or more/);
  });

  it('runs a pinned command through taskset -c, which keeps the command as the process', () => {
    expect(pinnedCommand('/bin/node', ['a.js', '-x'], [0, 2])).toEqual({
      command: 'taskset',
      args: ['-c', '0,2', '/bin/node', 'a.js', '-x'],
    });
    expect(pinnedCommand('/bin/node', ['a.js'], null)).toEqual({ command: '/bin/node', args: ['a.js'] });
  });
});

describe('bench:serve per-thread CPU', () => {
  it("takes each thread's run time between two readings, busiest first, the main thread by its tid", () => {
    const before = [
      { tid: 100, comm: 'node', runNs: 1e9, waitNs: 0 },
      { tid: 101, comm: 'node', runNs: 5e8, waitNs: 0 },
      { tid: 102, comm: 'gone', runNs: 1e9, waitNs: 0 },
    ];
    const after = [
      { tid: 100, comm: 'node', runNs: 1.5e9, waitNs: 0 },
      { tid: 101, comm: 'node', runNs: 2.5e9, waitNs: 0 },
      { tid: 103, comm: 'acceptor', runNs: 1e8, waitNs: 0 },
      { tid: 104, comm: 'idle', runNs: 0, waitNs: 0 },
    ];
    const shares = threadShares(100, before, after, 2);
    expect(shares.map((t) => [t.tid, t.main, t.share, t.cpuUs])).toEqual([
      [101, false, 1, 2e6],
      [100, true, 0.25, 5e5],
      [103, false, 0.05, 1e5],
      [104, false, 0, 0],
    ]);
    expect(describeThreads(shares, 2)).toBe('node/101 100 %, main 25 %');
    expect(describeThreads(shares, 5)).toBe('node/101 100 %, main 25 %, acceptor/103 5 %');
  });
});

describe('bench:serve --stages arithmetic (stageRow)', () => {
  const reading = (ms: number[], cpuNs: number) => ({
    stagesMs: { admission: ms[0]!, plan: ms[1]!, executor: ms[2]!, hydration: ms[3]!, json: ms[4]!, write: ms[5]! },
    cpuNs,
  });

  it("each stage's growth per response in µs, and the server's CPU less the stages as the rest", () => {
    const before = reading([1, 2, 3, 4, 5, 6], 1e9);
    // 100 responses: 10 ms more admission (100 µs each), 40 ms more executor (400 µs each) ...
    const after = reading([11, 4, 43, 5, 6, 16], 1e9 + 100e6);
    const row = stageRow('for_you', 'NoDiversity', before, after, 100, 0.98);
    expect(row.stagesUs).toEqual({ admission: 100, plan: 20, executor: 400, hydration: 10, json: 10, write: 100 });
    expect(row.cpuUs).toBe(1000);
    expect(row.restUs).toBe(1000 - 640);
    expect(row).toMatchObject({ type: 'for_you', level: 'NoDiversity', responses: 100, atLevel: 0.98, runShare: 1 });
  });

  it('scales the wall-clock stages by the share of busy time the threads ran rather than waited for a CPU', () => {
    const before = { ...reading([0, 0, 0, 0, 0, 0], 0), waitNs: 0 };
    // 100 ms run, 300 ms waiting: a quarter of the busy time on a CPU.
    const after = { ...reading([0, 0, 40, 0, 0, 0], 100e6), waitNs: 300e6 };
    const row = stageRow('hybrid', 'Full', before, after, 100, 1);
    expect(row.runShare).toBe(0.25);
    expect(row.stagesUs.executor).toBe(100);
    expect(row.restUs).toBe(900);
  });

  it('runs every type at every level once a round, each level first for some type, the rotation moving each round', () => {
    const types = ['for_you', 'following', 'related', 'trending', 'text'] as const;
    const cells = stageOrder(types, 2);
    expect(cells).toHaveLength(2 * types.length * 4);
    for (const type of types) {
      for (const level of ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const) {
        expect(cells.filter((c) => c.type === type && c.level === level).map((c) => c.round)).toEqual([0, 1]);
      }
    }
    const firsts = (round: number) => types.map((type) => cells.find((c) => c.round === round && c.type === type)!.level);
    expect(new Set(firsts(0))).toEqual(new Set(['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity']));
    expect(firsts(1)).not.toEqual(firsts(0));
    // A type's levels run one after another.
    expect(cells.slice(0, 4).every((c) => c.type === 'for_you')).toBe(true);
  });

  it("a cell's row totals its loops over the rounds: stages, CPU, waits, responses and the share at its level", () => {
    const r0 = { ...reading([0, 0, 0, 0, 0, 0], 0), waitNs: 0 };
    // Round 1: 100 responses, 10 ms of executor, 50 ms of CPU, 20 ms waiting, all 2xx at NoDiversity.
    const r1 = { ...reading([0, 0, 10, 0, 0, 0], 50e6), waitNs: 20e6 };
    let t = addLoop(undefined, r0, r1, 100, { NoDiversity: 100 }, 'NoDiversity');
    // Round 2, other readings in between: 300 responses, 30 ms of executor, 150 ms of CPU, 100 ms
    // waiting; 270 of them at the level.
    const r2 = { ...reading([5, 0, 40, 0, 0, 0], 80e6), waitNs: 40e6 };
    const r3 = { ...reading([5, 0, 70, 0, 0, 0], 230e6), waitNs: 140e6 };
    t = addLoop(t, r2, r3, 300, { NoDiversity: 270, CoarseAggregates: 30 }, 'NoDiversity');
    const row = cellRow('for_you', 'NoDiversity', t);
    expect(row.responses).toBe(400);
    expect(row.cpuUs).toBe(500); // 200 ms over 400
    expect(row.runShare).toBeCloseTo(200 / 320, 12);
    expect(row.stagesUs.executor).toBeCloseTo(((40 * 1000) / 400) * (200 / 320), 9);
    expect(row.atLevel).toBeCloseTo(370 / 400, 12);
  });

  it('a loop without responses gives zeros, not infinities', () => {
    const r = stageRow('text', 'Full', reading([0, 0, 0, 0, 0, 0], 0), reading([1, 1, 1, 1, 1, 1], 5e6), 0, 0);
    expect(r.cpuUs).toBe(0);
    expect(Object.values(r.stagesUs).every((v) => v === 0)).toBe(true);
  });

  it('renders a row per type and level, and each level as a share of its Full', () => {
    const base = reading([0, 0, 0, 0, 0, 0], 0);
    const rows = [
      stageRow('trending', 'Full', base, reading([0, 0, 50, 0, 0, 0], 100e6), 100, 1),
      stageRow('trending', 'NoDiversity', base, reading([0, 0, 5, 0, 0, 0], 25e6), 100, 1),
    ];
    expect(renderStages(rows)).toContain('| trending | NoDiversity | 100 | 100 % | 100 % | 250 | 200 | 0 | 0 | 50 | 0 | 0 | 0 |');
    expect(renderStageRatios(rows)).toContain('| trending | 1.00 | – | – | 0.25 |');
  });
});

describe('bench:serve --profile (summarizeProfiles)', () => {
  function writeProfile(dir: string, thread: number, names: readonly string[]): void {
    // One node per function; a sample every 1 000 µs from startTime 0, naming a node in turn.
    const nodes = names.map((n, i) => ({ id: i + 1, callFrame: { functionName: n, url: '', lineNumber: 0 } }));
    const samples = names.map((_, i) => i + 1);
    const prof = { nodes, samples, startTime: 0, timeDeltas: names.map(() => 1000) };
    writeFileSync(join(dir, `CPU.20261207.073000.4242.${thread}.001.cpuprofile`), JSON.stringify(prof));
  }

  it("the main thread's busy samples, then the other thread with the most, idle left out and the window kept", () => {
    const dir = mkdtempSync(join(tmpdir(), 'tidal-prof-test-'));
    try {
      writeProfile(dir, 0, ['a', 'a', '(idle)', 'b', '(idle)']);
      writeProfile(dir, 2, ['x', '(idle)', '(idle)', '(idle)', '(idle)']);
      // Thread 3: busiest in the window (1 000 – 4 000 µs); its last sample, after it, is not counted.
      writeProfile(dir, 3, ['y', 'y', 'z', '(idle)', 'w']);
      const [main, other, ...rest] = summarizeProfiles(dir, [[1000, 4000]]);
      expect(rest).toEqual([]);
      expect(main).toEqual({
        thread: 'main',
        samples: 3,
        top: [
          { name: 'a', share: 2 / 3 },
          { name: 'b', share: 1 / 3 },
        ],
      });
      expect(other).toEqual({
        thread: 'thread 3',
        samples: 3,
        top: [
          { name: 'y', share: 2 / 3 },
          { name: 'z', share: 1 / 3 },
        ],
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
