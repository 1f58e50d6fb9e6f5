/**
 * The schema is part of the database: stored at the first open, used when `.schema()` is left out,
 * compared at every other open. Additions are applied with `TIDAL_SCHEMA_CHANGED`; changes that
 * drop or reinterpret stored data are refused with `SchemaChangeError` unless `migrate({ allow })`
 * names them, and a migration's state and the stored schema commit together.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import {
  InvalidInputError,
  SchemaChangeError,
  TidalDb,
  type IncompatibleSchemaChange,
  type ReplicationLink,
  type SchemaDefinition,
  type TidalWarning,
} from 'tidal-core';
import { DAY, HOUR, NOW, TestClock } from './helpers.js';

const BASE: SchemaDefinition = {
  signals: [
    { name: 'view', halfLifeMs: HOUR, velocity: true },
    { name: 'like', halfLifeMs: DAY, windows: ['24h', 'all'] },
  ],
  metadata: { category: 'string', duration: 'number' },
};

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function newDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-schema-'));
  dirs.push(dir);
  return dir;
}

interface OpenArgs {
  schema?: SchemaDefinition;
  allow?: IncompatibleSchemaChange[];
  clock?: TestClock;
  warnings?: TidalWarning[];
}

function open(dir: string, { schema, allow, clock = new TestClock(), warnings = [] }: OpenArgs = {}): Promise<TidalDb> {
  const b = TidalDb.builder()
    .path(dir)
    .workers(1)
    .clock(clock.read)
    .onWarning((w) => warnings.push(w));
  if (schema !== undefined) b.schema(schema);
  if (allow !== undefined) b.migrate({ allow });
  return b.open();
}

/** A database on BASE with one item and a view and a like on it, closed. */
async function seeded(): Promise<string> {
  const dir = newDir();
  const db = await open(dir, { schema: BASE });
  await db.upsert({ id: 'a', text: 'first', metadata: { category: 'news', duration: 30 } });
  await db.signals([
    { item: 'a', kind: 'view', at: NOW },
    { item: 'a', kind: 'like', at: NOW },
  ]);
  await db.close();
  return dir;
}

function storedSchema(dir: string): unknown {
  const raw = new Database(join(dir, 'tidal.db'), { readonly: true });
  try {
    const text = raw.prepare("SELECT value FROM tidal_meta WHERE key = 'schema'").pluck().get() as string | undefined;
    return text === undefined ? undefined : JSON.parse(text);
  } finally {
    raw.close();
  }
}

async function refusal(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected the open to be refused');
}

describe('the stored schema', () => {
  it('is stored at the first open with every default written out', async () => {
    const dir = await seeded();
    expect(storedSchema(dir)).toEqual({
      signals: [
        { name: 'view', halfLifeMs: HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true, preference: 0 },
        { name: 'like', halfLifeMs: DAY, windows: ['24h', 'all'], velocity: false, preference: 0 },
      ],
      metadata: { category: 'string', duration: 'number' },
      affinityHalfLifeMs: 7 * DAY,
    });
  });

  it('is used when .schema() is left out on reopen: kinds, windows and metadata fields as stored', async () => {
    const dir = await seeded();
    const warnings: TidalWarning[] = [];
    const db = await open(dir, { warnings });
    try {
      const values = db.itemSignals('a');
      expect(Object.keys(values).sort()).toEqual(['like', 'view']);
      expect(Object.keys(values.like!.windows).sort()).toEqual(['24h', 'all']);
      await db.signal({ item: 'a', kind: 'like', at: NOW });
      await expect(db.signal({ item: 'a', kind: 'share', at: NOW })).rejects.toThrow(InvalidInputError);
      const res = await db.retrieve({ profile: 'trending', filter: { category: 'news' }, limit: 5 });
      expect(res.items.map((i) => i.id)).toEqual(['a']);
      await expect(db.retrieve({ profile: 'trending', filter: { colour: 'red' }, limit: 5 })).rejects.toThrow(/colour/);
      expect(warnings.filter((w) => w.code === 'TIDAL_SCHEMA_CHANGED')).toEqual([]);
    } finally {
      await db.close();
    }
  });

  it('is required on a directory that holds no database, and for an ephemeral one', async () => {
    const err = await refusal(open(newDir()));
    expect(InvalidInputError.is(err) && err.field).toBe('schema');
    expect((err as Error).message).toMatch(/no stored schema/);
    const eph = await refusal(TidalDb.builder().ephemeral().workers(1).open());
    expect(InvalidInputError.is(eph) && eph.field).toBe('schema');
  });

  it('the same schema given again opens without a warning and stores nothing new', async () => {
    const dir = await seeded();
    const before = storedSchema(dir);
    const warnings: TidalWarning[] = [];
    await (await open(dir, { schema: BASE, warnings })).close();
    expect(warnings.filter((w) => w.code === 'TIDAL_SCHEMA_CHANGED')).toEqual([]);
    expect(storedSchema(dir)).toEqual(before);
  });
});

describe('a compatible change', () => {
  it('a new kind, window and metadata field: applied, stored and warned about', async () => {
    const dir = await seeded();
    const warnings: TidalWarning[] = [];
    const grown: SchemaDefinition = {
      signals: [
        { name: 'view', halfLifeMs: HOUR, velocity: true },
        { name: 'like', halfLifeMs: DAY, windows: ['1h', '24h', 'all'] },
        { name: 'share', halfLifeMs: DAY },
      ],
      metadata: { category: 'string', duration: 'number', lang: 'string' },
    };
    const db = await open(dir, { schema: grown, warnings });
    await db.signal({ item: 'a', kind: 'share', at: NOW });
    expect(db.itemSignals('a').like!.count).toBe(1);
    await db.close();
    const changed = warnings.filter((w) => w.code === 'TIDAL_SCHEMA_CHANGED');
    expect(changed).toHaveLength(1);
    expect(changed[0]!.message).toContain('schema.signals.like.windows ["24h","all"] → ["1h","24h","all"] (window-added)');
    expect(changed[0]!.message).toContain('schema.signals.share absent → "share" (kind-added)');
    expect(changed[0]!.message).toContain('schema.metadata.lang absent → "string" (field-added)');
    // Stored: the next open without a schema has the new kind and field.
    const again = await open(dir);
    try {
      expect(Object.keys(again.itemSignals('a')).sort()).toEqual(['like', 'share', 'view']);
      await again.retrieve({ profile: 'trending', filter: { lang: 'en' }, limit: 5 });
    } finally {
      await again.close();
    }
  });
});

describe('an incompatible change', () => {
  const cases: [string, SchemaDefinition, string, unknown, unknown][] = [
    [
      'a changed half-life',
      { ...BASE, signals: [{ name: 'view', halfLifeMs: 2 * HOUR, velocity: true }, BASE.signals[1]!] },
      'schema.signals.view.halfLifeMs',
      HOUR,
      2 * HOUR,
    ],
    ['a removed kind', { ...BASE, signals: [BASE.signals[0]!] }, 'schema.signals.like', 'like', undefined],
    ['a removed metadata field', { ...BASE, metadata: { category: 'string' } }, 'schema.metadata.duration', 'number', undefined],
    [
      'a changed field type',
      { ...BASE, metadata: { category: 'number', duration: 'number' } },
      'schema.metadata.category',
      'string',
      'number',
    ],
  ];

  it.each(cases)(
    '%s is refused with SchemaChangeError naming the field and both values; nothing changes',
    async (_, schema, field, stored, given) => {
      const dir = await seeded();
      const before = storedSchema(dir);
      const err = await refusal(open(dir, { schema }));
      expect(SchemaChangeError.is(err)).toBe(true);
      const e = err as SchemaChangeError;
      expect(e.code).toBe('TIDAL_SCHEMA_INCOMPATIBLE');
      expect([e.field, e.stored, e.given]).toEqual([field, stored, given]);
      expect(e.message).toContain(`.migrate({ allow: ['${e.changes[0]!.change}'] })`);
      expect(storedSchema(dir)).toEqual(before);
      const db = await open(dir);
      try {
        expect(db.itemSignals('a').like!.count).toBe(1);
      } finally {
        await db.close();
      }
    },
  );

  it('is applied when migrate() allows it: kind dropped, scores decay at the new half-life, schema stored', async () => {
    const dir = await seeded();
    const clock = new TestClock(NOW + 2 * HOUR);
    const warnings: TidalWarning[] = [];
    const migrated: SchemaDefinition = { signals: [{ name: 'view', halfLifeMs: 2 * HOUR, velocity: true }], metadata: BASE.metadata! };
    // One allowed change is not enough for two.
    const partial = await refusal(open(dir, { schema: migrated, allow: ['kind-removed'], clock }));
    expect(SchemaChangeError.is(partial) && partial.changes.map((c) => c.change)).toEqual(['half-life-changed']);
    const db = await open(dir, { schema: migrated, allow: ['kind-removed', 'half-life-changed'], clock, warnings });
    try {
      const values = db.itemSignals('a');
      expect(Object.keys(values)).toEqual(['view']);
      // One view at NOW, read two hours later: half its weight under a 2 h half-life (a quarter under 1 h).
      expect(values.view!.score).toBeCloseTo(0.5, 12);
    } finally {
      await db.close();
    }
    expect(warnings.find((w) => w.code === 'TIDAL_SCHEMA_CHANGED')?.message).toMatch(/half-life-changed.*kind-removed/);
    expect(storedSchema(dir)).toMatchObject({ signals: [{ name: 'view', halfLifeMs: 2 * HOUR }] });
    // The old schema is now the incompatible one.
    const back = await refusal(open(dir, { schema: BASE }));
    expect(SchemaChangeError.is(back) && back.changes.map((c) => c.change)).toEqual(['half-life-changed']);
  });

  it('migrate.allow names only incompatible change kinds', async () => {
    const err = await refusal(open(newDir(), { schema: BASE, allow: ['kind-added' as IncompatibleSchemaChange] }));
    expect(InvalidInputError.is(err) && err.field).toBe('migrate.allow[0]');
  });
});

describe('a migration commits with the stored schema', () => {
  /** Makes the next write of `table` (rows matching `when`) abort its transaction, as a crash at that point would leave it. */
  function failNextWrite(dir: string, table: string, when: string): () => void {
    const raw = new Database(join(dir, 'tidal.db'));
    raw.exec(`CREATE TRIGGER fail_write BEFORE INSERT ON ${table} WHEN ${when} BEGIN SELECT RAISE(ABORT, 'injected failure'); END`);
    raw.close();
    return () => {
      const r = new Database(join(dir, 'tidal.db'));
      r.exec('DROP TRIGGER fail_write');
      r.close();
    };
  }

  const dropLike: OpenArgs = { schema: { ...BASE, signals: [BASE.signals[0]!] }, allow: ['kind-removed'] };

  it.each([
    ['the stored schema', 'tidal_meta', "NEW.key = 'schema'"],
    ['the renumbered checkpoint', 'signal_checkpoint', '1'],
    ['the kind names', 'tidal_meta', "NEW.key = 'kinds'"],
  ])('a failure writing %s leaves the old schema and every stored signal', async (_, table, when) => {
    const dir = await seeded();
    const before = storedSchema(dir);
    const heal = failNextWrite(dir, table, when);
    const err = await refusal(open(dir, dropLike));
    expect((err as Error).message).toMatch(/injected failure/);
    heal();
    expect(storedSchema(dir)).toEqual(before);
    const db = await open(dir);
    try {
      const values = db.itemSignals('a');
      expect([values.view!.count, values.like!.count]).toEqual([1, 1]);
    } finally {
      await db.close();
    }
  });
});

describe('replication on the stored schema', () => {
  it('a replica bootstrapped from a peer opens on the schema the snapshot stored, and replicates under it', async () => {
    const root = newDir();
    let started = 0;
    const link: ReplicationLink = {
      start: () => {
        started++;
      },
      stats: () => ({ connected: false, published: 0, read: 0, applied: 0 }),
      close: async () => {},
    };
    const peer = await TidalDb.builder()
      .path(join(root, 'peer'))
      .schema(BASE)
      .workers(1)
      .clock(new TestClock().read)
      .replication(link)
      .open();
    await peer.signal({ item: 'a', kind: 'like', at: NOW });
    await peer.replicaSnapshot(join(root, 'snapshot.db'));
    await peer.close();
    TidalDb.bootstrapReplica(join(root, 'snapshot.db'), join(root, 'joined'));
    expect(storedSchema(join(root, 'joined'))).toEqual(storedSchema(join(root, 'peer')));
    const joined = await TidalDb.builder().path(join(root, 'joined')).workers(1).clock(new TestClock().read).replication(link).open();
    try {
      expect(started).toBe(2);
      expect(joined.itemSignals('a').like!.count).toBe(1);
      await joined.signal({ item: 'a', kind: 'view', at: NOW });
      expect(joined.stats().replication!.unpublished).toBeGreaterThan(0);
    } finally {
      await joined.close();
    }
  });
});
