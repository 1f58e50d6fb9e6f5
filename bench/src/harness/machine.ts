/** The machine header every suite prints first and writes into its JSON: where and on what the figures were taken. */

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The repository root: the nearest directory above this file holding packages/tidal-core (bench/dist
 * and the probes' build sit at different depths).
 */
export const ROOT = findRoot(path.dirname(fileURLToPath(import.meta.url)));

function findRoot(from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'packages', 'tidal-core', 'package.json'))) return dir;
    if (path.dirname(dir) === dir) return path.resolve(from, '..', '..', '..');
  }
}

export interface MachineInfo {
  cores: number;
  cpuModel: string;
  node: string;
  platform: string;
  totalMemGiB: number;
}

export interface Header extends MachineInfo {
  /** `git rev-parse --short HEAD` of the tree measured, `+dirty` with uncommitted changes; `unknown` outside git. */
  commit: string;
  /** ISO 8601, UTC, when the run started. */
  date: string;
  /** The 1-minute load average when the run started. */
  load: number;
}

export function machine(): MachineInfo {
  const cpus = os.cpus();
  return {
    cores: typeof os.availableParallelism === 'function' ? os.availableParallelism() : cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    node: process.version,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    totalMemGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
  };
}

/**
 * The 1-minute load average. Timings on a machine that is busy with something else are not
 * comparable, so suites record it at the start (and some at the end) of a run.
 */
export function loadAverage(): number {
  return Math.round(os.loadavg()[0]! * 100) / 100;
}

/** The commit of the tree at `root`, `+dirty` when its work tree differs from it. */
export function gitCommit(root = ROOT): string {
  const git = (...args: string[]) => execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  try {
    const commit = git('rev-parse', '--short', 'HEAD');
    return git('status', '--porcelain', '--untracked-files=no') === '' ? commit : `${commit}+dirty`;
  } catch {
    return 'unknown';
  }
}

export function header(): Header {
  return { ...machine(), commit: gitCommit(), date: new Date().toISOString(), load: loadAverage() };
}

export function describeMachine(m: MachineInfo = machine()): string {
  return `${m.cores} cores, ${m.cpuModel}, Node ${m.node}, ${m.totalMemGiB} GiB RAM, ${m.platform}`;
}

/** One line: the machine, the commit, the date and the load average. */
export function describeHeader(h: Header): string {
  return `${describeMachine(h)}; commit ${h.commit}; ${h.date.slice(0, 16).replace('T', ' ')} UTC; load average ${h.load}`;
}
