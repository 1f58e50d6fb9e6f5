/**
 * The servers one bench:serve run compares (`--variants`): each a name, a runtime (the node binary
 * and the tree whose `packages/tidal-serve/dist/cli.js` it runs) and the flags added to
 * `tidal serve --demo …`.
 *
 *     --variants 'on;off;nice0'                                  (the default)
 *     --variants 'on;a1=--acceptors 1;a2=--acceptors 2;n24=node24:--acceptors 2'
 *
 * One item is `[NAME=][RUNTIME:](PRESET | FLAGS)`, items separated by `;`. PRESET: `on` (no flags),
 * `off` (`--no-admission`), `nice0` (`--worker-nice 0`). FLAGS: server flags, split on spaces,
 * passed through as they are (the bench does not know them; the server refuses one it does not).
 * RUNTIME: `default` (`--server-node`, `--server-root`) or `node24` (`node scripts/node24.mjs
 * which` and `root` of this tree). NAME defaults to the runtime and the preset or flags.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidInputError } from 'tidal-core';

export type Runtime = 'default' | 'node24';

export interface VariantSpec {
  /** Short name for the JSON results, the progress lines and the tables. */
  readonly name: string;
  readonly runtime: Runtime;
  /** Added to `tidal serve --demo …`. */
  readonly args: readonly string[];
  /** The table's heading. */
  readonly heading: string;
}

const PRESETS: Readonly<Record<string, { args: string[]; heading: string }>> = Object.freeze({
  on: { args: [], heading: 'Admission chain on (the default)' },
  off: { args: ['--no-admission'], heading: "Admission chain off (`--no-admission`; tidal's own load management stays)" },
  nice0: { args: ['--worker-nice', '0'], heading: "Admission chain on, query workers at the HTTP thread's priority (`--worker-nice 0`)" },
});

export const DEFAULT_VARIANTS = 'on;off;nice0';

/** Parses `--variants`; names are unique. */
export function parseVariants(text: string): VariantSpec[] {
  const items = text
    .split(';')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (items.length === 0) throw new InvalidInputError('--variants', 'one or more servers separated by ;', text);
  const specs = items.map((item) => {
    let rest = item;
    let name: string | null = null;
    const named = /^([A-Za-z0-9_.+-]+)=(.*)$/.exec(rest);
    if (named !== null && !named[1]!.startsWith('-')) {
      name = named[1]!;
      rest = named[2]!.trim();
    }
    let runtime: Runtime = 'default';
    const rt = /^([A-Za-z0-9_-]+):(.*)$/.exec(rest);
    if (rt !== null) {
      if (rt[1] !== 'default' && rt[1] !== 'node24')
        throw new InvalidInputError('--variants', 'a runtime of default or node24 before the colon', item);
      runtime = rt[1];
      rest = rt[2]!.trim();
    }
    const preset = PRESETS[rest === '' ? 'on' : rest];
    if (preset === undefined && !rest.startsWith('--'))
      throw new InvalidInputError('--variants', `a preset (${Object.keys(PRESETS).join(', ')}) or server flags starting with --`, item);
    const args = preset?.args ?? rest.split(/\s+/);
    const label = preset !== undefined ? (rest === '' ? 'on' : rest) : args.join(' ').replace(/^--/, '').replace(/ --/g, ' ');
    const fullName = name ?? (runtime === 'default' ? label : `${runtime} ${label}`);
    const base = preset?.heading ?? `Admission chain on, \`${args.join(' ')}\``;
    return { name: fullName, runtime, args, heading: runtime === 'default' ? base : `${base}, ${runtime}` };
  });
  const seen = new Set<string>();
  for (const s of specs) {
    if (seen.has(s.name)) throw new InvalidInputError('--variants', 'servers with distinct names (NAME=…)', s.name);
    seen.add(s.name);
  }
  return specs;
}

/** Where a variant's server comes from. */
export interface ResolvedRuntime {
  /** The node binary. */
  readonly node: string;
  /** The tree whose packages/tidal-serve/dist/cli.js runs. */
  readonly root: string;
  readonly cli: string;
  /** `node -v` of that binary. */
  readonly nodeVersion: string;
}

/**
 * The binary and tree of a runtime; throws an Error naming what is missing (the script, the
 * binary, the built CLI), so the run can report that variant as failed and go on.
 */
export function resolveRuntime(runtime: Runtime, defaults: { node: string; root: string }, benchRoot: string): ResolvedRuntime {
  let node = defaults.node;
  let root = defaults.root;
  if (runtime === 'node24') {
    const script = join(benchRoot, 'scripts', 'node24.mjs');
    if (!existsSync(script))
      throw new Error(
        `scripts/node24.mjs is missing (looked for ${script}): the node24 runtime is resolved by \`node scripts/node24.mjs which\` and \`root\``,
      );
    const ask = (what: 'which' | 'root'): string => {
      const r = spawnSync(process.execPath, [script, what], { cwd: benchRoot, encoding: 'utf8', timeout: 600_000 });
      const out = (r.stdout ?? '').trim().split('\n').pop()?.trim() ?? '';
      if (r.error !== undefined || r.status !== 0 || out === '') {
        throw new Error(
          `node scripts/node24.mjs ${what} failed (exit ${r.status}): ${(r.stderr ?? '').trim() || r.error?.message || 'no output'}`,
        );
      }
      return out;
    };
    node = ask('which');
    root = ask('root');
  }
  const cli = join(root, 'packages', 'tidal-serve', 'dist', 'cli.js');
  if (!existsSync(cli)) throw new Error(`${cli} is missing: build that tree first (npx tsc -b packages/tidal-serve in ${root})`);
  const v = spawnSync(node, ['-v'], { encoding: 'utf8', timeout: 30_000 });
  if (v.error !== undefined || v.status !== 0) throw new Error(`${node} -v failed: ${v.error?.message ?? v.stderr}`);
  return { node, root, cli, nodeVersion: v.stdout.trim() };
}
