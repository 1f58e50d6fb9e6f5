/**
 * The server's threads' CPU time, from /proc/PID/task/TID: `stat` for the thread's name (`comm`)
 * and `schedstat` for its time on a CPU and waiting for one, in ns (finer than `stat`'s 10 ms ticks,
 * which a 2 s phase would round to a few hundred). The main thread's tid is the pid.
 */
import { readFileSync, readdirSync } from 'node:fs';

/** One thread at one moment. */
export interface ThreadTime {
  readonly tid: number;
  readonly comm: string;
  /** On a CPU, in ns since the thread started. */
  readonly runNs: number;
  /** Runnable but waiting for a CPU, in ns. */
  readonly waitNs: number;
}

/** Every thread of `pid` now; threads that exit while being read are left out. */
export function readThreads(pid: number): ThreadTime[] {
  const out: ThreadTime[] = [];
  for (const name of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${name}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const [run, wait] = readFileSync(`/proc/${pid}/task/${name}/schedstat`, 'utf8').trim().split(' ');
      out.push({ tid: Number(name), comm, runNs: Number(run), waitNs: Number(wait) });
    } catch {
      // The thread exited between the listing and the read.
    }
  }
  return out;
}

/** One thread's CPU over an interval. */
export interface ThreadShare {
  readonly tid: number;
  readonly comm: string;
  readonly main: boolean;
  /** On a CPU, as a share of one core over the interval. */
  readonly share: number;
  /** On a CPU, in µs over the interval. */
  readonly cpuUs: number;
}

/**
 * Each thread's CPU between two readings `seconds` apart, busiest first. A thread started between
 * them counts from zero; one gone by the second reading is left out.
 */
export function threadShares(pid: number, before: readonly ThreadTime[], after: readonly ThreadTime[], seconds: number): ThreadShare[] {
  const start = new Map(before.map((t) => [t.tid, t.runNs]));
  return after
    .map((t) => {
      const ns = t.runNs - (start.get(t.tid) ?? 0);
      return { tid: t.tid, comm: t.comm, main: t.tid === pid, share: seconds > 0 ? ns / 1e9 / seconds : 0, cpuUs: ns / 1000 };
    })
    .sort((a, b) => b.share - a.share || a.tid - b.tid);
}

/** `main 88 %, node/1234 45 %, …`: the busiest `n` threads (those above 0.5 % of a core). */
export function describeThreads(shares: readonly ThreadShare[], n: number): string {
  const busy = shares.filter((t) => t.share >= 0.005).slice(0, n);
  if (busy.length === 0) return '–';
  return busy.map((t) => `${t.main ? 'main' : `${t.comm}/${t.tid}`} ${Math.round(t.share * 100)} %`).join(', ');
}
