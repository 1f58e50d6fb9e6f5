/**
 * The public types refuse the requests the database could only refuse at run time. Checked by the
 * type-check of the tests (`tsc -p tsconfig.test.json`, before vitest in `npm test`): each
 * `@ts-expect-error` below fails that check when the mistake under it compiles.
 */
import { describe, expectTypeOf, it } from 'vitest';
import { DegradationLevel, levelName, type DegradationLevelName, type TidalDb } from 'tidal-core';

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

  it('index DegradationLevel by a level for its name, as a numeric enum', () => {
    const level = DegradationLevel.CoarseAggregates as DegradationLevel;
    expectTypeOf(DegradationLevel[level]).toEqualTypeOf<DegradationLevelName>();
    expectTypeOf(levelName(level)).toEqualTypeOf<DegradationLevelName>();
  });
});
