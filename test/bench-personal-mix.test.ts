/**
 * The personalized mix of `bench:serve --mix personal`: its shares from the seeded draw, writes
 * naming users among the reads, requests drawn afresh (not a loop over a list), and the generator
 * sending what it draws and counting it by type. No server of tidal's: a node:http stub.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-core';
import { Corpus } from '../bench/src/corpus.js';
import { mulberry32 } from '../bench/src/random.js';
import { checkSource, runLoad } from '../bench/src/serve/loadgen.js';
import {
  itemsByCategory,
  PERSONAL_READS,
  PERSONAL_WRITES,
  personalDrawer,
  personalUser,
  userCategory,
  type PersonalMixSpec,
  type TypedRequest,
} from '../bench/src/serve/personal-mix.js';

const corpus = new Corpus({ items: 2_000, dims: 128, seed: 42 });
const spec: PersonalMixSpec = {
  draw: 'personal',
  items: corpus.size,
  users: 300,
  history: 6,
  writeShare: 0.1,
  byCategory: itemsByCategory(corpus),
};
const N = 20_000;

function draws(seed: number, n = N): TypedRequest[] {
  const next = personalDrawer(spec, mulberry32(seed));
  return Array.from({ length: n }, () => next());
}

const bodyOf = (r: TypedRequest) => JSON.parse(r.body as string) as Record<string, unknown>;

describe('the personal mix (personal-mix.ts)', () => {
  const sample = draws(11);
  const count = (type: string) => sample.filter((r) => r.type === type).length;

  it('draws every read type and every write at its share (±1.5 points of the arrivals)', () => {
    for (const [type, share] of Object.entries(PERSONAL_READS)) expect(Math.abs(count(type) / N - share * 0.9), type).toBeLessThan(0.015);
    for (const [kind, share] of Object.entries(PERSONAL_WRITES))
      expect(Math.abs(count(`write:${kind}`) / N - share * 0.1), kind).toBeLessThan(0.015);
    const types = new Set(sample.map((r) => r.type));
    expect(types.size).toBe(Object.keys(PERSONAL_READS).length + Object.keys(PERSONAL_WRITES).length);
  });

  it('sends each type to its route with the body that makes it that type, naming users of the run', () => {
    const users = new Set<string>();
    for (const r of sample) {
      const b = bodyOf(r);
      expect(r.method).toBe('POST');
      switch (r.type) {
        case 'for_you':
        case 'for_you+unseen':
          expect(r.path).toBe('/retrieve');
          expect(b.profile).toBe('for_you');
          expect(b.userFilter).toEqual(r.type === 'for_you' ? undefined : { unseen: true });
          users.add(b.user as string);
          break;
        case 'following':
          expect([r.path, b.profile]).toEqual(['/retrieve', 'following']);
          users.add(b.user as string);
          break;
        case 'related': {
          expect([r.path, b.profile]).toEqual(['/retrieve', 'related']);
          // The item is one the named user viewed before the run: it has co-engagement.
          const u = Number((b.user as string).slice(5));
          expect(personalUser(corpus, spec, u, 0).history.map((i) => corpus.id(i))).toContain(b.item);
          break;
        }
        case 'trending':
          expect([r.path, b.profile]).toEqual(['/retrieve', 'trending']);
          break;
        case 'text':
          expect(r.path).toBe('/search');
          expect(typeof b.text).toBe('string');
          expect(b.vector).toBeUndefined();
          break;
        case 'hybrid':
          expect(r.path).toBe('/search');
          expect(typeof b.text).toBe('string');
          expect(b.vector).toHaveLength(128);
          break;
        case 'write:signal':
          expect(r.path).toBe('/signals');
          expect(b).toMatchObject({ user: expect.stringMatching(/^user-\d{5}$/), kind: expect.stringMatching(/^(view|like)$/) });
          // An item of the user's own category.
          expect(spec.byCategory[userCategory(Number((b.user as string).slice(5)))]).toContain(corpus.indexOf(b.item as string));
          break;
        case 'write:hide':
          expect(r.path).toMatch(/^\/users\/user-\d{5}\/hide$/);
          expect(Object.keys(b)).toEqual(['item']);
          break;
        case 'write:follow':
          expect(r.path).toMatch(/^\/users\/user-\d{5}\/follow$/);
          expect(b.creator).toMatch(/^creator-\d{5}$/);
          break;
      }
    }
    for (const u of users) expect(Number(u.slice(5))).toBeLessThan(spec.users);
    expect(users.size).toBe(spec.users);
  });

  it('draws afresh per arrival: every hybrid vector is new, and the seed fixes the sequence', () => {
    // A list drawn up front and looped over would repeat its bodies; a context vector drawn per arrival never does.
    const hybrid = sample.filter((r) => r.type === 'hybrid');
    expect(new Set(hybrid.map((r) => r.body)).size).toBe(hybrid.length);
    expect(draws(11, 500)).toEqual(sample.slice(0, 500));
    expect(draws(12, 500)).not.toEqual(sample.slice(0, 500));
  });

  it('a user is the same wherever it is built: its history is of its own category', () => {
    const a = personalUser(corpus, spec, 7, 4);
    expect(personalUser(corpus, spec, 7, 4)).toEqual(a);
    expect(a.history).toHaveLength(spec.history);
    for (const i of a.history)
      expect(corpus.item(i).metadata.category).toBe(corpus.item(spec.byCategory[userCategory(7)]![0]!).metadata.category);
    expect(a.follows.length).toBeGreaterThan(0);
  });

  it('with `only` and `level`, draws that read type alone, each asking for the level, and no writes', () => {
    const next = personalDrawer({ ...spec, only: 'following', level: 'NoDiversity' }, mulberry32(5));
    for (let i = 0; i < 500; i++) {
      const r = next();
      expect(r.type).toBe('following');
      expect(bodyOf(r)).toMatchObject({ profile: 'following', level: 'NoDiversity' });
    }
    expect(() => checkSource({ ...spec, only: 'write:signal' })).toThrow(/--requests\.only/);
    expect(() => checkSource({ ...spec, level: 'Cheap' })).toThrow(/--requests\.level/);
  });

  it('refuses a drawn mix it does not know, or a spec with a bad field, naming the field', () => {
    expect(() => checkSource({ ...spec, draw: 'other' })).toThrow(InvalidInputError);
    expect(() => checkSource({ ...spec, draw: 'other' })).toThrow(/--requests\.draw/);
    expect(() => checkSource({ ...spec, writeShare: 2 })).toThrow(/--requests\.writeShare/);
    expect(() => checkSource({ ...spec, byCategory: [] })).toThrow(/--requests\.byCategory/);
    expect(checkSource(spec)).toBe(spec);
  });
});

describe('the generator with a drawn mix', () => {
  const seen: { path: string; body: string }[] = [];
  let url = '';
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      seen.push({ path: req.url!, body });
      // Refuse every hide, to see the refusal counted under its type.
      const status = req.url!.endsWith('/hide') ? 503 : 200;
      const text = JSON.stringify(status === 200 ? { ok: true } : { code: 'TIDAL_OVERLOADED' });
      res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) });
      res.end(text);
    });
  });
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('sends one drawn request per arrival and counts each type: sent, served, refused', async () => {
    const result = await runLoad(
      {
        url,
        client: 'raw',
        // A count, not a time: 600 sends (about 360 naming a user) however fast the machine is.
        mode: { kind: 'closed', concurrency: 4, requests: 600 },
        durationMs: 120_000,
        connections: 4,
        timeoutMs: 5_000,
        graceMs: 5_000,
        seed: 3,
        maxOutstanding: 1000,
        countHeader: null,
      },
      spec,
    );
    const byType = result.byType;
    const sent = Object.values(byType).reduce((a, c) => a + c.sent, 0);
    expect(sent).toBe(result.offered);
    expect(seen).toHaveLength(result.completed);
    for (const type of Object.keys(PERSONAL_READS)) if (byType[type] !== undefined) expect(byType[type].ok).toBe(byType[type].sent);
    expect(byType['write:hide']?.refused ?? 0).toBe(seen.filter((s) => s.path.endsWith('/hide')).length);
    expect(byType.for_you?.sent ?? 0).toBe(
      seen.filter((s) => s.path === '/retrieve' && /"profile":"for_you","user":"[^"]+","limit"/.test(s.body)).length,
    );
    // Afresh: the bodies the server saw are not a handful repeated. Counted over the first 200 (300
    // users repeat over a long run).
    const personal = seen.filter((s) => s.body.includes('"user"')).slice(0, 200);
    expect(personal).toHaveLength(200);
    expect(new Set(personal.map((s) => s.body)).size).toBeGreaterThan(100);
  });
});
