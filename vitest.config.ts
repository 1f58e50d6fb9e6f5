import { configDefaults, defineConfig } from 'vitest/config';

// The tests that start several processes (replicas, `tidal serve`s, redis-server, PostgreSQL) and
// compare what they did with the time that passed. They run as a project of their own, after the
// rest (a higher groupOrder), one file at a time, so they share the cores with neither the
// single-process tests nor each other, and with a time budget of their own.
const FLEET = [
  'packages/tidal-fleet/test/**/*.test.ts',
  'packages/tidal-serve/test/fleet-*.test.ts',
  'packages/tidal-serve/test/replicate-serve.test.ts',
  'test/replication*.test.ts',
];

export default defineConfig({
  test: {
    pool: 'forks',
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['packages/*/test/**/*.test.ts', 'test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...FLEET],
          // A bound against a hang, not a speed check: with two busy loops and other work holding
          // both cores (load average 18), the slowest tests here took 57-60 s.
          testTimeout: 180_000,
          hookTimeout: 120_000,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'fleet',
          include: FLEET,
          testTimeout: 180_000,
          hookTimeout: 120_000,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
