/**
 * tidal's memory after load measured alone: a child process (bench/dist/tidal-memory.js) loads the
 * query suite's corpus into tidal and nothing else, and prints what it measured; this module starts
 * it and formats the reading. See tidal-memory.ts.
 */

import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { MappingBreakdown, ResidentMemory } from './memory.js';
import type { ThreadMemory } from './memory-worker.js';
import { fmtInt } from './stats.js';

/** The prefix of the child's result line on its stdout. */
export const CHILD_MARK = 'TIDAL_MEMORY ';
const here = path.dirname(fileURLToPath(import.meta.url));

/** What one child process measured. */
export interface TidalMemoryReading {
  items: number;
  workers: number;
  /** RSS split at each step, main thread collected first. */
  steps: { step: string; memory: ResidentMemory }[];
  /** After warm(): the main thread's JS memory, then each worker's. */
  main: ThreadMemory;
  workerThreads: ThreadMemory[];
  mappings: MappingBreakdown;
  loadAverage: number;
  /** `stats().memory`'s bytes per component after warm() (absent from a tree without it). */
  components?: Record<string, number>;
}

/**
 * Runs one child process that loads `items` into the tree at `tree` (this one when undefined) and
 * returns what it measured; throws when the child fails.
 */
export function measureTidalAlone(o: {
  items: number;
  users?: number;
  workers?: number;
  tree?: string;
  youngGenerationMb?: number;
}): TidalMemoryReading {
  const args = ['--expose-gc', path.join(here, '..', 'tidal-memory.js'), '--child', '--items', String(o.items)];
  if (o.users !== undefined && o.users > 0) args.push('--users', String(o.users));
  if (o.workers !== undefined) args.push('--workers', String(o.workers));
  if (o.tree !== undefined) args.push('--tree', o.tree);
  if (o.youngGenerationMb !== undefined) args.push('--young-generation', String(o.youngGenerationMb));
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 64 * 2 ** 20, stdio: ['ignore', 'pipe', 'inherit'] });
  const line = r.stdout.split('\n').find((l) => l.startsWith(CHILD_MARK));
  if (r.status !== 0 || line === undefined)
    throw new Error(`the memory child exited with ${r.status ?? r.signal}: ${r.stdout.slice(-2000)}`);
  return JSON.parse(line.slice(CHILD_MARK.length)) as TidalMemoryReading;
}

export const MiB = 2 ** 20;
export const f0 = (x: number): string => (Number.isFinite(x) ? fmtInt(x) : '?');

/** The lines a reading prints: the steps, the threads, the largest mapping groups. */
export function describeReading(r: TidalMemoryReading): string[] {
  const lines: string[] = [];
  for (const s of r.steps) {
    const m = s.memory;
    lines.push(
      `  ${s.step.padEnd(8)} RSS ${f0(m.rssMiB)} MiB: anonymous ${f0(m.anonymousMiB)}, file-backed ${f0(m.fileBackedMiB)} (PSS ${f0(m.fileBackedPssMiB)})`,
    );
  }
  const t = (label: string, x: ThreadMemory): string =>
    `  ${label}: V8 heap ${f0(x.heapCommitted / MiB)} MiB committed (${f0(x.heapUsed / MiB)} live), ArrayBuffers ${f0(x.arrayBuffers / MiB)} MiB, V8 malloc ${f0(x.malloced / MiB)} MiB; spaces ${Object.entries(
      x.spaces,
    )
      .filter(([, b]) => b >= MiB)
      .map(([k, b]) => `${k} ${f0(b / MiB)}`)
      .join(', ')}`;
  lines.push(t('main thread', r.main));
  r.workerThreads.forEach((w, i) => lines.push(t(`worker ${i + 1}`, w)));
  const groups = (g: Record<string, { rssMiB: number; pssMiB: number; anonymousMiB: number; mappings: number }>, anon: boolean) =>
    Object.entries(g)
      .sort((a, b) => b[1].rssMiB - a[1].rssMiB)
      .map(([k, v]) => `${k} ${f0(v.rssMiB)}${anon ? '' : ` (PSS ${f0(v.pssMiB)})`} MiB in ${v.mappings}`)
      .join('; ');
  if (r.components) {
    lines.push(
      `  stats().memory, MiB: ${Object.entries(r.components)
        .map(([k, b]) => `${k} ${(b / MiB).toFixed(1)}`)
        .join(', ')}`,
    );
  }
  lines.push(`  file-backed by file: ${groups(r.mappings.files, false)}`);
  lines.push(`  anonymous by kind: ${groups(r.mappings.anonymous, true)}`);
  lines.push(`  largest anonymous mappings, MiB: ${r.mappings.largestAnonymousMiB.map(f0).join(', ')}`);
  return lines;
}
