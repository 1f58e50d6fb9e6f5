import { describe, expect, it } from 'vitest';
import { InvalidInputError, querySlots } from 'tidal-core';
import {
  HELP,
  WORKER_NICE_AUTO,
  admissionOptions,
  autoInFlightCap,
  isLoopback,
  parseServeArgs,
  resolveWorkerNice,
} from 'tidal-serve/internal';

function refusal(argv: string[]): InvalidInputError {
  try {
    parseServeArgs(argv);
  } catch (err) {
    if (InvalidInputError.is(err)) return err;
    throw err;
  }
  throw new Error(`accepted ${argv.join(' ')}`);
}

describe('parseServeArgs', () => {
  it('fills in the defaults', () => {
    const c = parseServeArgs(['--path', './data', '--schema', 's.json']);
    expect(c).toMatchObject({
      path: './data',
      schema: 's.json',
      port: 7070,
      host: '127.0.0.1',
      backlog: 4096,
      demo: false,
      workerNice: 'auto',
      inFlightCap: 'auto',
      queueWaitMs: 250,
      adaptive: true,
      admission: true,
      parentCheck: true,
      timeoutMs: 10_000,
      drainMs: 10_000,
      bodyLimitBytes: 1_048_576,
    });
    expect(c.tenantRates).toBeUndefined();
    expect(c.periodQuota).toBeUndefined();
  });

  it('reads every flag, in both --flag value and --flag=value forms', () => {
    const c = parseServeArgs([
      '--demo',
      '--demo-items=500',
      '--port',
      '0',
      '--host',
      '::1',
      '--workers',
      '2',
      '--in-flight-cap',
      '0',
      '--queue-wait-ms=40',
      '--no-adaptive',
      '--tenant-rate',
      'free=10,pro=50:80,acme=2.5',
      '--period-quota',
      '100',
      '--period-ms',
      '1000',
      '--keys',
      'k.json',
      '--timeout-ms',
      '0',
      '--drain-ms',
      '500',
      '--body-limit',
      '2048',
      '--no-admission',
      '--no-parent-check',
      '--backlog',
      '64',
      '--worker-nice',
      '0',
      '--worker-young-generation-mb',
      '48',
    ]);
    expect(c).toMatchObject({
      demo: true,
      demoItems: 500,
      port: 0,
      host: '::1',
      backlog: 64,
      workers: 2,
      workerNice: 0,
      workerYoungGenerationMb: 48,
      inFlightCap: 0,
      queueWaitMs: 40,
      adaptive: false,
      periodQuota: 100,
      periodMs: 1000,
      keys: 'k.json',
      timeoutMs: 0,
      drainMs: 500,
      bodyLimitBytes: 2048,
      admission: false,
      parentCheck: false,
    });
    expect(c.tenantRates).toEqual({
      tiers: { free: { ratePerSecond: 10, burst: 10 }, pro: { ratePerSecond: 50, burst: 80 } },
      overrides: { acme: { ratePerSecond: 2.5, burst: 3 } },
    });
  });

  it.each([
    [['--path', 'd', '--schema', 's', '--port', 'http'], '--port'],
    [['--path', 'd', '--schema', 's', '--port', '70000'], '--port'],
    [['--path', 'd', '--schema', 's', '--backlog', '0'], '--backlog'],
    [['--path', 'd', '--schema', 's', '--backlog', '65536'], '--backlog'],
    [['--path', 'd', '--schema', 's', '--in-flight-cap', '1.5'], '--in-flight-cap'],
    [['--path', 'd', '--schema', 's', '--in-flight-cap', '-1'], '--in-flight-cap'],
    [['--demo', '--queue-wait-ms', '-5'], '--queue-wait-ms'],
    [['--demo', '--queue-wait-ms', '2.5'], '--queue-wait-ms'],
    [['--path', 'd', '--schema', 's', '--workers', '0'], '--workers'],
    [['--path', 'd', '--schema', 's', '--worker-nice', '20'], '--worker-nice'],
    [['--path', 'd', '--schema', 's', '--worker-nice', '-1'], '--worker-nice'],
    [['--path', 'd', '--schema', 's', '--worker-nice', 'low'], '--worker-nice'],
    [['--demo', '--worker-young-generation-mb', '-1'], '--worker-young-generation-mb'],
    [['--demo', '--worker-young-generation-mb', '1025'], '--worker-young-generation-mb'],
    [['--demo', '--worker-young-generation-mb', '8.5'], '--worker-young-generation-mb'],
    [['--path', 'd', '--schema', 's', '--tenant-rate', 'free'], '--tenant-rate'],
    [['--path', 'd', '--schema', 's', '--tenant-rate', 'free=0'], '--tenant-rate free'],
    [['--path', 'd', '--schema', 's', '--period-ms', '10'], '--period-ms'],
    [['--path', 'd', '--schema', 's', '--timeout-ms'], '--timeout-ms'],
    [['--path', 'd', '--schema', 's', '--frobnicate'], 'flag'],
    [['--path', 'd', '--schema', 's', '--frobnicate=1'], 'flag'],
    [['--path', 'd', '--schema', 's', '-x'], 'flag'],
    [['--demo', '--port', '--workers', '2'], '--port'],
    [['--path', 'd', '--schema', 's', 'extra'], 'argument'],
    [['--schema', 's'], '--path'],
    [['--demo', '--path', 'd'], '--path'],
    [['--path', 'd', '--schema', 's', '--demo-items', '5'], '--demo-items'],
    [['--demo', '--no-adaptive=yes'], '--no-adaptive'],
  ])('refuses %j naming %s', (argv, field) => {
    expect(refusal(argv).field).toBe(field);
  });

  it('--schema may be left out with --path (the database then uses the schema it stored)', () => {
    expect(parseServeArgs(['--path', 'd'])).toMatchObject({ path: 'd', schema: undefined });
  });

  it('--help lists every flag', () => {
    for (const flag of [
      '--path',
      '--schema',
      '--port',
      '--host',
      '--backlog',
      '--demo',
      '--demo-items',
      '--workers',
      '--worker-nice',
      '--worker-young-generation-mb',
      '--in-flight-cap',
      '--no-adaptive',
      '--tenant-rate',
      '--period-quota',
      '--period-ms',
      '--keys',
      '--timeout-ms',
      '--drain-ms',
      '--body-limit',
      '--no-admission',
      '--help',
    ]) {
      expect(HELP).toContain(`  ${flag} `);
    }
    expect(parseServeArgs(['--help']).help).toBe(true);
    expect(parseServeArgs(['-h']).help).toBe(true);
  });
});

describe('--worker-nice', () => {
  it('auto lowers the workers below the HTTP thread on 2 cores or more, not on one', () => {
    expect(WORKER_NICE_AUTO).toBeGreaterThan(0);
    expect(resolveWorkerNice('auto', 2)).toBe(WORKER_NICE_AUTO);
    expect(resolveWorkerNice('auto', 16)).toBe(WORKER_NICE_AUTO);
    expect(resolveWorkerNice('auto', 1)).toBe(0);
    expect(resolveWorkerNice(3, 1)).toBe(3);
    expect(parseServeArgs(['--demo', '--worker-nice=7']).workerNice).toBe(7);
  });
});

describe('admission settings from the flags', () => {
  const pool = { workers: 2, admissionLimit: 256, cores: 2 };

  it("auto caps at the database's limit plus write headroom per core", () => {
    expect(autoInFlightCap(pool)).toBe(256 + 64 * 2);
    expect(autoInFlightCap({ workers: 4, admissionLimit: 0, cores: 8 })).toBe(128 + 192 * 4 + 64 * 8);
  });

  it("maps the defaults: adaptive on above the cheapest level's threshold, no tenants without keys, query permits, no period", () => {
    const o = admissionOptions(parseServeArgs(['--demo']), pool, false);
    expect(o.inFlightCap).toBe(384);
    // The adaptive limit never holds the database below the in-flight count of its cheapest level.
    expect(o.adaptive).toMatchObject({ floor: 128 + querySlots(2), targetLatencyMs: 250 });
    expect(admissionOptions(parseServeArgs(['--demo']), { ...pool, noDiversityAt: 40 }, false).adaptive).toMatchObject({
      floor: 40 + querySlots(2),
    });
    // On by default at 250 ms: the queries in flight follow the measured rate × that wait, from a
    // floor 32 a worker above the adaptive one (the database sees fewer queries than the server
    // holds), under the cap.
    expect(o.rateBound).toEqual({ targetWaitMs: 250, floor: 128 + querySlots(2) + 64 });
    expect(admissionOptions(parseServeArgs(['--demo', '--queue-wait-ms', '250']), pool, false).rateBound).toEqual({
      targetWaitMs: 250,
      floor: 128 + querySlots(2) + 64,
    });
    expect(admissionOptions(parseServeArgs(['--demo', '--queue-wait-ms', '80']), pool, false).rateBound).toMatchObject({
      targetWaitMs: 80,
    });
    expect(admissionOptions(parseServeArgs(['--demo', '--queue-wait-ms', '0']), pool, false).rateBound).toBe(false);
    expect(admissionOptions(parseServeArgs(['--demo', '--in-flight-cap', '0', '--no-adaptive']), pool, false).rateBound).toBe(false);
    expect(
      admissionOptions(parseServeArgs(['--demo', '--in-flight-cap', '50', '--queue-wait-ms', '250']), pool, false).rateBound,
    ).toMatchObject({
      floor: 50,
    });
    expect(o.tenants).toBe(false);
    expect(o.permits).toEqual({ retrieve: 192, search: 192 });
    expect(o.period).toBe(false);
  });

  it('turns tenants on with keys or rates, and the period limit on with a quota', () => {
    expect(admissionOptions(parseServeArgs(['--demo']), pool, true).tenants).toMatchObject({ maxTenants: 10_000 });
    const o = admissionOptions(
      parseServeArgs([
        '--demo',
        '--tenant-rate',
        'acme=5',
        '--period-quota',
        '9',
        '--period-ms',
        '1000',
        '--in-flight-cap',
        '50',
        '--no-adaptive',
      ]),
      pool,
      false,
    );
    expect(o.tenants).toMatchObject({ overrides: { acme: { ratePerSecond: 5, burst: 5 } } });
    expect(o.period).toEqual({ quota: 9, periodMs: 1000, align: true, key: 'tenant' });
    expect(o.inFlightCap).toBe(50);
    expect(o.adaptive).toBe(false);
    expect(admissionOptions(parseServeArgs(['--demo', '--tenant-rate', 'off']), pool, true).tenants).toBe(false);
  });

  it('knows loopback addresses', () => {
    expect(['127.0.0.1', '127.1.2.3', '::1', 'localhost'].every(isLoopback)).toBe(true);
    expect(['0.0.0.0', '10.0.0.1', '::', 'example.com'].some(isLoopback)).toBe(false);
  });
});
