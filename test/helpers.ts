/**
 * Shared fixtures for the end-to-end tests: a fixed clock, the schema most tests use, a small
 * deterministic corpus and helpers to open a database around them.
 *
 * The tests import the built packages (`tidal-core` resolves to `packages/tidal-core/dist`) because
 * the query workers load the compiled worker file; run `npx tsc -b` after changing `src`.
 */
import { expect } from 'vitest';
import { InvalidInputError, TidalDb, type ItemInput, type SchemaDefinition, type SignalInput } from 'tidal-core';

export const MINUTE = 60_000;
export const HOUR = 3_600_000;
export const DAY = 86_400_000;

/** "Now" for every test: 2025-01-01T00:00:00Z, aligned to the minute and the hour. */
export const NOW = Date.UTC(2025, 0, 1);

/** `view`: half-life one hour, with velocity. `like`: half-life one day, 24h and all-time counts. */
export const SCHEMA: SchemaDefinition = {
  signals: [
    { name: 'view', halfLifeMs: HOUR, velocity: true },
    { name: 'like', halfLifeMs: DAY, windows: ['24h', 'all'] },
  ],
  metadata: { category: 'string', creator: 'string', duration: 'number' },
  embeddingDims: 4,
};

/** A settable clock injected into the database; nothing in the tests reads the wall clock. */
export class TestClock {
  now: number;

  constructor(start = NOW) {
    this.now = start;
  }

  set(t: number): void {
    this.now = t;
  }

  advance(ms: number): void {
    this.now += ms;
  }

  readonly read = (): number => this.now;
}

export interface OpenOptions {
  schema?: SchemaDefinition;
  start?: number;
  workers?: number;
}

export interface OpenedDb {
  db: TidalDb;
  clock: TestClock;
}

/** An ephemeral database on the injected clock (2 query workers unless told otherwise). */
export async function openDb(options: OpenOptions = {}): Promise<OpenedDb> {
  const clock = new TestClock(options.start ?? NOW);
  const db = await TidalDb.builder()
    .ephemeral()
    .workers(options.workers ?? 2)
    .clock(clock.read)
    .schema(options.schema ?? SCHEMA)
    .open();
  return { db, clock };
}

export interface CorpusItem {
  id: string;
  text: string;
  embedding: number[];
  metadata: { category: string; creator: string; duration: number };
  createdAt: number;
}

/**
 * Ten items in four categories. Every text has a different number of words, so two texts that
 * match a query on the same words never get the same BM25 score; every embedding points in a
 * different direction.
 *
 * Word document frequencies: guitar 4 (j3, r1, r2, p2), jazz 3, piano 3 (j1, r3, c2), rock 3,
 * pop 2, concerto 2, saxophone 1 (j2), trio 1 (j1).
 */
export const CORPUS: readonly CorpusItem[] = Object.freeze([
  {
    id: 'j1',
    text: 'smooth jazz piano trio for quiet evenings', // 7 words
    embedding: [1, 0.1, 0, 0],
    metadata: { category: 'jazz', creator: 'alice', duration: 180 },
    createdAt: NOW - 5 * DAY,
  },
  {
    id: 'j2',
    text: 'late night jazz saxophone solo', // 5
    embedding: [0.9, 0.3, 0.1, 0],
    metadata: { category: 'jazz', creator: 'bob', duration: 240 },
    createdAt: NOW - 1 * HOUR,
  },
  {
    id: 'j3',
    text: 'jazz guitar standards live', // 4
    embedding: [0.8, 0, 0.4, 0.1],
    metadata: { category: 'jazz', creator: 'alice', duration: 300 },
    createdAt: NOW - 3 * DAY,
  },
  {
    id: 'r1',
    text: 'loud rock guitar anthem from stadiums', // 6
    embedding: [0, 1, 0.1, 0],
    metadata: { category: 'rock', creator: 'carol', duration: 200 },
    createdAt: NOW - 2 * HOUR,
  },
  {
    id: 'r2',
    text: 'classic rock guitar riffs played on vintage amplifiers', // 8
    embedding: [0.1, 0.9, 0, 0.3],
    metadata: { category: 'rock', creator: 'dave', duration: 210 },
    createdAt: NOW - 7 * DAY,
  },
  {
    id: 'r3',
    text: 'indie rock piano ballad about rain and old letters', // 9
    embedding: [0.3, 0.8, 0.2, 0],
    metadata: { category: 'rock', creator: 'carol', duration: 260 },
    createdAt: NOW - 30 * MINUTE,
  },
  {
    id: 'p1',
    text: 'summer pop dance hit with bright synths and many handclaps', // 10
    embedding: [0, 0, 1, 0.2],
    metadata: { category: 'pop', creator: 'erin', duration: 150 },
    createdAt: NOW - 12 * HOUR,
  },
  {
    id: 'p2',
    text: 'acoustic pop guitar cover of a famous song from nineties radio', // 11
    embedding: [0.2, 0.1, 0.9, 0],
    metadata: { category: 'pop', creator: 'frank', duration: 190 },
    createdAt: NOW - 2 * DAY,
  },
  {
    id: 'c1',
    text: 'baroque violin concerto recording with period instruments in a small chapel hall', // 12
    embedding: [0, 0.1, 0, 1],
    metadata: { category: 'classical', creator: 'grace', duration: 900 },
    createdAt: NOW - 30 * DAY,
  },
  {
    id: 'c2',
    text: 'romantic piano concerto', // 3
    embedding: [0.1, 0, 0.3, 0.9],
    metadata: { category: 'classical', creator: 'heidi', duration: 1500 },
    createdAt: NOW - 6 * HOUR,
  },
]);

/** The corpus as `upsertItems` input (fresh copies, so no test can alter the fixture). */
export function corpusItems(): ItemInput[] {
  return CORPUS.map((c) => ({ ...c, embedding: [...c.embedding], metadata: { ...c.metadata } }));
}

export function corpusItem(id: string): CorpusItem {
  const found = CORPUS.find((c) => c.id === id);
  if (!found) throw new Error(`no corpus item ${id}`);
  return found;
}

/** Opens a database and loads the corpus into it. */
export async function openCorpusDb(options: OpenOptions = {}): Promise<OpenedDb> {
  const opened = await openDb(options);
  await opened.db.upsertItems(corpusItems());
  return opened;
}

/** `count` events of `kind` on `item`, all at `at`. */
export function events(item: string, kind: string, count: number, at: number, weight?: number): SignalInput[] {
  return Array.from({ length: count }, () => (weight === undefined ? { item, kind, at } : { item, kind, at, weight }));
}

/** Cosine similarity, computed in double precision. */
export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return dot / Math.sqrt(na * nb);
}

/** A seeded PRNG: the same sequence on every run. */
export { mulberry32 } from '../bench/src/random.js';

/** Parses JSON that must be an object (a serialized result, a request body); throws naming what it got otherwise. */
export function parseObject(text: string): Record<string, unknown> {
  const value: unknown = JSON.parse(text);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new TypeError(`not a JSON object: ${text.slice(0, 80)}`);
  return value as Record<string, unknown>;
}

export function idsOf(list: readonly { id: string }[]): string[] {
  return list.map((x) => x.id);
}

/** Runs `action` and returns what it threw or rejected with (undefined if it succeeded). */
export async function failureOf(action: () => unknown): Promise<unknown> {
  try {
    await action();
  } catch (err) {
    return err;
  }
  return undefined;
}

/**
 * Asserts that `action` is refused with an InvalidInputError naming `field`, whose message shows
 * the offending value as `shown`. Returns the error for further checks.
 */
export async function expectInvalid(action: () => unknown, field: string, shown: string): Promise<InvalidInputError> {
  const err = await failureOf(action);
  expect(err).toBeInstanceOf(InvalidInputError);
  const e = err as InvalidInputError;
  expect(e.code).toBe('TIDAL_INVALID_INPUT');
  expect(e.field).toBe(field);
  expect(e.message).toContain(shown);
  return e;
}
