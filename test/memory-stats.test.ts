/**
 * stats().memory and the memory gauges: every component reported, each figure measured from the
 * buffers it names, so it moves when the component grows.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULTS, InvalidInputError, TidalDb, type ItemInput, type MemoryStats } from 'tidal-core';
import { NOW, SCHEMA, TestClock } from './helpers.js';

const open: TidalDb[] = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((db) => db.close()));
});

const COMPONENTS = [
  'process',
  'signals',
  'users',
  'cursors',
  'catalog',
  'text',
  'catalogImage',
  'vectors',
  'threads',
  'nativeHeap',
] as const;

const glibc =
  process.platform === 'linux' &&
  Boolean((process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header?.glibcVersionRuntime);

function items(from: number, n: number): ItemInput[] {
  return Array.from({ length: n }, (_, k) => {
    const i = from + k;
    return {
      id: `item-${i}`,
      text: `word${i % 997} topic${i % 13} entry${i}`,
      embedding: [1, (i % 17) / 17, (i % 5) / 5, 0.5],
      metadata: { category: `c${i % 7}`, creator: `creator-${i % 50}`, duration: i },
      createdAt: NOW - i * 1000,
    };
  });
}

/** Every figure of `m` that is a number, by path: what the test compares before and after. */
function expectWhole(m: MemoryStats, workers: number): void {
  for (const c of COMPONENTS) expect(m[c], c).toBeDefined();
  expect(m.threads.map((t) => t.threadId)[0]).toBe(0);
  expect(m.threads).toHaveLength(workers + 1);
  for (const c of ['catalog', 'text'] as const) expect(m[c].copies).toBe(workers);
  // The int8 item vectors are once per process: no query thread holds a copy of its own.
  expect(m.vectors.copies).toBe(0);
  for (const t of m.threads) expect(t.vectorRows).toBe(0);
  expect(new Set(m.threads.map((t) => t.threadId)).size).toBe(workers + 1);
  for (const t of m.threads) expect(t.heapUsed).toBeGreaterThan(0);
  expect(m.process.rss).toBeGreaterThan(0);
}

describe('stats().memory', () => {
  it('reports every component and every thread, and the catalogue, text, vectors and signals grow with them', async () => {
    const clock = new TestClock();
    const db = await TidalDb.builder().ephemeral().workers(2).clock(clock.read).schema(SCHEMA).open();
    open.push(db);
    await db.upsertItems(items(0, 20));
    await db.warm();
    const before = db.stats().memory;
    expectWhole(before, 2);
    expect(before.catalog.items).toBe(20);

    await db.upsertItems(items(20, 3000));
    // 2 000 (item, kind) pairs: past the signal arena's first 1 024 slots.
    await db.signals(Array.from({ length: 2000 }, (_, i) => ({ item: `item-${i}`, kind: 'view' })));
    await db.warm();
    const after = db.stats().memory;
    expectWhole(after, 2);
    expect(after.catalog.items).toBe(3020);
    expect(after.catalog.bytes).toBeGreaterThan(before.catalog.bytes);
    expect(after.text.bytes).toBeGreaterThan(before.text.bytes);
    expect(after.text.terms).toBeGreaterThan(before.text.terms);
    expect(after.vectors.bytes).toBeGreaterThan(before.vectors.bytes);
    expect(after.vectors.rows).toBe(3020);
    expect(after.signals.bytes).toBeGreaterThan(before.signals.bytes);
    expect(after.signals.slots).toBeGreaterThanOrEqual(2000);
    // Per thread: the two query threads' figures are what the components sum.
    const workers = after.threads.slice(1);
    expect(workers.reduce((a, t) => a + t.catalogBytes, 0)).toBe(after.catalog.bytes);
    // One copy for the process: 3 020 items × (4 dims + a 4-byte norm + a 4-byte sequence) at
    // least, counted once in the total beside what each thread holds of its own (the popular subset).
    expect(after.vectors.sharedBytes).toBeGreaterThanOrEqual(3020 * 12);
    expect(after.vectors.sharedBytes).toBeGreaterThan(before.vectors.sharedBytes);
    expect(after.vectors.bytes).toBe(after.vectors.sharedBytes + workers.reduce((a, t) => a + t.vectorBytes, 0));
    // Without a worker module the users live on the database's thread: no shared records.
    expect(after.users).toMatchObject({ bytes: 0, records: 0, users: 0, held: 0 });
    await db.upsertUsers([{ id: 'u-1' }, { id: 'u-2' }]);
    await db.deleteUser('u-1');
    expect(db.stats().memory.users).toMatchObject({ bytes: 0, records: 0, users: 1, held: 1 });
  });

  it('with a worker module, users go into shared records whose bytes grow with them', async () => {
    const db = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .schema({ ...SCHEMA, creatorField: 'creator' })
      .workerModule(new URL('./fixtures/idle-module.mjs', import.meta.url), null)
      .open();
    open.push(db);
    await db.upsertItems(items(0, 10));
    await db.upsertUsers([{ id: 'u-first' }]);
    const before = db.stats().memory;
    expectWhole(before, 1);
    expect(before.users.records).toBeGreaterThanOrEqual(1);
    await db.upsertUsers(Array.from({ length: 3000 }, (_, i) => ({ id: `user-${i}`, embedding: [1, 0, i / 3000, 0] })));
    const after = db.stats().memory;
    expect(after.users.users).toBe(3001);
    // Every record found room: the database's thread holds no user's state itself.
    expect(after.users.held).toBe(0);
    expect(after.users.records).toBeGreaterThan(before.users.records + 2000);
    expect(after.users.liveBytes).toBeGreaterThan(before.users.liveBytes);
    expect(after.users.usedBytes).toBeGreaterThanOrEqual(after.users.liveBytes);
    expect(after.users.bytes).toBeGreaterThanOrEqual(after.users.usedBytes);
    expect(after.users.bytes).toBeGreaterThan(before.users.bytes);
  });

  it('is exported as gauges per component and per thread', async () => {
    const registry = new Registry();
    const db = await TidalDb.builder().ephemeral().workers(2).schema(SCHEMA).metrics(registry).open();
    open.push(db);
    await db.upsertItems(items(0, 50));
    await db.warm();
    const m = db.stats().memory;
    const text = await registry.metrics();
    for (const c of ['signals', 'users', 'cursors', 'catalog', 'text', 'catalogImage', 'vectors']) {
      expect(text).toMatch(new RegExp(`tidal_memory_bytes\\{component="${c}"\\} \\d+`));
    }
    expect(text).toContain(`tidal_memory_bytes{component="catalog"} ${m.catalog.bytes}`);
    expect(text).toMatch(/tidal_memory_process_bytes\{kind="rss"\} \d+/);
    expect(text).toMatch(/tidal_memory_thread_bytes\{thread="main",kind="heap_used"\} \d+/);
    for (const t of m.threads.slice(1)) {
      expect(text).toContain(`tidal_memory_thread_bytes{thread="${t.threadId}",kind="catalog"} ${t.catalogBytes}`);
    }
    expect(text).toMatch(/tidal_memory_native_released_bytes \d+/);
  });

  // glibc (CI's platforms); elsewhere `available` is false and nothing is trimmed.
  it.runIf(glibc)('gives freed native memory back after every warm round, and counts it', async () => {
    const db = await TidalDb.builder().ephemeral().workers(1).schema(SCHEMA).open();
    open.push(db);
    const opened = db.stats().memory.nativeHeap;
    expect(opened.available).toBe(true);
    await db.upsertItems(items(0, 50));
    await db.warm();
    await db.warm();
    const after = db.stats().memory.nativeHeap;
    expect(after.trims).toBe(opened.trims + 2);
    expect(after.releasedBytes).toBeGreaterThanOrEqual(opened.releasedBytes);
    expect(after.lastMs).toBeGreaterThanOrEqual(0);
  });
});

describe('workerYoungGenerationMb', () => {
  it("caps every query worker's young generation, as each reports, and refuses a value out of range naming it", async () => {
    const db = await TidalDb.builder().ephemeral().workers(2).schema(SCHEMA).workerYoungGenerationMb(6).open();
    open.push(db);
    expect((await db.warm()).map((w) => w.youngGenerationMb)).toEqual([6, 6]);
    const plain = await TidalDb.builder().ephemeral().workers(1).schema(SCHEMA).open();
    open.push(plain);
    expect((await plain.warm())[0]!.youngGenerationMb).toBe(DEFAULTS.workerYoungGenerationMb);
    // 0: V8's own limit, larger than the default cap.
    const own = await TidalDb.builder().ephemeral().workers(1).schema(SCHEMA).workerYoungGenerationMb(0).open();
    open.push(own);
    expect((await own.warm())[0]!.youngGenerationMb).toBeGreaterThan(DEFAULTS.workerYoungGenerationMb);
    for (const bad of [-1, 1.5, 2048]) {
      const err = await TidalDb.builder()
        .ephemeral()
        .schema(SCHEMA)
        .workerYoungGenerationMb(bad)
        .open()
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidInputError);
      expect(err).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'workerYoungGenerationMb', value: bad });
    }
  });
});

describe('mmapThresholdKb', () => {
  // In a process of its own: the threshold is process-wide and, once fixed, never glibc's own again.
  it.runIf(glibc)('fixes the mmap threshold for the process: freeing a large block no longer raises it, as glibc does by itself', () => {
    const r = spawnSync(process.execPath, [fileURLToPath(new URL('./fixtures/mmap-threshold.mjs', import.meta.url))], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(r.status, r.stderr).toBe(0);
    // 2 MiB blocks after a 16 MiB one was freed: glibc's own threshold rose past them; the default
    // (1 MiB) maps each; 4 096 KiB, set by the last database opened, does not.
    expect(JSON.parse(r.stdout)).toEqual({ own: 0, fixed: 8, widened: 0, stats: [4096, 4096] });
    expect(DEFAULTS.mmapThresholdKb).toBe(1024);
  });

  it('refuses a value out of range, naming it', async () => {
    for (const bad of [-1, 0.5, 32_769]) {
      const err = await TidalDb.builder()
        .ephemeral()
        .schema(SCHEMA)
        .mmapThresholdKb(bad)
        .open()
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidInputError);
      expect(err).toMatchObject({ code: 'TIDAL_INVALID_INPUT', field: 'mmapThresholdKb', value: bad });
    }
  });
});
