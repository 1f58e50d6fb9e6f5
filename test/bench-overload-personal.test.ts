/**
 * `bench:overload --mix personal` (bench/src/overload-personal.ts): the reads it offers are the
 * serve bench's personal mix as objects, drawn afresh per arrival; its writes land in a real
 * database as signals naming users, hides and follows; each read runs at a forced level.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DegradationLevel, TidalDb } from 'tidal-core';
import { loadDemo } from 'tidal-serve/demo';
import { Corpus } from '../bench/src/corpus.js';
import { personalQueries, personalSchema, personalTypedReads, personalWriter, runRead } from '../bench/src/overload-personal.js';
import { mulberry32 } from '../bench/src/random.js';
import { PERSONAL_DEFAULTS, PERSONAL_READS, personalDrawer, personalRequests, personalSpec } from '../bench/src/serve/personal-mix.js';
import { writeUsers } from '../bench/src/serve/personal-users.js';

const corpus = new Corpus({ items: 2_000, dims: 128, seed: 42 });
const spec = personalSpec(corpus, 200, 0);

describe('the personal mix in process (overload-personal.ts)', () => {
  let db: TidalDb;

  beforeAll(async () => {
    db = await TidalDb.builder()
      .schema(personalSchema())
      .ephemeral()
      .workers(1)
      .clock(() => corpus.now)
      .open();
    await loadDemo(db, { items: corpus.size, now: corpus.now });
    await writeUsers(db, corpus, spec, PERSONAL_DEFAULTS.follows);
  }, 120_000);

  afterAll(async () => {
    await db.close();
  });

  it('draws the same requests as the HTTP generator, as objects', () => {
    const objects = personalRequests({ ...spec, writeShare: 0.1 }, mulberry32(5));
    const http = personalDrawer({ ...spec, writeShare: 0.1 }, mulberry32(5));
    for (let i = 0; i < 500; i++) {
      const o = objects();
      const h = http();
      expect(o.type).toBe(h.type);
      expect(o.path).toBe(h.path);
      const parsed = JSON.parse(h.body as string) as Record<string, unknown>;
      expect(Object.keys(o.body)).toEqual(Object.keys(parsed));
      for (const [k, v] of Object.entries(o.body)) {
        if (v instanceof Float32Array) expect(Array.from(v).map((x) => Math.round(x * 1e5) / 1e5)).toEqual(parsed[k]);
        else expect(v).toEqual(parsed[k]);
      }
    }
  });

  it('draws a read per arrival, and every read type of the mix runs at a forced level', async () => {
    const next = personalQueries(spec, mulberry32(9));
    const a = next();
    const b = next();
    expect(a).not.toBe(b);
    const reads = personalTypedReads(spec, mulberry32(3), 2);
    expect(new Set(reads.map((r) => r.type))).toEqual(new Set(Object.keys(PERSONAL_READS)));
    for (const r of reads) {
      const full = await runRead(db, r.request, DegradationLevel.Full);
      const cheap = await runRead(db, r.request, DegradationLevel.NoDiversity);
      expect(full.level, r.type).toBe(DegradationLevel.Full);
      expect(cheap.level, r.type).toBe(DegradationLevel.NoDiversity);
      expect(full.ids.length, r.type).toBeGreaterThan(0);
    }
    // The drawn read resolves with the level it was served at.
    expect(await a(db)).toBe(DegradationLevel.Full);
  });

  it('writes signals naming users, hides and follows, by the mix shares, into the database', async () => {
    const write = personalWriter(spec, mulberry32(21));
    expect(await write(db, 400, corpus.now)).toBe(0);
    // The same draws again tell what each write was.
    const replay = personalRequests({ ...spec, writeShare: 1 }, mulberry32(21));
    const counts = { 'write:signal': 0, 'write:hide': 0, 'write:follow': 0 } as Record<string, number>;
    for (let i = 0; i < 400; i++) {
      const w = replay();
      counts[w.type]!++;
      const b = w.body as { item?: string; user?: string; creator?: string };
      const user = await db.getUser(b.user ?? decodeURIComponent(w.path.split('/')[2]!));
      if (w.type === 'write:signal') expect(user!.seen, w.type).toContain(b.item);
      else if (w.type === 'write:hide') expect(user!.hidden, w.type).toContain(b.item);
      else expect(user!.following, w.type).toContain(b.creator);
    }
    expect(counts['write:signal']).toBeGreaterThan(280);
    expect(counts['write:hide']).toBeGreaterThan(20);
    expect(counts['write:follow']).toBeGreaterThan(20);
  });
});
