/**
 * The main thread's self time by function, from the `--cpu-prof` profiles Node writes at exit:
 * what the serve suite's `--profile` prints.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

export interface ProfileSummary {
  /** Self time by function (name and file), as a share of the main thread's samples in the windows. */
  top: { name: string; share: number }[];
  samples: number;
}

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  startTime: number;
  timeDeltas: number[];
}

/**
 * The main thread's self time by function over the samples taken inside any of `windowsUs` (µs on
 * the monotonic clock, `process.hrtime`'s, which is V8's TimeTicks), the `top` largest first.
 */
export function summarizeProfile(dir: string, windowsUs: readonly (readonly [number, number])[], top = 15): ProfileSummary | null {
  // Node names each thread's profile CPU.<date>.<pid>.<thread>.<seq>.cpuprofile; thread 0 is main.
  const file = readdirSync(dir).find((f) => /\.\d+\.0\.\d+\.cpuprofile$/.test(f));
  if (file === undefined) return null;
  const prof = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const counts = new Map<string, number>();
  let at = prof.startTime;
  let total = 0;
  for (let i = 0; i < prof.samples.length; i++) {
    at += prof.timeDeltas[i] ?? 0;
    if (!windowsUs.some(([from, to]) => at >= from && at <= to)) continue;
    total++;
    const f = byId.get(prof.samples[i]!)?.callFrame;
    if (f === undefined) continue;
    const where = f.url === '' ? '' : ` (${f.url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*\/packages\//, '')})`;
    const key = `${f.functionName === '' ? '(anonymous)' : f.functionName}${where}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  if (total === 0) return null;
  return {
    top: [...counts.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, n]) => ({ name, share: n / total })),
    samples: total,
  };
}
