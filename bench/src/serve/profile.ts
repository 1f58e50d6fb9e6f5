/**
 * Self time by function from the `--cpu-prof` profiles Node writes at exit (one per thread): what
 * the serve suite's `--profile` prints, for the main thread and for the busiest other thread (an
 * acceptor, where the reads are answered when the server has acceptor threads).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

export interface ProfileSummary {
  /** The thread: `main`, or `thread N` (its Node thread id). */
  thread: string;
  /** Self time by function (name and file), as a share of the thread's samples in the windows. */
  top: { name: string; share: number }[];
  /** The thread's samples in the windows, idle ones left out. */
  samples: number;
}

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  startTime: number;
  timeDeltas: number[];
}

/** Samples of a thread with nothing to run: not part of its CPU time. */
const IDLE = '(idle)';

function summarizeFile(
  file: string,
  thread: string,
  windowsUs: readonly (readonly [number, number])[],
  top: number,
): ProfileSummary | null {
  const prof = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const counts = new Map<string, number>();
  let at = prof.startTime;
  let total = 0;
  for (let i = 0; i < prof.samples.length; i++) {
    at += prof.timeDeltas[i] ?? 0;
    if (!windowsUs.some(([from, to]) => at >= from && at <= to)) continue;
    const f = byId.get(prof.samples[i]!)?.callFrame;
    if (f === undefined || f.functionName === IDLE) continue;
    total++;
    const where = f.url === '' ? '' : ` (${f.url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*\/packages\//, '')})`;
    const key = `${f.functionName === '' ? '(anonymous)' : f.functionName}${where}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  if (total === 0) return null;
  return {
    thread,
    top: [...counts.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, n]) => ({ name, share: n / total })),
    samples: total,
  };
}

/**
 * Self time by function over the samples taken inside any of `windowsUs` (µs on the monotonic
 * clock, `process.hrtime`'s, which is V8's TimeTicks), the `top` largest first: the main thread's,
 * then the other thread with the most busy samples in the windows.
 */
export function summarizeProfiles(dir: string, windowsUs: readonly (readonly [number, number])[], top = 15): ProfileSummary[] {
  // Node names each thread's profile CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile; thread 0 is main.
  const files = readdirSync(dir)
    .map((f) => ({ f, m: /\.\d+\.(\d+)\.\d+\.cpuprofile$/.exec(f) }))
    .filter((x): x is { f: string; m: RegExpExecArray } => x.m !== null);
  const out: ProfileSummary[] = [];
  const main = files.find((x) => x.m[1] === '0');
  const mainSummary = main === undefined ? null : summarizeFile(join(dir, main.f), 'main', windowsUs, top);
  if (mainSummary !== null) out.push(mainSummary);
  let busiest: ProfileSummary | null = null;
  for (const x of files) {
    if (x.m[1] === '0') continue;
    const s = summarizeFile(join(dir, x.f), `thread ${x.m[1]}`, windowsUs, top);
    if (s !== null && (busiest === null || s.samples > busiest.samples)) busiest = s;
  }
  if (busiest !== null) out.push(busiest);
  return out;
}
