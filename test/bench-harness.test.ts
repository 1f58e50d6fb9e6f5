import { describe, expect, it } from 'vitest';
import { parseOptionsOrThrow, UsageError } from '../bench/src/harness/args.js';
import { interleave, spread } from '../bench/src/harness/interleave.js';

const SPEC = {
  items: { type: 'int', default: 100, description: 'items' },
  share: { type: 'number', default: 0.5, description: 'a share' },
  client: { type: 'string', default: 'raw', choices: ['raw', 'undici'], description: 'client' },
  sizes: { type: 'ints', description: 'sizes' },
  variant: { type: 'strings', description: 'variants' },
  quick: { type: 'boolean', description: 'quick' },
} as const;

function usageError(argv: string[]): UsageError {
  try {
    parseOptionsOrThrow(SPEC, argv);
  } catch (err) {
    if (err instanceof UsageError) return err;
    throw err;
  }
  throw new Error(`no UsageError for ${argv.join(' ')}`);
}

describe('bench harness flags', () => {
  it('fills defaults and reads every kind of flag, both --flag value and --flag=value', () => {
    const argv = [
      '--items',
      '2_000',
      '--share=0.25',
      '--client',
      'undici',
      '--sizes',
      '8,16',
      '--variant',
      'a=x',
      '--variant=b=y',
      '--quick',
    ];
    const o = parseOptionsOrThrow(SPEC, argv);
    expect(o).toMatchObject({ items: 2000, share: 0.25, client: 'undici', sizes: [8, 16], variant: ['a=x', 'b=y'], quick: true });
    expect(o.json).toBeUndefined();
    const d = parseOptionsOrThrow(SPEC, []);
    expect(d).toMatchObject({ items: 100, share: 0.5, client: 'raw', sizes: [], variant: [], quick: false });
    expect(parseOptionsOrThrow(SPEC, ['--json', 'out.json']).json).toBe('out.json');
  });

  it('refuses an unknown flag, naming it', () => {
    expect(usageError(['--itmes', '5']).message).toContain("'--itmes'");
  });

  it('refuses a bad value, naming the flag and the value', () => {
    expect(usageError(['--items', 'x']).message).toBe('--items must be a whole number ≥ 1, got "x"');
    expect(usageError(['--items', '0']).message).toContain('--items');
    expect(usageError(['--items', '1.5']).message).toContain('"1.5"');
    expect(usageError(['--share', '-1']).message).toContain('--share');
    expect(usageError(['--client', 'curl']).message).toBe('--client must be one of raw, undici, got "curl"');
    expect(usageError(['--sizes', '8,x']).message).toContain('--sizes');
  });

  it('refuses a flag without its value and a positional argument', () => {
    expect(usageError(['--items']).message).toContain('--items');
    expect(usageError(['stray']).message).toContain('stray');
  });
});

describe('bench harness interleave', () => {
  it('rotates the order every round, warm-up rounds first, and times only the timed rounds', async () => {
    const calls: string[] = [];
    const results = await interleave(
      [
        { name: 'a', run: (r) => void calls.push(`a${r}`) },
        { name: 'b', run: (r) => void calls.push(`b${r}`) },
        { name: 'c', run: (r) => void calls.push(`c${r}`) },
      ],
      { rounds: 2, warmup: 1, gc: false },
    );
    expect(calls).toEqual(['a-1', 'b-1', 'c-1', 'b0', 'c0', 'a0', 'c1', 'a1', 'b1']);
    expect(results.map((r) => [r.name, r.ms.length])).toEqual([
      ['a', 2],
      ['b', 2],
      ['c', 2],
    ]);
    expect(results[0]!.ratio).toEqual({ median: 1, min: 1, max: 1 });
  });

  it('spread: the median of an even count is the mean of the middle two', () => {
    expect(spread([4, 1, 3, 2])).toEqual({ median: 2.5, min: 1, max: 4 });
    expect(spread([3, 1, 2])).toEqual({ median: 2, min: 1, max: 3 });
  });
});
