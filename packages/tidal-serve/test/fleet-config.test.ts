import { describe, expect, it } from 'vitest';
import { parseServeArgs } from '../src/config.js';

describe('fleet flags', () => {
  it('reads --redis, --embedder, --embedder-max-concurrency and --pg', () => {
    const c = parseServeArgs([
      '--demo',
      '--redis',
      'redis://127.0.0.1:6379',
      '--embedder',
      'http://127.0.0.1:8080',
      '--embedder-max-concurrency',
      '4',
      '--pg',
      'postgres://u@h/db',
    ]);
    expect(c).toMatchObject({
      redis: 'redis://127.0.0.1:6379',
      embedder: 'http://127.0.0.1:8080',
      embedderMaxConcurrency: 4,
      pg: 'postgres://u@h/db',
    });
    expect(parseServeArgs(['--demo', '--redis', 'redis://h:1', '--redis-timeout-ms', '800'])).toMatchObject({ redisTimeoutMs: 800 });
    expect(parseServeArgs(['--demo'])).toMatchObject({
      redis: undefined,
      redisTimeoutMs: 50,
      embedder: undefined,
      embedderMaxConcurrency: undefined,
      pg: undefined,
    });
  });

  it.each([
    [['--redis', 'localhost:6379'], /^--redis must be a redis:\/\/ or rediss:\/\/ URL/],
    [['--redis-timeout-ms', '0'], /^--redis-timeout-ms must be a whole number from 1 to 60000/],
    [['--embedder', 'ftp://x'], /^--embedder must be an http/],
    [['--embedder-max-concurrency', '2'], /^--embedder-max-concurrency must be given only with --embedder/],
    [['--embedder', 'http://x', '--embedder-max-concurrency', '33'], /^--embedder-max-concurrency must be a whole number from 1 to 32/],
    [['--embedder', 'http://x', '--embedder-max-concurrency', '1.5'], /^--embedder-max-concurrency must be a whole number/],
    [['--pg', 'postgres://h/db'], /^--pg must be given only with --embedder/],
    [['--embedder', 'http://x', '--pg', 'postgres://h/db'], /^--pg must be given with --embedder-max-concurrency/],
  ])('%j is refused, naming the flag', (args, message) => {
    expect(() => parseServeArgs(['--demo', ...args])).toThrow(message);
  });
});
