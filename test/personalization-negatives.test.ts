/**
 * The hard-negative rule, property-tested: over random sequences of writes (hide, unhide, block,
 * unblock, follow, unfollow, signals with and without a user, item upserts that move an item to another creator),
 * queries (every profile, following, hot, rising, top and related included; search by text and by vector, every level, with and without user
 * filters) and close/reopen restarts, no query naming a user ever returns an item that user hid or
 * an item whose creator (as last written) the user blocked. Seeded (`TIDAL_FUZZ_SEED`).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { TidalDb, type DegradationLevelName, type RetrieveRequest } from 'tidal-core';
import { NOW, TestClock } from './helpers.js';
import { USER_SCHEMA } from './user-helpers.js';

const SEED = Number(process.env.TIDAL_FUZZ_SEED ?? 20250101);
const SCALE = Number(process.env.TIDAL_FUZZ_SCALE ?? 1);
const ITEMS = Array.from({ length: 14 }, (_, i) => `i${i}`);
const CREATORS = ['ana', 'ben', 'cy', 'di'];
const USERS = ['u0', 'u1'];
const LEVELS: DegradationLevelName[] = ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'];
/** Every retrieve profile (`related` around the first item); then a context-vector retrieve and two searches. */
const PROFILES = ['trending', 'popular', 'new', 'for_you', 'following', 'hot', 'rising', 'top', 'related'] as const;

const root = mkdtempSync(join(tmpdir(), 'tidal-negatives-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function embeddingOf(i: number, c: number): number[] {
  return [1 + (i % 3), c + 0.5, (i * 7) % 5];
}

type Command =
  | { op: 'hide' | 'unhide'; user: number; item: number }
  | { op: 'block' | 'unblock' | 'follow' | 'unfollow'; user: number; creator: number }
  | { op: 'signal'; item: number; kind: number; user: number | null }
  | { op: 'move'; item: number; creator: number }
  | { op: 'query'; user: number; kind: number; level: number; unseen: boolean }
  | { op: 'restart' };

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ op: fc.constantFrom('hide' as const, 'unhide' as const), user: fc.nat(1), item: fc.nat(ITEMS.length - 1) }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constantFrom('block' as const, 'unblock' as const),
      user: fc.nat(1),
      creator: fc.nat(CREATORS.length - 1),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constantFrom('follow' as const, 'unfollow' as const),
      user: fc.nat(1),
      creator: fc.nat(CREATORS.length - 1),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant('signal' as const),
      item: fc.nat(ITEMS.length - 1),
      kind: fc.nat(2),
      user: fc.option(fc.nat(1)),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ op: fc.constant('move' as const), item: fc.nat(ITEMS.length - 1), creator: fc.nat(CREATORS.length - 1) }),
  },
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant('query' as const),
      user: fc.nat(1),
      kind: fc.nat(PROFILES.length + 2),
      level: fc.nat(3),
      unseen: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ op: 'restart' as const }) },
);

async function open(dir: string, clock: TestClock): Promise<TidalDb> {
  return TidalDb.builder().path(dir).workers(1).clock(clock.read).schema(USER_SCHEMA).capacity({ items: 1024, signalSlots: 1024 }).open();
}

describe('hard negatives (property)', () => {
  it('no hidden item and no blocked creator’s item is ever returned to that user', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 10, maxLength: 40 }), async (commands) => {
        const dir = join(root, `run-${run++}`);
        const clock = new TestClock(NOW);
        let db = await open(dir, clock);
        const creatorOf = ITEMS.map((_, i) => i % CREATORS.length);
        const hidden = USERS.map(() => new Set<string>());
        const blocked = USERS.map(() => new Set<string>());
        let returned = 0;
        try {
          await db.upsertItems(
            ITEMS.map((id, i) => ({
              id,
              text: `tune ${id} sound`,
              embedding: embeddingOf(i, creatorOf[i]!),
              metadata: { creator: CREATORS[creatorOf[i]!]! },
              createdAt: NOW - i * 60_000,
            })),
          );
          await db.upsertUsers(USERS.map((id) => ({ id })));
          for (const c of commands) {
            clock.advance(1000);
            switch (c.op) {
              case 'hide':
              case 'unhide':
                await db[c.op]({ user: USERS[c.user]!, item: ITEMS[c.item]! });
                if (c.op === 'hide') hidden[c.user]!.add(ITEMS[c.item]!);
                else hidden[c.user]!.delete(ITEMS[c.item]!);
                break;
              case 'follow':
              case 'unfollow':
                await db[c.op]({ user: USERS[c.user]!, creator: CREATORS[c.creator]! });
                break;
              case 'block':
              case 'unblock':
                await db[c.op]({ user: USERS[c.user]!, creator: CREATORS[c.creator]! });
                if (c.op === 'block') blocked[c.user]!.add(CREATORS[c.creator]!);
                else blocked[c.user]!.delete(CREATORS[c.creator]!);
                break;
              case 'signal':
                await db.signal({
                  item: ITEMS[c.item]!,
                  kind: ['view', 'like', 'skip'][c.kind]!,
                  ...(c.user === null ? {} : { user: USERS[c.user]! }),
                });
                break;
              case 'move':
                creatorOf[c.item] = c.creator;
                await db.upsert({
                  id: ITEMS[c.item]!,
                  text: `tune ${ITEMS[c.item]} sound`,
                  embedding: embeddingOf(c.item, c.creator),
                  metadata: { creator: CREATORS[c.creator]! },
                  createdAt: NOW - c.item * 60_000,
                });
                break;
              case 'restart':
                await db.close();
                db = await open(dir, clock);
                break;
              case 'query': {
                const user = USERS[c.user]!;
                const level = LEVELS[c.level]!;
                const userFilter = c.unseen ? { unseen: true } : undefined;
                const base = { user, level, limit: ITEMS.length, ...(userFilter ? { userFilter } : {}) };
                let ids: string[];
                if (c.kind < PROFILES.length) {
                  const profile = PROFILES[c.kind]!;
                  const req = { ...base, profile, ...(profile === 'related' ? { item: ITEMS[0]! } : {}) } as RetrieveRequest;
                  ids = (await db.retrieve(req)).items.map((i) => i.id);
                } else if (c.kind === PROFILES.length) {
                  ids = (await db.retrieve({ ...base, profile: 'popular', context: [1, 1, 1] })).items.map((i) => i.id);
                } else {
                  const req = c.kind === PROFILES.length + 1 ? { text: 'tune sound' } : { text: 'tune', vector: [1, 2, 0] };
                  ids = (await db.search({ ...base, ...req })).hits.map((h) => h.id);
                }
                returned += ids.length;
                for (const id of ids) {
                  expect(hidden[c.user]!.has(id), `${user} hid ${id} (${level})`).toBe(false);
                  const creator = CREATORS[creatorOf[ITEMS.indexOf(id)]!]!;
                  expect(blocked[c.user]!.has(creator), `${user} blocked ${creator}, got ${id} (${level})`).toBe(false);
                }
                // The rule removes only what it must: every other item is still there for `new`.
                if (c.kind === 2 && !c.unseen) {
                  const allowed = ITEMS.filter(
                    (id) => !hidden[c.user]!.has(id) && !blocked[c.user]!.has(CREATORS[creatorOf[ITEMS.indexOf(id)]!]!),
                  );
                  expect(ids.sort()).toEqual(allowed.sort());
                }
                break;
              }
            }
          }
          return returned >= 0;
        } finally {
          await db.close();
          rmSync(dir, { recursive: true, force: true });
        }
      }),
      { seed: SEED, numRuns: Math.max(1, Math.round(12 * SCALE)), endOnFailure: true },
    );
  }, 240_000);
});
