/**
 * Users: upsertUsers / getUser / deleteUser, validated like items, durable across reopen; the
 * schema's creatorField; hide / block / follow and the user filters on retrieve and search.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidInputError, TidalDb } from 'tidal-core';
import { HOUR, NOW, TestClock } from './helpers.js';
import { USER_SCHEMA } from './user-helpers.js';

const root = mkdtempSync(join(tmpdir(), 'tidal-users-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function open(dir: string | null, clock = new TestClock(NOW), schema = USER_SCHEMA): Promise<TidalDb> {
  const b = TidalDb.builder().workers(1).clock(clock.read).schema(schema).capacity({ items: 4096, signalSlots: 4096 });
  return (dir === null ? b.ephemeral() : b.path(dir)).open();
}

function expectInvalid(field: string): (err: unknown) => boolean {
  return (err) => {
    expect(InvalidInputError.is(err), String(err)).toBe(true);
    expect((err as InvalidInputError).field).toBe(field);
    return true;
  };
}

const ITEMS = [
  { id: 'a1', embedding: [1, 0, 0], metadata: { category: 'jazz', creator: 'ana' }, createdAt: NOW - HOUR },
  { id: 'a2', embedding: [0.9, 0.1, 0], metadata: { category: 'jazz', creator: 'ana' }, createdAt: NOW - 2 * HOUR },
  { id: 'b1', embedding: [0, 1, 0], metadata: { category: 'rock', creator: 'ben' }, createdAt: NOW - 3 * HOUR },
  { id: 'b2', embedding: [0.1, 0.9, 0], metadata: { category: 'rock', creator: 'ben' }, createdAt: NOW - 4 * HOUR },
  { id: 'c1', embedding: [0, 0, 1], metadata: { category: 'pop', creator: 'cy' }, createdAt: NOW - 5 * HOUR },
];

describe('schema.creatorField', () => {
  it('must name a declared string metadata field', async () => {
    await expect(open(null, new TestClock(), { ...USER_SCHEMA, creatorField: 'nope' })).rejects.toSatisfy(
      expectInvalid('schema.creatorField'),
    );
    await expect(open(null, new TestClock(), { ...USER_SCHEMA, metadata: { creator: 'number' } })).rejects.toSatisfy(
      expectInvalid('schema.creatorField'),
    );
    await expect(
      open(null, new TestClock(), { ...USER_SCHEMA, signals: [{ name: 'view', halfLifeMs: HOUR, preference: 2 }] }),
    ).rejects.toSatisfy(expectInvalid('schema.signals[0].preference'));
  });
});

describe('users', () => {
  it('upserts, reads, replaces and deletes users; durable across a reopen', async () => {
    const dir = join(root, 'crud');
    let db = await open(dir);
    await db.upsertUsers([{ id: 'u1', metadata: { plan: 'pro' }, embedding: [1, 0, 0] }, { id: 'u2' }]);
    expect(await db.getUser('u1')).toMatchObject({ id: 'u1', metadata: { plan: 'pro' }, seen: [], hidden: [] });
    expect((await db.getUser('u1'))!.embedding).toEqual(new Float32Array([1, 0, 0]));
    expect((await db.getUser('u2'))!.preference).toBeNull();
    expect(await db.getUser('nobody')).toBeUndefined();
    await db.deleteUser('nobody'); // resolves, nothing to do
    await db.upsertUsers([{ id: 'u2', metadata: { plan: 'free' } }]);
    await db.close();
    db = await open(dir);
    expect((await db.getUser('u2'))!.metadata).toEqual({ plan: 'free' });
    expect((await db.getUser('u1'))!.preference).toEqual(new Float32Array([1, 0, 0]));
    await db.deleteUser('u1');
    expect(await db.getUser('u1')).toBeUndefined();
    await db.close();
    db = await open(dir);
    expect(await db.getUser('u1')).toBeUndefined();
    expect(await db.getUser('u2')).toBeDefined();
    await db.close();
  });

  it('validates like items: the call is refused whole, naming the field', async () => {
    const db = await open(null);
    try {
      await expect(db.upsertUsers([{ id: 'ok' }, { id: '' }])).rejects.toSatisfy(expectInvalid('users[1].id'));
      await expect(db.upsertUsers([{ id: 'x', embedding: [1, 2] }])).rejects.toSatisfy(expectInvalid('users[0].embedding'));
      await expect(db.upsertUsers([{ id: 'x', metadata: [] as unknown as Record<string, unknown> }])).rejects.toSatisfy(
        expectInvalid('users[0].metadata'),
      );
      await expect(db.upsertUsers('x' as never)).rejects.toSatisfy(expectInvalid('users'));
      expect(await db.getUser('ok')).toBeUndefined();
      await expect(db.getUser(42 as never)).rejects.toSatisfy(expectInvalid('id'));
      await expect(db.signal({ item: 'a1', kind: 'view', user: 'ghost' })).rejects.toSatisfy(expectInvalid('signal.user'));
      await expect(db.hide({ user: 'ghost', item: 'a1' })).rejects.toSatisfy(expectInvalid('user'));
      await expect(db.retrieve({ profile: 'popular', user: 'ghost' })).rejects.toSatisfy(expectInvalid('user'));
      await expect(db.search({ text: 'x', user: 'ghost' })).rejects.toSatisfy(expectInvalid('user'));
      await expect(db.retrieve({ profile: 'popular', userFilter: { unseen: true } })).rejects.toSatisfy(expectInvalid('userFilter'));
      // @ts-expect-error -- the types require `user` for for_you; an untyped caller gets the error.
      await expect(db.retrieve({ profile: 'for_you' })).rejects.toSatisfy(expectInvalid('user'));
      await db.upsertUsers([{ id: 'u' }]);
      await expect(db.retrieve({ profile: 'popular', user: 'u', userFilter: { unblocked: false } })).rejects.toSatisfy(
        expectInvalid('userFilter.unblocked'),
      );
      await expect(db.retrieve({ profile: 'popular', user: 'u', userFilter: { seen: true } as never })).rejects.toSatisfy(
        expectInvalid('userFilter.seen'),
      );
      await expect(db.retrieve({ profile: 'for_you', user: 'u', explore: 0.9 })).rejects.toSatisfy(expectInvalid('explore'));
      await expect(db.retrieve({ profile: 'for_you', user: 'u', weights: { recency: -1 } })).rejects.toSatisfy(
        expectInvalid('weights.recency'),
      );
      await expect(db.retrieve({ profile: 'popular', seed: 3 })).rejects.toSatisfy(expectInvalid('seed'));
      await expect(db.block({ user: 'u', creator: '' })).rejects.toSatisfy(expectInvalid('creator'));
    } finally {
      await db.close();
    }
  });

  it('without a creatorField, blocks and the following filter are refused', async () => {
    const { creatorField: _, ...schema } = USER_SCHEMA;
    const db = await open(null, new TestClock(), schema);
    try {
      await db.upsertUsers([{ id: 'u' }]);
      await expect(db.block({ user: 'u', creator: 'ana' })).rejects.toSatisfy(expectInvalid('creator'));
      await expect(db.retrieve({ profile: 'new', user: 'u', userFilter: { following: true } })).rejects.toSatisfy(
        expectInvalid('userFilter.following'),
      );
    } finally {
      await db.close();
    }
  });
});

describe('hard negatives, follows and the user filters', () => {
  it('hide, block and follow shape every retrieve and search that names the user', async () => {
    const dir = join(root, 'edges');
    let db = await open(dir);
    await db.upsertItems(ITEMS.map((i) => ({ ...i, text: `song by ${i.metadata.creator}` })));
    await db.upsertUsers([{ id: 'u' }, { id: 'other' }]);
    const ids = async (req: Parameters<TidalDb['retrieve']>[0]): Promise<string[]> => (await db.retrieve(req)).items.map((i) => i.id);
    expect(await ids({ profile: 'new', user: 'u' })).toEqual(['a1', 'a2', 'b1', 'b2', 'c1']);
    await db.hide({ user: 'u', item: 'a2' });
    await db.block({ user: 'u', creator: 'ben' });
    expect(await ids({ profile: 'new', user: 'u' })).toEqual(['a1', 'c1']);
    expect(await ids({ profile: 'new', user: 'other' })).toEqual(['a1', 'a2', 'b1', 'b2', 'c1']);
    expect(await ids({ profile: 'new' })).toEqual(['a1', 'a2', 'b1', 'b2', 'c1']);
    const hits = await db.search({ text: 'song', user: 'u', limit: 10 });
    expect(hits.hits.map((h) => h.id).sort()).toEqual(['a1', 'c1']);
    const vec = await db.search({ vector: [0, 1, 0], user: 'u', limit: 10 });
    expect(vec.hits.map((h) => h.id).sort()).toEqual(['a1', 'c1']);
    expect(vec.explain.userFiltered).toBe(3);
    // Follows.
    await db.follow({ user: 'u', creator: 'cy' });
    expect(await ids({ profile: 'new', user: 'u', userFilter: { following: true } })).toEqual(['c1']);
    // Seen: a signal from the user.
    await db.signal({ item: 'a1', kind: 'view', user: 'u' });
    expect(await ids({ profile: 'new', user: 'u', userFilter: { unseen: true } })).toEqual(['c1']);
    expect((await db.getUser('u'))!).toMatchObject({ seen: ['a1'], hidden: ['a2'], blocked: ['ben'], following: ['cy'] });
    await db.close();
    db = await open(dir);
    expect(await ids({ profile: 'new', user: 'u' })).toEqual(['a1', 'c1']);
    expect(await ids({ profile: 'new', user: 'u', userFilter: { unseen: true, following: true } })).toEqual(['c1']);
    await db.unhide({ user: 'u', item: 'a2' });
    await db.unblock({ user: 'u', creator: 'ben' });
    await db.unfollow({ user: 'u', creator: 'cy' });
    expect(await ids({ profile: 'new', user: 'u' })).toEqual(['a1', 'a2', 'b1', 'b2', 'c1']);
    expect(await ids({ profile: 'new', user: 'u', userFilter: { following: true } })).toEqual([]);
    await db.close();
  });

  it('a page stays full: hidden items are dropped before the top-k, not after', async () => {
    const db = await open(null);
    try {
      await db.upsertItems(ITEMS);
      await db.upsertUsers([{ id: 'u' }]);
      await db.signals(ITEMS.flatMap((it, i) => Array.from({ length: 10 - i }, () => ({ item: it.id, kind: 'view' }))));
      await db.hide({ user: 'u', item: 'a1' });
      await db.hide({ user: 'u', item: 'a2' });
      for (const level of ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const) {
        const r = await db.retrieve({ profile: 'popular', user: 'u', limit: 3, level });
        expect(
          r.items.map((i) => i.id),
          level,
        ).toEqual(['b1', 'b2', 'c1']);
        const t = await db.retrieve({ profile: 'trending', user: 'u', limit: 3, level });
        expect(
          t.items.map((i) => i.id),
          level,
        ).toEqual(['b1', 'b2', 'c1']);
      }
    } finally {
      await db.close();
    }
  });
});
