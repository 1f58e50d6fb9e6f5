/**
 * Property-based fuzzing of every public entry point with malformed input: each case must be
 * refused with a TidalError that is not an InternalError, write nothing, and leave a database that
 * reopens with the same data.
 *
 * Seeded: the run is the same every time. `TIDAL_FUZZ_SEED=<integer>` explores another sequence
 * (a failure prints the seed and the path that replays it); `TIDAL_FUZZ_SCALE=<n>` multiplies the
 * case counts (default 1: 12 600 cases).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { inspect } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InternalError, TidalDb, TidalError, type SessionHandle, type TidalOptions, type TidalWarning } from 'tidal-core';
import { CORPUS, NOW, SCHEMA, TestClock, corpusItems } from './helpers.js';

const SEED = Number(process.env.TIDAL_FUZZ_SEED ?? 20250101);
const SCALE = Number(process.env.TIDAL_FUZZ_SCALE ?? 1);
const runs = (n: number): number => Math.max(1, Math.round(n * SCALE));

const MAX_EVENT_MS = 2 ** 31 * 60_000;
const FLOAT32_MIN_NORMAL = 2 ** -126;
const KINDS = ['view', 'like'];
const PROFILES = ['trending', 'popular', 'new'];
const DECLARED = ['createdAt', 'category', 'creator', 'duration'];
/** Ids whose stored item and signal state every write case checks: the corpus and a few fresh ones. */
const WATCHED = [...CORPUS.map((c) => c.id), 'fresh-a', 'fresh-b', 'fresh-c'];

let cases = 0;
/** The distinct (code, field) pairs the refusals named: a check that the cases reach many checks. */
const refusals = new Set<string>();
const started = performance.now();

// ---- values ------------------------------------------------------------------------------

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;
const protoOf = (v: object): object | null => Object.getPrototypeOf(v) as object | null;

/** Anything at all, including the values JavaScript makes awkward. */
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.anything({
    withBigInt: true,
    withNullPrototype: true,
    withTypedArray: true,
    withSparseArray: true,
    withMap: true,
    withSet: true,
    withDate: true,
    withBoxedValues: true,
  }),
  fc.constantFrom(Number.NaN, Infinity, -Infinity, -0, 1e308, -1e308, 5e-324, 2 ** 53, Symbol('s'), () => 1, [], {}, Object.create(null)),
);

/** A string holding exactly one lone surrogate (the rest is ASCII, so it cannot pair up). */
const loneSurrogate = fc
  .tuple(fc.string({ maxLength: 6 }), fc.integer({ min: 0xd800, max: 0xdfff }), fc.string({ maxLength: 6 }))
  .map(([a, c, b]) => a + String.fromCharCode(c) + b);

const goodId = fc.constantFrom(...WATCHED);
const badId = fc.oneof(
  anyValue.filter((v) => typeof v !== 'string'),
  fc.constant(''),
  fc.integer({ min: 513, max: 600 }).map((n) => 'i'.repeat(n)),
  loneSurrogate,
);

const badWeight = fc
  .oneof(anyValue, fc.double(), fc.double({ min: 1.0000001e12, max: 1e308 }), fc.double({ min: -1e308, max: -1.0000001e12 }))
  .filter((v) => v !== undefined && !(typeof v === 'number' && v >= -1e12 && v <= 1e12));
const badTime = fc
  .oneof(anyValue, fc.double(), fc.double({ min: MAX_EVENT_MS, max: 1e300 }), fc.double({ min: -1e300, max: -Number.MIN_VALUE }))
  .filter((v) => v !== undefined && !(typeof v === 'number' && v >= 0 && v < MAX_EVENT_MS));

/** A component Float32 cannot hold: not a finite number, beyond its range, or a non-zero below its normals. */
const badComponent = fc.oneof(
  anyValue.filter((v) => typeof v !== 'number'),
  fc.constantFrom(Number.NaN, Infinity, -Infinity),
  fc.double({ min: 3.41e38, max: 1e308 }),
  fc.double({ min: -1e308, max: -3.41e38 }),
  fc.double({ min: -1e-38, max: 1e-38, noNaN: true }).filter((x) => x !== 0 && Math.abs(Math.fround(x)) < FLOAT32_MIN_NORMAL),
);
const goodVector = fc.array(fc.integer({ min: -9, max: 9 }), { minLength: 4, maxLength: 4 }).filter((v) => v.some((x) => x !== 0));
/** Not a usable 4-dimension vector (null and undefined excluded: some fields take them as "none"). */
const badVector = fc.oneof(
  anyValue.filter((v) => v != null && !Array.isArray(v) && !(v instanceof Float32Array) && !(v instanceof Float64Array)),
  fc.array(fc.integer({ min: 1, max: 9 }), { maxLength: 8 }).filter((v) => v.length !== 4),
  fc.tuple(goodVector, fc.nat(3), badComponent).map(([v, i, x]) => {
    const out: unknown[] = [...v];
    out[i] = x;
    return out;
  }),
  fc.constantFrom([0, 0, 0, 0], [0, -0, 0, 0], new Float32Array(4), new Float64Array([0, 0, Number.NaN, 1])),
);

/** Puts `bad` at a random index of `good`, or makes a hole there. */
function withBadEntry<T>(good: fc.Arbitrary<T>, bad: fc.Arbitrary<unknown>): fc.Arbitrary<unknown[]> {
  return fc.tuple(fc.array(good, { maxLength: 5 }), fc.nat(), fc.option(bad, { nil: undefined, freq: 4 })).map(([list, at, entry]) => {
    const out: unknown[] = [...list];
    const i = at % (out.length + 1);
    if (entry === undefined) {
      out.splice(i, 0, 'hole');
      // eslint-disable-next-line @typescript-eslint/no-array-delete -- a hole on purpose: the sparse entry under test
      delete out[i];
    } else {
      out.splice(i, 0, entry);
    }
    return out;
  });
}

// ---- writes ------------------------------------------------------------------------------

const goodSignal = fc.record(
  {
    item: goodId,
    kind: fc.constantFrom(...KINDS),
    at: fc.integer({ min: NOW - 86_400_000, max: NOW }),
    weight: fc.double({ min: -1e12, max: 1e12, noNaN: true }),
  },
  { requiredKeys: ['item', 'kind'] },
);
const badSignal: fc.Arbitrary<unknown> = fc.oneof(
  fc.tuple(goodSignal, badId).map(([s, item]) => ({ ...s, item })),
  fc
    .tuple(
      goodSignal,
      anyValue.filter((k) => !KINDS.includes(k as string)),
    )
    .map(([s, kind]) => ({ ...s, kind })),
  fc.tuple(goodSignal, badWeight).map(([s, weight]) => ({ ...s, weight })),
  fc.tuple(goodSignal, badTime).map(([s, at]) => ({ ...s, at })),
  anyValue.filter((v) => !(isObject(v) && KINDS.includes(v.kind as string))),
);

const goodItem = fc.record(
  {
    id: goodId,
    text: fc.string({ minLength: 1, maxLength: 20 }),
    metadata: fc.record({ category: fc.constantFrom('jazz', 'rock'), duration: fc.integer({ min: 1, max: 999 }) }),
    createdAt: fc.integer({ min: NOW - 86_400_000, max: NOW }),
    embedding: goodVector,
  },
  { requiredKeys: ['id'] },
);
const badText = fc.oneof(
  anyValue.filter((v) => v != null && typeof v !== 'string'),
  fc.constant(''),
  fc.constant('t'.repeat(100_001)),
  loneSurrogate,
);
const badMetadata = fc.oneof(
  anyValue.filter((v) => v !== undefined && !(isObject(v) && [Object.prototype, null].includes(protoOf(v)))),
  anyValue.filter((v) => v != null && typeof v !== 'string').map((category) => ({ category })),
  anyValue.filter((v) => v != null && !(typeof v === 'number' && Number.isFinite(v))).map((duration) => ({ duration })),
  loneSurrogate.map((s) => ({ note: s })),
  loneSurrogate.map((s) => ({ tags: ['ok', { deep: [s] }] })),
  loneSurrogate.map((s) => ({ [s]: 1 })),
  fc.constant(Object.create({ category: 'jazz' }) as unknown),
  fc.constant({ blob: 'm'.repeat(70_000) }),
);
const badItem: fc.Arbitrary<unknown> = fc.oneof(
  fc.tuple(goodItem, badId).map(([it, id]) => ({ ...it, id })),
  fc.tuple(goodItem, badText).map(([it, text]) => ({ ...it, text })),
  fc.tuple(goodItem, badMetadata).map(([it, metadata]) => ({ ...it, metadata })),
  fc.tuple(goodItem, badTime).map(([it, createdAt]) => ({ ...it, createdAt })),
  fc.tuple(goodItem, badVector).map(([it, embedding]) => ({ ...it, embedding })),
  anyValue.filter((v) => !isObject(v)),
);

// ---- queries -----------------------------------------------------------------------------

/** A filter no schema field accepts: not an object, an unknown field, or a condition of the wrong type. */
const badFilter = fc.oneof(
  anyValue.filter((v) => v != null && !(isObject(v) && [Object.prototype, null].includes(protoOf(v)))),
  fc
    .tuple(fc.oneof(fc.string(), fc.constantFrom('constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf', 'id')), anyValue)
    .filter(([k]) => !DECLARED.includes(k))
    // Through JSON, as a decoded request would be: even `__proto__` becomes an own key.
    .map(([k, v]) =>
      Object.assign(JSON.parse(`{${JSON.stringify(k)}: 0}`) as Record<string, unknown>, Object.hasOwn({}, k) ? {} : { [k]: v }),
    ),
  fc
    .oneof(
      anyValue.filter((v) => typeof v !== 'string' && !(isObject(v) && !Array.isArray(v))),
      loneSurrogate,
      fc.constantFrom({ in: [] }, { in: 'jazz' }, { in: [5] }, { in: ['jazz'], gt: 1 }, { gt: 'a' }, { eq: 'jazz' }, new Map()),
    )
    .map((category) => ({ category })),
  fc
    .oneof(
      anyValue.filter((v) => !(typeof v === 'number' && Number.isFinite(v)) && !(isObject(v) && !Array.isArray(v))),
      fc.constantFrom({}, { since: 5 }, { gte: Number.NaN }, { gte: 'x' }, { in: ['x'] }, { in: [Infinity] }, { lt: 1, in: [1] }),
    )
    .map((duration) => ({ duration })),
);
const badDiversity = fc.oneof(
  anyValue.filter((v) => v != null && !(isObject(v) && [Object.prototype, null].includes(protoOf(v)))),
  fc.constantFrom(
    {},
    { maxPer: {} },
    { maxPer: 2 },
    { maxPer: { category: 1 }, extra: 1 },
    { maxPer: JSON.parse('{"__proto__": 1}') as unknown },
  ),
  fc
    .oneof(fc.string(), fc.constantFrom('constructor', 'toString', 'createdAt'))
    .filter((k) => !DECLARED.slice(1).includes(k))
    .map((k) => ({ maxPer: { [k]: 1 } })),
  anyValue.filter((n) => !(typeof n === 'number' && Number.isInteger(n) && n >= 1)).map((n) => ({ maxPer: { category: n } })),
);
const badLimit = anyValue.filter((v) => v !== undefined && !(typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 1000));

function badRetrieve(session: () => SessionHandle): fc.Arbitrary<unknown> {
  const base = fc.record({ profile: fc.constantFrom(...PROFILES) });
  return fc.oneof(
    anyValue.filter((v) => !(isObject(v) && PROFILES.includes(v.profile as string))),
    anyValue.filter((p) => !PROFILES.includes(p as string)).map((profile) => ({ profile })),
    fc.tuple(base, badLimit).map(([r, limit]) => ({ ...r, limit })),
    fc
      .tuple(
        base,
        anyValue.filter((w) => w !== undefined && !['1h', '24h', '7d'].includes(w as string)),
      )
      .map(([r, window]) => ({ ...r, window })),
    fc.tuple(base, fc.oneof(badVector, fc.constant(null))).map(([r, context]) => ({ ...r, context })),
    fc.tuple(base, badFilter).map(([r, filter]) => ({ ...r, filter })),
    fc.tuple(base, badDiversity).map(([r, diversity]) => ({ ...r, diversity })),
    fc
      .tuple(
        base,
        fc.oneof(
          anyValue.filter((v) => v !== undefined),
          fc.constant('other-agent').map((agentId) => ({ id: session().id, agentId })),
        ),
      )
      .map(([r, s]) => ({ ...r, session: s })),
    fc.tuple(base, badTimeout).map(([r, timeoutMs]) => ({ ...r, timeoutMs })),
    fc.tuple(base, badAbortSignal).map(([r, signal]) => ({ ...r, signal })),
  );
}

/** A `timeoutMs` no query accepts: not a whole number of milliseconds from 1 to 2^31 − 1. */
const badTimeout: fc.Arbitrary<unknown> = fc
  .oneof(anyValue, fc.integer({ min: -10, max: 0 }), fc.double(), fc.constant(2 ** 31))
  .filter((v) => v !== undefined && !(typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 2 ** 31 - 1));
/** A query `signal` that is not an AbortSignal. */
const badAbortSignal: fc.Arbitrary<unknown> = fc.oneof(
  anyValue.filter((v) => v !== undefined),
  fc.constant({ aborted: false }),
);

const badSearch: fc.Arbitrary<unknown> = fc.oneof(
  anyValue.filter((v) => !isObject(v)),
  fc.constantFrom({}, { limit: 5 }, { text: undefined, vector: undefined }, { text: null }),
  badText.map((text) => ({ text })),
  fc.oneof(badVector, fc.constant(null)).map((vector) => ({ text: 'jazz', vector })),
  anyValue
    .filter((b) => b !== undefined && !(typeof b === 'number' && Number.isFinite(b) && b >= 0))
    .map((boost) => ({ text: 'jazz', boost })),
  badLimit.map((limit) => ({ vector: [1, 0, 0, 0], limit })),
  badFilter.map((filter) => ({ text: 'jazz', filter })),
  badDiversity.map((diversity) => ({ vector: [1, 0, 0, 0], diversity })),
  badTimeout.map((timeoutMs) => ({ text: 'jazz', timeoutMs })),
  badAbortSignal.map((signal) => ({ text: 'jazz', signal })),
);

// ---- options -----------------------------------------------------------------------------

const isInt = (v: unknown, min: number, max: number): boolean => typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;
/** A value for a nested option: anything but undefined (the default) and what `maybeValid` allows. */
const badFor = (maybeValid: (v: unknown) => boolean): fc.Arbitrary<unknown> =>
  fc.oneof(anyValue, fc.integer(), fc.double()).filter((v) => v !== undefined && !maybeValid(v));

const OPTION_KEYS = [
  'path',
  'ephemeral',
  'schema',
  'workers',
  'clock',
  'durability',
  'groupCommit',
  'capacity',
  'checkpointEveryEvents',
  'memoryGuard',
  'onWarning',
  'loadThresholds',
  'admissionLimit',
  'loadManagement',
  'metricsRegistry',
  'rateLimiter',
  'sessions',
];

function badOptions(root: string): fc.Arbitrary<Record<string, unknown>> {
  const nested = (key: string, sub: string, maybeValid: (v: unknown) => boolean) =>
    badFor(maybeValid).map((v) => ({ [key]: { [sub]: v } }));
  const top = (key: string, maybeValid: (v: unknown) => boolean) => badFor(maybeValid).map((v) => ({ [key]: v }));
  const schema = (patch: fc.Arbitrary<Record<string, unknown>>) => patch.map((p) => ({ schema: { ...SCHEMA, ...p } }));
  const kind = (patch: fc.Arbitrary<Record<string, unknown>>) =>
    patch.map((p) => ({ schema: { ...SCHEMA, signals: [{ name: 'view', halfLifeMs: 1000, ...p }] } }));
  const objectOption = (key: string, keys: string[]) =>
    fc.oneof(
      anyValue.filter((v) => v !== undefined && !(isObject(v) && [Object.prototype, null].includes(protoOf(v)))).map((v) => ({ [key]: v })),
      fc
        .tuple(fc.string(), anyValue)
        .filter(([k]) => !keys.includes(k))
        .map(([k, v]) => ({ [key]: { [k]: v } })),
    );
  return fc.oneof(
    fc
      .tuple(fc.string(), anyValue)
      .filter(([k]) => !OPTION_KEYS.includes(k))
      .map(([k, v]) => ({ [k]: v })),
    top('schema', (v) => isObject(v)),
    schema(badFor((v) => Array.isArray(v)).map((signals) => ({ signals }))),
    schema(badFor((v) => isObject(v)).map((metadata) => ({ metadata }))),
    schema(badFor((v) => v === 'string' || v === 'number').map((t) => ({ metadata: { category: t } }))),
    schema(
      fc
        .constantFrom('__proto__', 'id', 'createdAt', '1x', '')
        .map((f) => ({ metadata: JSON.parse(`{${JSON.stringify(f)}: "string"}`) as unknown })),
    ),
    schema(badFor((v) => isInt(v, 1, 4096)).map((embeddingDims) => ({ embeddingDims }))),
    schema(
      fc
        .tuple(fc.string(), anyValue)
        .filter(([k]) => !['signals', 'metadata', 'embeddingDims'].includes(k))
        .map(([k, v]) => ({ [k]: v })),
    ),
    kind(badFor((v) => typeof v === 'string' && /^[A-Za-z][A-Za-z0-9_-]{0,63}$/.test(v)).map((name) => ({ name }))),
    kind(badFor((v) => typeof v === 'number' && Number.isFinite(v) && v > 0).map((halfLifeMs) => ({ halfLifeMs }))),
    kind(badFor((v) => Array.isArray(v)).map((windows) => ({ windows }))),
    kind(badFor((v) => typeof v === 'boolean').map((velocity) => ({ velocity }))),
    top('workers', (v) => isInt(v, 1, 64)),
    top('durability', (v) => ['process', 'power', 'none'].includes(v as string)),
    top('checkpointEveryEvents', (v) => isInt(v, 1, 2 ** 40)),
    top('admissionLimit', (v) => v === 'auto' || isInt(v, 0, 2 ** 30)),
    top('loadManagement', (v) => typeof v === 'boolean'),
    top('onWarning', (v) => typeof v === 'function'),
    top('metricsRegistry', (v) => isObject(v) && typeof v.registerMetric === 'function'),
    top('rateLimiter', (v) => isObject(v) && (v.kind === 'limited' || v.kind === 'unlimited')),
    top('clock', (v) => typeof v === 'function'),
    badFor((v) => typeof v === 'number' && v >= 0 && v < MAX_EVENT_MS).map((t) => ({ clock: () => t })),
    fc.constant({
      clock: () => {
        throw new Error('no clock');
      },
    }),
    top('ephemeral', (v) => v === true),
    objectOption('groupCommit', ['maxBatch', 'maxDelayMs', 'maxQueueEvents']),
    nested('groupCommit', 'maxBatch', (v) => isInt(v, 1, 100_000)),
    nested('groupCommit', 'maxDelayMs', (v) => isInt(v, 0, 10_000)),
    nested('groupCommit', 'maxQueueEvents', (v) => isInt(v, 1, 1_000_000)),
    objectOption('capacity', ['items', 'signalSlots']),
    nested('capacity', 'items', (v) => isInt(v, 1, 2 ** 28)),
    nested('capacity', 'signalSlots', (v) => isInt(v, 1, 2 ** 24)),
    objectOption('memoryGuard', ['floorBytes', 'meminfoPath']),
    nested('memoryGuard', 'floorBytes', (v) => v === 'auto' || (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0)),
    nested('memoryGuard', 'meminfoPath', (v) => typeof v === 'string'),
    objectOption('loadThresholds', ['reducedCandidates', 'coarseAggregates', 'noDiversity']),
    nested('loadThresholds', 'noDiversity', (v) => isInt(v, 1, 2 ** 30)),
    objectOption('sessions', ['defaultTtlMs', 'sweepIntervalMs', 'maxOpen', 'onExpired']),
    nested('sessions', 'defaultTtlMs', (v) => isInt(v, 1, 365 * 86_400_000)),
    nested('sessions', 'maxOpen', (v) => isInt(v, 1, 2 ** 24)),
    nested('sessions', 'onExpired', (v) => typeof v === 'function'),
    // `path` instead of `ephemeral`: bad types, empty, NUL, a lone surrogate, a file, under a file.
    fc
      .oneof(
        anyValue.filter((v) => v !== undefined && typeof v !== 'string'),
        fc.constantFrom('', join(root, 'a\u0000b'), join(root, 'file'), join(root, 'file', 'db')),
        loneSurrogate.map((s) => join(root, s)),
      )
      .map((path) => ({ path, ephemeral: undefined })),
  );
}

// ---- the checks --------------------------------------------------------------------------

/** Runs `call`, which must be refused with a TidalError other than InternalError. */
async function expectRefused(what: string, call: () => unknown): Promise<void> {
  cases++;
  let result: unknown;
  try {
    result = await call();
  } catch (err) {
    if (TidalError.is(err) && !(err instanceof InternalError)) {
      const field = 'field' in err && typeof err.field === 'string' ? err.field : '';
      refusals.add(`${err.code} ${field.replace(/\[\d+\]/g, '[]')}`);
      return;
    }
    throw new Error(`${what}: expected a TidalError other than InternalError, got ${inspect(err, { depth: 2 })}`, { cause: err });
  }
  if (result instanceof TidalDb) await result.close();
  throw new Error(`${what}: expected a refusal, but it succeeded`);
}

/** What a refused call must not change: committed events, the queue, stored items, signal state, sessions. */
async function state(db: TidalDb): Promise<string> {
  const { committedEvents, depth } = db.stats().writes;
  const items = await Promise.all(WATCHED.map((id) => db.get(id)));
  return inspect(
    { committedEvents, depth, items, signals: WATCHED.map((id) => db.itemSignals(id)), sessions: db.openSessions() },
    { depth: 6 },
  );
}

function report(name: string, n: number, t0: number): void {
  console.log(
    `fuzz ${name}: ${n} cases in ${Math.round(performance.now() - t0)} ms, ${refusals.size} distinct refusals so far (seed ${SEED})`,
  );
}

describe('fuzz: malformed input is refused, writes nothing, and the database reopens unchanged', () => {
  const root = mkdtempSync(join(tmpdir(), 'tidal-fuzz-'));
  const dir = join(root, 'db');
  const clock = new TestClock();
  const warnings: TidalWarning[] = [];
  const open = (): Promise<TidalDb> =>
    TidalDb.builder()
      .path(dir)
      .workers(1)
      .clock(clock.read)
      .schema(SCHEMA)
      .onWarning((w) => warnings.push(w))
      .open();
  let db: TidalDb;
  let session: SessionHandle;
  writeFileSync(join(root, 'file'), 'not a directory');

  beforeAll(async () => {
    db = await open();
    await db.upsertItems(corpusItems());
    await db.signals(
      CORPUS.flatMap((c, i) => Array.from({ length: i + 1 }, () => ({ item: c.id, kind: KINDS[i % 2]!, at: NOW - i * 60_000 }))),
    );
    session = db.openSession({ agent: 'fuzz-agent' });
    await db.sessionSignal(session, { item: 'j1', kind: 'view', at: NOW });
  });

  afterAll(async () => {
    await db?.close();
    rmSync(root, { recursive: true, force: true });
    console.log(`fuzz total: ${cases} cases in ${Math.round(performance.now() - started)} ms (seed ${SEED}, scale ${SCALE})`);
  });

  const params = (numRuns: number): fc.Parameters<unknown> => ({ seed: SEED, numRuns: runs(numRuns) });

  it('open and the builder refuse bad options', async () => {
    const t0 = performance.now();
    const n0 = cases;
    const base: TidalOptions = { ephemeral: true, workers: 1, schema: SCHEMA, clock: clock.read };
    await fc.assert(
      fc.asyncProperty(badOptions(root), fc.boolean(), async (patch, viaBuilder) => {
        const options = { ...base, ...patch } as Record<string, unknown>;
        for (const k of Object.keys(options)) if (options[k] === undefined && !Object.hasOwn(patch, k)) delete options[k];
        if (Object.hasOwn(patch, 'path')) delete options.ephemeral;
        await expectRefused(`open(${inspect(patch)})`, () => TidalDb.open(options));
        if (viaBuilder && isObject(patch.sessions)) {
          await expectRefused(`builder.sessions(${inspect(patch.sessions)})`, () =>
            TidalDb.builder()
              .ephemeral()
              .workers(1)
              .schema(SCHEMA)
              .sessions(patch.sessions as never)
              .sweepIntervalMs(1000)
              .open(),
          );
        }
      }),
      params(3000),
    );
    report('open', cases - n0, t0);
  });

  it('signal, signals, sessionSignal, upsert, upsertItems and delete refuse bad input and write nothing', async () => {
    const t0 = performance.now();
    const n0 = cases;
    const write = fc.oneof(
      badSignal.map((s) => ['signal', s] as const),
      fc
        .oneof(
          withBadEntry(goodSignal, badSignal),
          anyValue.filter((v) => !Array.isArray(v)),
        )
        .map((b) => ['signals', b] as const),
      badSignal.map((s) => ['sessionSignal', s] as const),
      fc
        .tuple(
          fc.oneof(
            anyValue,
            fc.constant('other-agent').map((agentId) => ({ id: 'not-a-session', agentId })),
          ),
          goodSignal,
        )
        .map(([h, s]) => ['sessionSignalHandle', [h, s]] as const),
      badItem.map((it) => ['upsert', it] as const),
      fc
        .oneof(
          withBadEntry(goodItem, badItem),
          anyValue.filter((v) => !Array.isArray(v)),
        )
        .map((b) => ['upsertItems', b] as const),
      badId.map((id) => ['delete', id] as const),
    );
    await fc.assert(
      fc.asyncProperty(write, async ([op, arg]) => {
        const before = await state(db);
        await expectRefused(`${op}(${inspect(arg)})`, () => {
          switch (op) {
            case 'signal':
              return db.signal(arg as never);
            case 'signals':
              return db.signals(arg as never);
            case 'sessionSignal':
              return db.sessionSignal(session, arg as never);
            case 'sessionSignalHandle':
              return db.sessionSignal(...(arg as [never, never]));
            case 'upsert':
              return db.upsert(arg as never);
            case 'upsertItems':
              return db.upsertItems(arg as never);
            case 'delete':
              return db.delete(arg as never);
          }
        });
        expect(db.stats().writes.depth).toBe(0);
        await db.flush();
        expect(await state(db)).toBe(before);
      }),
      params(4200),
    );
    report('writes', cases - n0, t0);
  });

  it('get, itemSignals, retrieve and search refuse bad input', async () => {
    const t0 = performance.now();
    const n0 = cases;
    const read = fc.oneof(
      badId.map((id) => ['get', id] as const),
      badId.map((id) => ['itemSignals', id] as const),
      badRetrieve(() => session).map((r) => ['retrieve', r] as const),
      badSearch.map((r) => ['search', r] as const),
    );
    const before = await state(db);
    await fc.assert(
      fc.asyncProperty(read, async ([op, arg]) => {
        await expectRefused(`${op}(${inspect(arg)})`, () => {
          switch (op) {
            case 'get':
              return db.get(arg as never);
            case 'itemSignals':
              return db.itemSignals(arg as never);
            case 'retrieve':
              return db.retrieve(arg as never);
            case 'search':
              return db.search(arg as never);
          }
        });
      }),
      params(4200),
    );
    expect(await state(db)).toBe(before);
    report('reads', cases - n0, t0);
  });

  it('openSession and closeSession refuse bad input and open or close nothing', async () => {
    const t0 = performance.now();
    const n0 = cases;
    const badTtl = anyValue.filter((v) => v !== undefined && !isInt(v, 1, 365 * 86_400_000));
    const op = fc.oneof(
      anyValue.filter((v) => !(isObject(v) && typeof v.agent === 'string')).map((o) => ['openSession', o] as const),
      badId.filter((a) => a !== undefined).map((agent) => ['openSession', { agent }] as const),
      badTtl.map((ttlMs) => ['openSession', { agent: 'fuzz-agent', ttlMs }] as const),
      fc
        .oneof(
          anyValue,
          fc.constant('other-agent').map((agentId) => ({ id: session.id, agentId })),
          fc.uuid().map((id) => ({ id, agentId: 'fuzz-agent' })),
        )
        .map((h) => ['closeSession', h] as const),
    );
    await fc.assert(
      fc.asyncProperty(op, async ([name, arg]) => {
        const before = await state(db);
        await expectRefused(`${name}(${inspect(arg)})`, () =>
          name === 'openSession' ? db.openSession(arg as never) : db.closeSession(arg as never),
        );
        expect(await state(db)).toBe(before);
      }),
      params(1200),
    );
    report('sessions', cases - n0, t0);
  });

  it('reopens with the same data and no warning', async () => {
    const t0 = performance.now();
    const items = await Promise.all(WATCHED.map((id) => db.get(id)));
    const signals = WATCHED.map((id) => db.itemSignals(id));
    const lastSeq = await db.signal({ item: 'after-fuzz', kind: 'like', at: NOW });
    await db.close();
    db = await open();
    expect(warnings).toEqual([]);
    expect(await Promise.all(WATCHED.map((id) => db.get(id)))).toEqual(items);
    expect(WATCHED.map((id) => db.itemSignals(id))).toEqual(signals);
    expect(db.itemSignals('after-fuzz').like!.count).toBe(1);
    // Numbering continues right after the last acknowledged event: nothing refused took a number.
    expect(await db.signal({ item: 'after-fuzz', kind: 'view', at: NOW })).toBe(lastSeq + 1);
    report('reopen', 1, t0);
    expect(cases).toBeGreaterThanOrEqual(10_000 * Math.min(1, SCALE));
  });
});
