/** The harness's timing and formatting under their former path, and the flag parser related-cost.ts still uses. */

export * from './harness/stats.js';
export { describeMachine, loadAverage, machine, type MachineInfo } from './harness/machine.js';

/** `--name N` / `--name=N` as a positive integer, or the default. Every other script parses its flags through harness/args.ts. */
export function intFlag(argv: readonly string[], name: string, fallback: number, min = 1): number {
  const flag = `--${name}`;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    let raw: string | undefined;
    if (a === flag) raw = argv[i + 1];
    else if (a.startsWith(`${flag}=`)) raw = a.slice(flag.length + 1);
    else continue;
    const n = Number(raw?.replace(/_/g, ''));
    if (!Number.isInteger(n) || n < min) throw new Error(`${flag} must be a whole number ≥ ${min}, got ${raw}`);
    return n;
  }
  return fallback;
}
