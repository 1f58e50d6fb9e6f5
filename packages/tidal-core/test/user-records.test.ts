/**
 * Users whose state lives in the shared records: once a registry shares its users, the records are
 * its only copy of each stored user (a batch rebuilds the user from its record), and a user whose
 * record found no room stays in the registry. Whatever the batches, rollbacks and reopens, and
 * whichever records were refused, every user reads back (`get`, and the state a query reads) exactly
 * as from a registry that never shared, and the user tables hold the same rows.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import type { QuerySchema, RelatedTask, SessionRecord, UserQueryState, UserRecord } from 'tidal-query';
import { openStorage } from 'tidal-wal/storage';
import { SharedStateWriter, type SharedStateSink } from '../src/shared-state.js';
import type { ItemFacts, UserEvent, UserSignalEvent } from '../src/user-types.js';
import { UserRegistry } from '../src/users.js';

const root = mkdtempSync(join(tmpdir(), 'tidal-user-records-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const NOW = 1_800_000_000_000;
const USERS = ['u0', 'u1', 'u2', 'u3'];
const CREATORS = ['c0', 'c1', 'c2'];
const ITEMS = 8;
const SCHEMA = {
  embeddingDims: 3,
  kinds: ['view', 'like', 'skip'],
  preferenceRates: [0, 0.5, -0.25],
  affinityHalfLifeMs: 3_600_000,
} as unknown as QuerySchema;

/** Item `o`'s embedding and creator, as a committed signal brings them. */
function facts(o: number): ItemFacts {
  return { embedding: Float32Array.from([1, o / ITEMS, o % 2]), creator: CREATORS[o % CREATORS.length]! };
}

/** The real writer, refusing to store the users `refuse` names (as a full writer does: the key is removed). */
class RefusingSink implements SharedStateSink {
  readonly #writer = new SharedStateWriter(() => undefined);
  constructor(readonly refuse: (id: string) => boolean) {}
  user(id: string, state: UserRecord | null): boolean {
    if (state !== null && this.refuse(id)) {
      this.#writer.user(id, null);
      return false;
    }
    return this.#writer.user(id, state);
  }
  readUser(id: string): UserQueryState | undefined {
    return this.#writer.readUser(id);
  }
  readUserRecord(id: string): UserRecord | undefined {
    return this.#writer.readUserRecord(id);
  }
  session(id: string, record: SessionRecord | null): boolean {
    return this.#writer.session(id, record);
  }
  related(itemId: string, task: RelatedTask | null): boolean {
    return this.#writer.related(itemId, task);
  }
  readRelated(itemId: string): RelatedTask | undefined {
    return this.#writer.readRelated(itemId);
  }
}

interface Side {
  file: string;
  db: Database.Database;
  users: UserRegistry;
  /** Makes a new sink for the registry (after each reopen), or none. */
  sink: (() => SharedStateSink) | null;
}

function openSide(file: string, sink: Side['sink']): Side {
  const db = new Database(file);
  openStorage(db, file);
  const users = new UserRegistry(db, SCHEMA);
  if (sink !== null) users.share(sink(), (o) => `item-${o}`);
  return { file, db, users, sink };
}

type Ev = UserEvent | UserSignalEvent;

/** One batch through the write path's steps: begin, persist each event in the transaction, apply after it. */
function batch(s: Side, events: readonly Ev[], commit: boolean): void {
  s.users.begin();
  try {
    s.db.transaction(() => {
      for (const e of events) s.users.persist(e, (o) => facts(o));
      s.users.finish();
      if (!commit) throw new Error('rolled back');
    })();
  } catch (err) {
    if (commit) throw err;
    return;
  }
  s.users.apply();
}

/** The user tables' rows, in a fixed order: what an open after a crash would load. */
function rows(s: Side): unknown[] {
  return [
    'users ORDER BY key',
    'user_seen ORDER BY user, ordinal',
    'user_hidden ORDER BY user, ordinal',
    'user_creators ORDER BY user, relation, creator',
    'user_affinity ORDER BY user, creator',
  ].map((t) => s.db.prepare(`SELECT * FROM ${t}`).raw().all());
}

/** Everything a user reads back: the stored user, and the state a query naming them reads. */
function readBack(s: Side): unknown[] {
  return USERS.map((id) => {
    const user = s.users.get(id, NOW + 7_200_000);
    if (user === undefined) return undefined;
    return { user, query: s.users.queryState('user', id, true, true) };
  });
}

const user = fc.constantFrom(...USERS);
const item = fc.integer({ min: 0, max: ITEMS - 1 });
const event: fc.Arbitrary<Ev> = fc.oneof(
  fc.record({
    type: fc.constant('user-upsert' as const),
    id: user,
    metadata: fc.record({ tier: fc.constantFrom('a', 'b'), n: fc.integer({ min: 0, max: 9 }) }),
    embedding: fc.option(fc.constant(Float32Array.from([0, 1, 0])), { nil: null }),
  }),
  fc.record({ type: fc.constant('user-delete' as const), id: user }),
  fc.record({ type: fc.constantFrom('hide' as const, 'unhide' as const), user, ordinal: item, item: fc.constant('') }),
  fc.record({
    type: fc.constantFrom('block' as const, 'unblock' as const, 'follow' as const, 'unfollow' as const),
    user,
    creator: fc.constantFrom(...CREATORS),
  }),
  fc.record({
    type: fc.constant('signal' as const),
    ordinal: item,
    id: fc.constant(''),
    kind: fc.integer({ min: 0, max: 2 }),
    weight: fc.constantFrom(1, 2.5),
    at: fc.integer({ min: NOW - 3_600_000, max: NOW + 3_600_000 }),
    user: fc.option(user, { nil: null }),
  }),
);
const step = fc.oneof(
  { weight: 8, arbitrary: fc.record({ events: fc.array(event, { minLength: 1, maxLength: 6 }), commit: fc.boolean() }) },
  { weight: 1, arbitrary: fc.constant('reopen' as const) },
);

describe('users kept in the shared records', () => {
  it('read back exactly as from a registry that never shared, whatever the batches, rollbacks, reopens and refused records', () => {
    let run = 0;
    let rebuilt = 0;
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 25 }), fc.integer({ min: 0, max: 15 }), (steps, refusedMask) => {
        run++;
        const dir = join(root, `run-${run}`);
        const refuse = (id: string): boolean => ((refusedMask >> USERS.indexOf(id)) & 1) === 1;
        let sides = [
          openSide(`${dir}-heap.db`, null),
          openSide(`${dir}-shared.db`, () => new SharedStateWriter(() => undefined)),
          openSide(`${dir}-refusing.db`, () => new RefusingSink(refuse)),
        ];
        try {
          for (const st of steps) {
            if (st === 'reopen') {
              sides = sides.map((s) => {
                s.db.close();
                return openSide(s.file, s.sink);
              });
            } else {
              for (const s of sides) batch(s, st.events, st.commit);
            }
            const [heap, ...shared] = sides.map(readBack);
            for (const other of shared) expect(other).toEqual(heap);
            const [heapRows, ...sharedRows] = sides.map(rows);
            for (const other of sharedRows) expect(other).toEqual(heapRows);
            // The registry holds only the users whose record was refused; the others live in the records.
            const present = heap!.map((u, i) => (u === undefined ? null : USERS[i]!)).filter((id) => id !== null);
            expect(sides.map((s) => s.users.held)).toEqual([present.length, 0, present.filter(refuse).length]);
            if (heap!.some((u) => u !== undefined)) rebuilt++;
          }
        } finally {
          for (const s of sides) s.db.close();
        }
      }),
      { numRuns: 60, seed: 20261207 },
    );
    expect(rebuilt).toBeGreaterThan(100);
  });
});
