/**
 * CPU pinning for bench:serve, with `taskset` (util-linux): the server and the load generator on
 * disjoint CPUs, so the generator's CPU is not taken from the server and the server's from the
 * generator. Linux only (`/proc`, `sched_setaffinity`).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { InvalidInputError } from 'tidal-core';

/** Which runs bench:serve makes: unpinned, pinned, or both (each with its own C). */
export type PinMode = 'both' | 'on' | 'off';

/** True when `taskset` runs here. */
export function tasksetAvailable(): boolean {
  const r = spawnSync('taskset', ['--version'], { stdio: 'ignore' });
  return r.error === undefined && r.status === 0;
}

/** `0`, `0-3`, `0,2-3` as the CPUs it names, ascending, without repeats. */
export function parseCpuList(flag: string, text: string): number[] {
  const cpus = new Set<number>();
  for (const part of text.split(',')) {
    const m = /^\s*(\d+)(?:-(\d+))?\s*$/.exec(part);
    if (m === null) throw new InvalidInputError(flag, 'a CPU list such as 0, 0-1 or 0,2-3', text);
    const from = Number(m[1]);
    const to = m[2] === undefined ? from : Number(m[2]);
    if (to < from || to > 4095) throw new InvalidInputError(flag, 'a CPU list with ranges low-high', text);
    for (let c = from; c <= to; c++) cpus.add(c);
  }
  return [...cpus].sort((a, b) => a - b);
}

export function formatCpuList(cpus: readonly number[]): string {
  return cpus.join(',');
}

/** The CPUs a process may run on (`Cpus_allowed_list` of /proc/PID/status). */
export function allowedCpus(pid: number | 'self' = 'self'): number[] {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const list = /Cpus_allowed_list:\s*(\S+)/.exec(status)?.[1];
  if (list === undefined) throw new Error(`/proc/${pid}/status has no Cpus_allowed_list`);
  return parseCpuList('Cpus_allowed_list', list);
}

/** The server's and the generator's CPUs: given, or on N allowed CPUs the last for the generator, the rest for the server. */
export function chooseCpus(
  allowed: readonly number[],
  server: number[] | null,
  generator: number[] | null,
): { server: number[]; generator: number[] } {
  if (allowed.length < 2 && (server === null || generator === null)) {
    throw new InvalidInputError(
      '--pin',
      'a machine with 2 CPUs or more this process may use (or --server-cpus and --generator-cpus)',
      allowed.join(','),
    );
  }
  const g = generator ?? [allowed[allowed.length - 1]!];
  const s = server ?? allowed.filter((c) => !g.includes(c));
  for (const [flag, list] of [
    ['--server-cpus', s],
    ['--generator-cpus', g],
  ] as const) {
    if (list.length === 0) throw new InvalidInputError(flag, 'at least one CPU', '');
    const outside = list.filter((c) => !allowed.includes(c));
    if (outside.length > 0) throw new InvalidInputError(flag, `CPUs this process may use (${allowed.join(',')})`, list.join(','));
  }
  const shared = s.filter((c) => g.includes(c));
  if (shared.length > 0) throw new InvalidInputError('--server-cpus/--generator-cpus', 'disjoint CPU lists', shared.join(','));
  return { server: s, generator: g };
}

/** `command args` run on `cpus` (through `taskset -c`, which execs it: the pid stays the command's), or as it is. */
export function pinnedCommand(
  command: string,
  args: readonly string[],
  cpus: readonly number[] | null,
): { command: string; args: string[] } {
  return cpus === null ? { command, args: [...args] } : { command: 'taskset', args: ['-c', formatCpuList(cpus), command, ...args] };
}

/** Moves every thread of `pid` onto `cpus` (`taskset -a -p -c`). */
export function setAffinity(pid: number, cpus: readonly number[]): void {
  const r = spawnSync('taskset', ['-a', '-p', '-c', formatCpuList(cpus), String(pid)], { encoding: 'utf8' });
  if (r.error !== undefined || r.status !== 0)
    throw new Error(`taskset -a -p -c ${formatCpuList(cpus)} ${pid} failed: ${r.stderr?.trim() || r.error?.message}`);
}
