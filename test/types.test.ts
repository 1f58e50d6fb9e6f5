/**
 * The public types refuse the requests the database could only refuse at run time. Checked by the
 * type-check of the tests (`tsc -p tsconfig.test.json`, before vitest in `npm test`): each
 * `@ts-expect-error` below fails that check when the mistake under it compiles.
 */
import { describe, expectTypeOf, it } from 'vitest';
import { DegradationLevel, TidalDb, levelName, type DegradationLevelName, type SchemaDefinition, type SignalInput } from 'tidal-core';

/** A schema written inline: the builder infers its kinds and fields. */
const typedBuilder = TidalDb.builder()
  .ephemeral()
  .schema({
    signals: [
      { name: 'view', halfLifeMs: 3_600_000, velocity: true },
      { name: 'like', halfLifeMs: 86_400_000 },
    ],
    metadata: { category: 'string', duration: 'number' },
  });
type TypedDb = Awaited<ReturnType<typeof typedBuilder.open>>;

// Never called: the calls exist to be type-checked.
function schemaMistakes(db: TypedDb): void {
  // @ts-expect-error -- 'click' is not a kind of the schema.
  void db.signal({ item: 'a', kind: 'click' });
  void db.signals([
    { item: 'a', kind: 'view' },
    // @ts-expect-error -- in a batch too.
    { item: 'b', kind: 'click' },
  ]);
  // @ts-expect-error -- 'colour' is not a declared metadata field: no filter on it.
  void db.retrieve({ profile: 'trending', filter: { colour: 'red' } });
  // @ts-expect-error -- nor a search filter.
  void db.search({ text: 'jazz', filter: { colour: 'red' } });
  // @ts-expect-error -- nor a diversity field.
  void db.retrieve({ profile: 'popular', diversity: { maxPer: { colour: 1 } } });
  // @ts-expect-error -- an item's metadata holds only declared fields.
  void db.upsert({ id: 'a', metadata: { colour: 'red' } });
  // @ts-expect-error -- with their declared types.
  void db.upsertItems([{ id: 'a', metadata: { duration: 'long' } }]);
  // What the schema declares compiles.
  void db.signal({ item: 'a', kind: 'like', weight: 2 });
  void db.retrieve({
    profile: 'trending',
    filter: { category: 'jazz', duration: { lte: 300 }, createdAt: { gte: 0 } },
    diversity: { maxPer: { category: 2 } },
  });
  void db.search({ text: 'jazz', filter: { category: { in: ['jazz', 'rock'] } } });
  void db.upsert({ id: 'a', metadata: { category: 'jazz', duration: 120 } });
  void db.upsert({ id: 'b', metadata: { category: null } });
}

/** The schema's type given to a reopen without `.schema()`, and inferred by `TidalDb.open` from its options. */
type TypedSchema = TypedDb extends TidalDb<infer S> ? S : never;
const reopen = (): Promise<TidalDb<TypedSchema>> => TidalDb.builder<TypedSchema>().path('./data').open();
const viaOpen = () => TidalDb.open({ ephemeral: true, schema: { signals: [{ name: 'share', halfLifeMs: 1 }] } });

// A schema typed as SchemaDefinition (or a reopen without .schema()) keeps the loose types.
function looseCalls(db: TidalDb, typedAsDefinition: TidalDb<SchemaDefinition>): void {
  void db.signal({ item: 'a', kind: 'click' });
  void db.retrieve({ profile: 'trending', filter: { colour: 'red' } });
  void db.upsert({ id: 'a', metadata: { colour: 'red', nested: { any: ['json'] } } });
  void typedAsDefinition.signal({ item: 'a', kind: 'anything' });
}

// Never called: the calls exist to be type-checked.
function mistakes(db: TidalDb): void {
  // @ts-expect-error -- for_you ranks a user's feed: `user` is required.
  void db.retrieve({ profile: 'for_you' });
  // @ts-expect-error -- following lists the followed creators of a user: `user` is required.
  void db.retrieve({ profile: 'following', limit: 5 });
  // @ts-expect-error -- related ranks the items co-engaged with one: `item` is required.
  void db.retrieve({ profile: 'related' });
  // @ts-expect-error -- a search needs text, a vector or both.
  void db.search({ limit: 5 });
  // The same requests, complete, compile.
  void db.retrieve({ profile: 'for_you', user: 'u-1' });
  void db.retrieve({ profile: 'following', user: 'u-1', order: 'popular' });
  void db.retrieve({ profile: 'related', item: 'post-1' });
  void db.retrieve({ profile: 'trending', user: 'u-1' });
  void db.search({ text: 'jazz', limit: 5 });
  void db.search({ vector: [0.1, 0.2] });
}

describe('public types', () => {
  it('refuse incomplete requests (see mistakes(), checked by tsc)', () => {
    expectTypeOf(mistakes).toBeFunction();
  });

  it('check kinds, metadata fields and filter keys against a schema the builder inferred (see schemaMistakes(), checked by tsc)', () => {
    expectTypeOf(schemaMistakes).toBeFunction();
    expectTypeOf(looseCalls).toBeFunction();
    expectTypeOf(typedBuilder).toHaveProperty('open');
    expectTypeOf(reopen).toBeFunction();
    expectTypeOf(viaOpen).toBeFunction();
    expectTypeOf<TypedDb>().toEqualTypeOf<TidalDb<typeof typedBuilder extends { open(): Promise<TidalDb<infer S>> } ? S : never>>();
    expectTypeOf<Parameters<TypedDb['signal']>[0]['kind']>().toEqualTypeOf<'view' | 'like'>();
    expectTypeOf<SignalInput['kind']>().toEqualTypeOf<string>();
    expectTypeOf<Parameters<Awaited<ReturnType<typeof reopen>>['signal']>[0]['kind']>().toEqualTypeOf<'view' | 'like'>();
    expectTypeOf<Parameters<Awaited<ReturnType<typeof viaOpen>>['signal']>[0]['kind']>().toEqualTypeOf<'share'>();
    expectTypeOf<Parameters<TidalDb['signal']>[0]['kind']>().toEqualTypeOf<string>();
  });

  it('index DegradationLevel by a level for its name, as a numeric enum', () => {
    const level = DegradationLevel.CoarseAggregates as DegradationLevel;
    expectTypeOf(DegradationLevel[level]).toEqualTypeOf<DegradationLevelName>();
    expectTypeOf(levelName(level)).toEqualTypeOf<DegradationLevelName>();
  });
});
