/**
 * `bench:serve --stages`: where a request's server CPU goes, by stage, for each read type of the
 * personal mix at each degradation level forced by the request (`level`, docs/api.md). The server
 * runs with `TIDAL_STAGE_TIMES=wall` (tidal-load's stage-times.ts): every thread adds up the time of
 * admission, validation and plan, the executor, hydration (rows, signals and the result built from
 * them), JSON and the write of the answer, and `/stats` reports the sums. For each type and level
 * a closed loop sends only that type at that level; the stages' growth over the loop, divided by
 * its responses, is each stage's µs per request, and the server's CPU time (every thread, from
 * /proc schedstat) less the stages is the rest: HTTP parsing and routing, fastify, the body's JSON
 * parse, the thread hop, and whatever else the process did meanwhile.
 *
 * Wall time, not the thread's CPU time (`TIDAL_STAGE_TIMES=1`): that figure moves in steps (the
 * kernel's tick and its scheduling events), and on loopback most of it landed in the write that
 * wakes the client (a first run billed 100–530 µs per request there). Wall time
 * counts a thread's waits for a CPU as well: each stage is scaled by the share of the loop's busy
 * time the server's threads were running rather than runnable (/proc schedstat), which is right
 * when the waits fall evenly over the stages.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { STAGES, type Stage } from 'tidal-load';
import { fmtInt, markdownTable } from '../harness/index.js';
import { LEVEL_NAMES, PERSONAL_READS, type PersonalMixSpec, type ReadType } from './personal-mix.js';
import { runLoadgen } from './spawn-loadgen.js';
import { statsOf } from './server-child.js';
import { readThreads } from './threads.js';

/** A reading of the server: its stage totals (ms) and its threads' CPU time (ns). */
export interface StageReading {
  readonly stagesMs: Readonly<Record<Stage, number>>;
  readonly cpuNs: number;
  /** Every thread's time runnable and waiting for a CPU, ns (0: not known, no scaling). */
  readonly waitNs?: number;
}

export interface StageRow {
  readonly type: ReadType;
  readonly level: (typeof LEVEL_NAMES)[number];
  /** Responses over the loop, and the share of its 2xx at the level asked for. */
  readonly responses: number;
  readonly atLevel: number;
  /** Server CPU µs per response, every thread. */
  readonly cpuUs: number;
  readonly stagesUs: Readonly<Record<Stage, number>>;
  /** `cpuUs` less the stages: HTTP parse and routing, fastify, the thread hop, the rest. */
  readonly restUs: number;
  /** The share of busy time the threads were running, which the wall-clock stages were scaled by. */
  readonly runShare: number;
}

/** One row from the readings before and after a loop of `responses` responses. */
export function stageRow(
  type: ReadType,
  level: StageRow['level'],
  before: StageReading,
  after: StageReading,
  responses: number,
  atLevel: number,
): StageRow {
  const per = (x: number) => (responses > 0 ? x / responses : 0);
  const run = after.cpuNs - before.cpuNs;
  const wait = (after.waitNs ?? 0) - (before.waitNs ?? 0);
  const runShare = run + wait > 0 ? run / (run + wait) : 1;
  const stagesUs = {} as Record<Stage, number>;
  let sum = 0;
  for (const s of STAGES) {
    stagesUs[s] = per((after.stagesMs[s] - before.stagesMs[s]) * 1000 * runShare);
    sum += stagesUs[s];
  }
  const cpuUs = per(run / 1000);
  return { type, level, responses, atLevel, cpuUs, stagesUs, restUs: cpuUs - sum, runShare };
}

async function read(url: string, pid: number): Promise<StageReading> {
  const body = (await statsOf(url)) as { stages?: Record<Stage, number> };
  if (body.stages === undefined) throw new Error('the server reports no stages: it must run with TIDAL_STAGE_TIMES=1');
  const threads = readThreads(pid);
  return { stagesMs: body.stages, cpuNs: threads.reduce((a, t) => a + t.runNs, 0), waitNs: threads.reduce((a, t) => a + t.waitNs, 0) };
}

/** One loop of the matrix: a read type at a level, in round `round`. */
export interface StageCell {
  readonly round: number;
  readonly type: ReadType;
  readonly level: StageRow['level'];
}

/**
 * The order the matrix runs in: `rounds` rounds, in each every type once with its levels one after
 * another, the levels rotated by the round and the type. Run level by level, every Full loop came
 * first (for 30 s after the warm-up), and whatever else the machine did then was billed to Full
 * alone; rotated, each level runs first, second, third and last for some type in every round.
 */
export function stageOrder(types: readonly ReadType[], rounds: number): StageCell[] {
  const cells: StageCell[] = [];
  for (let round = 0; round < rounds; round++) {
    types.forEach((type, t) => {
      for (let i = 0; i < LEVEL_NAMES.length; i++) cells.push({ round, type, level: LEVEL_NAMES[(i + t + round) % LEVEL_NAMES.length]! });
    });
  }
  return cells;
}

/** What one cell's loops added up to over the rounds: a reading from zero, and the responses. */
export interface CellTotals {
  stagesMs: Record<Stage, number>;
  cpuNs: number;
  waitNs: number;
  responses: number;
  /** 2xx responses, and those of them at the level asked for. */
  ok: number;
  atLevel: number;
}

function zeroStages(): Record<Stage, number> {
  const z = {} as Record<Stage, number>;
  for (const s of STAGES) z[s] = 0;
  return z;
}

/** Adds one loop (its readings before and after, its responses and their levels) to a cell's totals. */
export function addLoop(
  t: CellTotals | undefined,
  before: StageReading,
  after: StageReading,
  responses: number,
  levels: Readonly<Record<string, number>>,
  level: string,
): CellTotals {
  const out = t ?? { stagesMs: zeroStages(), cpuNs: 0, waitNs: 0, responses: 0, ok: 0, atLevel: 0 };
  for (const s of STAGES) out.stagesMs[s] += after.stagesMs[s] - before.stagesMs[s];
  out.cpuNs += after.cpuNs - before.cpuNs;
  out.waitNs += (after.waitNs ?? 0) - (before.waitNs ?? 0);
  out.responses += responses;
  out.ok += Object.values(levels).reduce((a, n) => a + n, 0);
  out.atLevel += levels[level] ?? 0;
  return out;
}

/** A cell's row from its totals over the rounds. */
export function cellRow(type: ReadType, level: StageRow['level'], t: CellTotals): StageRow {
  return stageRow(type, level, { stagesMs: zeroStages(), cpuNs: 0, waitNs: 0 }, t, t.responses, t.ok > 0 ? t.atLevel / t.ok : 0);
}

/**
 * Runs the matrix (see {@link stageOrder}): every read type of the mix at every level, `seconds`
 * each, a closed loop of `closed`, `rounds` times; a cell's row is its loops' totals (every
 * response, every stage, every thread's CPU) over the rounds.
 */
export async function measureStages(o: {
  url: string;
  pid: number;
  spec: PersonalMixSpec;
  dir: string;
  closed: number;
  seconds: number;
  rounds: number;
  client: string;
  generatorCpus: readonly number[] | null;
}): Promise<StageRow[]> {
  const types = Object.keys(PERSONAL_READS) as ReadType[];
  const totals = new Map<string, CellTotals>();
  let seed = 500;
  for (const { round, type, level } of stageOrder(types, o.rounds)) {
    const file = join(o.dir, `stages-${type}-${level}.json`);
    writeFileSync(file, JSON.stringify({ ...o.spec, only: type, level }));
    const before = await read(o.url, o.pid);
    const { result } = await runLoadgen(
      [
        ...['--url', o.url, '--requests', file, '--closed', String(o.closed)],
        ...['--duration-ms', String(o.seconds * 1000), '--seed', String(seed++), '--client', o.client],
        ...['--count-header', 'x-tidal-degradation-level'],
      ],
      (o.seconds + 60) * 1000,
      o.generatorCpus,
    );
    // The acceptors report their totals within 100 ms of their last response.
    await new Promise((r) => setTimeout(r, 400));
    const after = await read(o.url, o.pid);
    const key = `${type}|${level}`;
    totals.set(key, addLoop(totals.get(key), before, after, result.completed, result.headerCounts ?? {}, level));
    const loop = cellRow(type, level, addLoop(undefined, before, after, result.completed, result.headerCounts ?? {}, level));
    process.stderr.write(
      `  round ${round + 1} ${level.padEnd(17)} ${type.padEnd(15)} ${fmtInt(loop.responses)} responses, ${loop.cpuUs.toFixed(0)} µs CPU each (${(loop.atLevel * 100).toFixed(0)} % at ${level})\n`,
    );
  }
  const rows: StageRow[] = [];
  for (const level of LEVEL_NAMES) {
    for (const type of types) rows.push(cellRow(type, level, totals.get(`${type}|${level}`)!));
  }
  return rows;
}

/** µs per request by stage, one row per type and level. */
export function renderStages(rows: readonly StageRow[]): string {
  const us = (x: number) => x.toFixed(0);
  return markdownTable(
    ['type', 'level', 'responses', 'at level', 'running', 'CPU µs / req', 'HTTP + rest', ...STAGES],
    rows.map((r) => [
      r.type,
      r.level,
      fmtInt(r.responses),
      `${(r.atLevel * 100).toFixed(0)} %`,
      `${(r.runShare * 100).toFixed(0)} %`,
      us(r.cpuUs),
      us(r.restUs),
      ...STAGES.map((s) => us(r.stagesUs[s])),
    ]),
  );
}

/** Each type's CPU per request at each level as a share of its Full's. */
export function renderStageRatios(rows: readonly StageRow[]): string {
  const types = [...new Set(rows.map((r) => r.type))];
  return markdownTable(
    ['type', ...LEVEL_NAMES.map((l) => `${l} ÷ Full`)],
    types.map((t) => {
      const full = rows.find((r) => r.type === t && r.level === 'Full')?.cpuUs ?? 0;
      return [
        t,
        ...LEVEL_NAMES.map((l) => {
          const r = rows.find((x) => x.type === t && x.level === l);
          return r === undefined || full <= 0 ? '–' : `${(r.cpuUs / full).toFixed(2)}`;
        }),
      ];
    }),
  );
}
