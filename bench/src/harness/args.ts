/**
 * Command-line flags for every suite, through `node:util.parseArgs` in strict mode: an unknown
 * flag, a missing value or a bad one ends the run with exit code 2 and a message naming the flag,
 * before anything is built. `--json FILE` and `--help` are there in every suite.
 */

import { parseArgs, type ParseArgsConfig } from 'node:util';

export type OptionSpec =
  /** A whole number ≥ `min` (default 1); `_` separators allowed: `--items 1_000_000`. */
  | { readonly type: 'int'; readonly default: number; readonly min?: number; readonly description: string }
  /** A finite number ≥ `min` (default 0). */
  | { readonly type: 'number'; readonly default: number; readonly min?: number; readonly description: string }
  | { readonly type: 'string'; readonly default?: string; readonly choices?: readonly string[]; readonly description: string }
  /** A comma-separated list of whole numbers ≥ 1: `--shortlists 4096,2048`. */
  | { readonly type: 'ints'; readonly description: string }
  /** A string flag that may be given more than once: `--variant a=x --variant b=y`. */
  | { readonly type: 'strings'; readonly description: string }
  | { readonly type: 'boolean'; readonly description: string };

type ValueOf<O extends OptionSpec> = O extends { type: 'int' | 'number' }
  ? number
  : O extends { type: 'ints' }
    ? number[]
    : O extends { type: 'strings' }
      ? string[]
      : O extends { type: 'boolean' }
        ? boolean
        : O extends { default: string }
          ? string
          : string | undefined;

export type Options<S extends Record<string, OptionSpec>> = { readonly [K in keyof S]: ValueOf<S[K]> } & {
  /** `--json FILE`: where the suite writes its results as JSON (nothing when absent). */
  readonly json: string | undefined;
  /** The arguments as given, for the command line a report prints. */
  readonly argv: readonly string[];
};

/** A flag the suite does not take, or a value it cannot use; the message names it. */
export class UsageError extends Error {
  readonly code = 'BENCH_USAGE';
}

const COMMON = {
  json: { type: 'string', description: 'write the results as JSON to FILE' },
  help: { type: 'boolean', description: 'print the flags and exit' },
} as const satisfies Record<string, OptionSpec>;

/** Parses `argv` against `spec`; throws {@link UsageError}. */
export function parseOptionsOrThrow<S extends Record<string, OptionSpec>>(
  spec: S,
  argv: readonly string[],
): Options<S> & { help: boolean } {
  const all: Record<string, OptionSpec> = { ...spec, ...COMMON };
  const config: NonNullable<ParseArgsConfig['options']> = {};
  for (const [name, o] of Object.entries(all)) {
    config[name] = { type: o.type === 'boolean' ? 'boolean' : 'string', multiple: o.type === 'strings' };
  }
  let values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  try {
    ({ values } = parseArgs({ args: [...argv], options: config, strict: true, allowPositionals: false }));
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  const out: Record<string, unknown> = { argv: [...argv] };
  for (const [name, o] of Object.entries(all)) {
    const raw = values[name];
    const flag = `--${name}`;
    switch (o.type) {
      case 'boolean':
        out[name] = raw === true;
        break;
      case 'strings':
        out[name] = Array.isArray(raw) ? raw.map(String) : [];
        break;
      case 'int':
      case 'number': {
        if (raw === undefined) {
          out[name] = o.default;
          break;
        }
        const n = Number(String(raw).replace(/_/g, ''));
        const min = o.min ?? (o.type === 'int' ? 1 : 0);
        const whole = o.type === 'int';
        if (String(raw).trim() === '' || !Number.isFinite(n) || (whole && !Number.isInteger(n)) || n < min) {
          throw new UsageError(`${flag} must be ${whole ? 'a whole number' : 'a number'} ≥ ${min}, got ${JSON.stringify(raw)}`);
        }
        out[name] = n;
        break;
      }
      case 'ints': {
        const parts =
          raw === undefined
            ? []
            : String(raw)
                .split(',')
                .filter((p) => p !== '');
        const nums = parts.map((p) => Number(p.replace(/_/g, '')));
        if (nums.some((n) => !Number.isInteger(n) || n < 1)) {
          throw new UsageError(`${flag} must be a comma-separated list of whole numbers ≥ 1, got ${JSON.stringify(raw)}`);
        }
        out[name] = nums;
        break;
      }
      case 'string': {
        const v = raw === undefined ? o.default : String(raw);
        if (v !== undefined && o.choices && !o.choices.includes(v)) {
          throw new UsageError(`${flag} must be one of ${o.choices.join(', ')}, got ${JSON.stringify(v)}`);
        }
        out[name] = v;
        break;
      }
    }
  }
  return out as Options<S> & { help: boolean };
}

/** The flags of `spec` (and the common ones), one a line. */
export function usage(suite: string, spec: Record<string, OptionSpec>): string {
  const lines = Object.entries<OptionSpec>({ ...spec, ...COMMON }).map(([name, o]) => {
    const value = o.type === 'boolean' ? '' : o.type === 'ints' ? ' N,M' : o.type === 'string' || o.type === 'strings' ? ' VALUE' : ' N';
    const dflt = 'default' in o && o.default !== undefined && o.default !== '' ? ` (default ${o.default})` : '';
    const choices = o.type === 'string' && o.choices ? ` (${o.choices.join(' | ')})` : '';
    return `  --${name}${value}`.padEnd(28) + ` ${o.description}${choices}${dflt}`;
  });
  return [`${suite} flags:`, ...lines].join('\n');
}

/**
 * Parses the process's arguments: on `--help` prints the flags and exits 0; on a bad flag prints
 * the message naming it and exits 2.
 */
export function parseOptions<S extends Record<string, OptionSpec>>(
  suite: string,
  spec: S,
  argv: readonly string[] = process.argv.slice(2),
): Options<S> {
  try {
    const o = parseOptionsOrThrow(spec, argv);
    if (o.help) {
      process.stdout.write(`${usage(suite, spec)}\n`);
      process.exit(0);
    }
    return o;
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`${suite}: ${err.message} (--help lists the flags)\n`);
    process.exit(2);
  }
}
