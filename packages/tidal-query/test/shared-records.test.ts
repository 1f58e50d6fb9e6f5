/**
 * Shared records (src/shared/records.ts): byte strings by key, one writer, readers in any thread.
 * The cross-thread test has a worker read while the main thread rewrites, deletes and reuses blocks:
 * every value a read returns must be one the writer stored whole, and a key's versions never go
 * back. It counts reads, blocks written again and the reads done again; it does not depend on speed.
 */
import { Worker } from 'node:worker_threads';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SharedRecordsReader, SharedRecordsWriter, blockBytes } from '../src/shared/records.js';
import {
  decodeRelated,
  decodeSession,
  decodeUserRecord,
  decodeUserState,
  encodeRelated,
  encodeSession,
  encodeUserState,
} from '../src/shared/state-records.js';

const bytes = (...v: number[]) => Uint8Array.from(v);

/** A value of `n` Int32 all equal to `version`: a torn copy would mix two versions. */
function versioned(version: number, n: number): Uint8Array {
  return new Uint8Array(new Int32Array(n).fill(version).buffer);
}

describe('shared records', () => {
  it('sets, replaces, deletes and finds by key, in the writer thread and through a reader', () => {
    const w = new SharedRecordsWriter(1 << 20, 4096);
    const r = new SharedRecordsReader(w.buffers);
    expect(r.get('a')).toBeUndefined();
    expect(w.set('a', bytes(1, 2, 3))).toBe(true);
    expect(w.set('é-key', bytes(9))).toBe(true);
    expect([...r.get('a')!.value]).toEqual([1, 2, 3]);
    expect([...r.get('é-key')!.value]).toEqual([9]);
    w.set('a', bytes(4));
    expect([...r.get('a')!.value]).toEqual([4]);
    expect(w.delete('a')).toBe(true);
    expect(w.delete('a')).toBe(false);
    expect(r.get('a')).toBeUndefined();
    expect(w.stats.records).toBe(1);
    // A key put back after a delete is found again.
    w.set('a', bytes(5));
    expect([...r.get('a')!.value]).toEqual([5]);
  });

  it('a cached record comes back as it is while its key points at it, and not after a change', () => {
    const w = new SharedRecordsWriter(1 << 20, 4096);
    const r = new SharedRecordsReader(w.buffers);
    w.set('k', bytes(1));
    const first = r.get('k')!;
    expect(r.get('k', first)).toBe(first);
    w.set('k', bytes(2));
    const second = r.get('k', first)!;
    expect(second).not.toBe(first);
    expect([...second.value]).toEqual([2]);
  });

  it('holds many keys (the table grows) and keeps every value while freed blocks are written again', () => {
    const w = new SharedRecordsWriter(1 << 22, 1 << 16);
    const r = new SharedRecordsReader(w.buffers);
    for (let i = 0; i < 5000; i++) w.set(`user-${i}`, versioned(i, 4));
    for (let round = 1; round <= 30; round++) for (let i = 0; i < 5000; i += 7) w.set(`user-${i}`, versioned(i + round * 100_000, 8));
    for (let i = 0; i < 5000; i += 2) w.delete(`user-${i}`);
    expect(w.stats.reused).toBeGreaterThan(0);
    expect(w.stats.records).toBe(2500);
    for (let i = 0; i < 5000; i++) {
      const got = r.get(`user-${i}`);
      if (i % 2 === 0) {
        expect(got).toBeUndefined();
        continue;
      }
      const v = new Int32Array(got!.value.buffer);
      expect(v[0]).toBe(i % 7 === 0 ? i + 30 * 100_000 : i);
      expect(new Set(v).size).toBe(1);
    }
  });

  it('rewriting records takes no more room than the records themselves, once: freed blocks are used again', () => {
    const w = new SharedRecordsWriter(1 << 24, 1 << 16);
    for (let i = 0; i < 1000; i++) w.set(`k-${i}`, versioned(i, 40));
    const first = w.stats.usedBytes;
    // Every record rewritten 50 times at the same size: the arena does not grow.
    for (let round = 0; round < 50; round++) for (let i = 0; i < 1000; i++) w.set(`k-${i}`, versioned(i + round, 40));
    expect(w.stats.usedBytes).toBeLessThanOrEqual(first + blockBytes(16 + 8 + 160));
    expect(w.stats.reused).toBeGreaterThanOrEqual(49 * 1000);
    // What the live records take is counted once per key, however often each was replaced.
    expect(w.stats.liveBytes).toBe(1000 * blockBytes(16 + 8 + 160));
    w.delete('k-0');
    expect(w.stats.liveBytes).toBe(999 * blockBytes(16 + 8 + 160));
    // Blocks take at most a quarter more than what they hold.
    for (const n of [1, 64, 65, 100, 129, 1000, 4097, 100_000]) {
      expect(blockBytes(n)).toBeGreaterThanOrEqual(n);
      expect(blockBytes(n)).toBeLessThanOrEqual(Math.max(64, Math.ceil(n * 1.25) + 8));
      expect(blockBytes(n) % 8).toBe(0);
    }
  });

  it('a record written into a freed block is not mistaken for the one a reader cached there', () => {
    const w = new SharedRecordsWriter(1 << 20, 4096);
    const r = new SharedRecordsReader(w.buffers);
    w.set('a', versioned(1, 4));
    const first = r.get('a')!;
    w.set('a', versioned(2, 4)); // a new block; the first one is freed
    w.set('a', versioned(3, 4)); // takes the freed first block again
    const third = r.get('a', first)!;
    expect(third.offset).toBe(first.offset);
    expect(third).not.toBe(first);
    expect(new Int32Array(third.value.buffer)[0]).toBe(3);
  });

  it('any sequence of sets and deletes reads back as a map would hold it, through table rebuilds and tombstones, whatever the keys', () => {
    // Keys of any UTF-16. The store keys by UTF-8 bytes, where a lone surrogate is U+FFFD, so the
    // model keys by that too ('\ud800' and '\udfff' are one key; tidal-core's ids are well formed).
    const key = fc.oneof(
      fc.integer({ min: 0, max: 3000 }).map((i) => `k${i}`),
      fc.constantFrom('é', '\ud800', '\ud800x', '\udfff', '', 'a\u0000b', '日本'),
    );
    const op = fc.oneof(
      { weight: 3, arbitrary: fc.record({ set: key, size: fc.integer({ min: 0, max: 300 }) }) },
      { weight: 1, arbitrary: fc.record({ del: key }) },
    );
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 4000 }), (ops) => {
        const w = new SharedRecordsWriter(1 << 24, 1 << 14);
        const r = new SharedRecordsReader(w.buffers);
        const model = new Map<string, Uint8Array>();
        const utf8 = (k: string): string => new TextDecoder().decode(new TextEncoder().encode(k));
        for (const [n, o] of ops.entries()) {
          if ('set' in o) {
            const value = new Uint8Array(o.size).fill(n & 0xff);
            expect(w.set(o.set, value)).toBe(true);
            model.set(utf8(o.set), value);
          } else {
            expect(w.delete(o.del)).toBe(model.delete(utf8(o.del)));
          }
        }
        for (const [k, v] of model) expect(r.get(k)?.value).toEqual(v);
        for (const k of ['k3001', 'missing', '\ufffe']) expect(r.get(k)).toBeUndefined();
        const live = [...model].reduce(
          (sum, [k, v]) => sum + blockBytes(16 + ((new TextEncoder().encode(k).length + 7) & ~7) + v.length),
          0,
        );
        expect([w.stats.records, w.stats.liveBytes]).toEqual([model.size, live]);
      }),
      { numRuns: 40, seed: 20261207 },
    );
  });

  it('a record with no room is refused whole: the key is gone, the store says it is full', () => {
    const w = new SharedRecordsWriter(4096, 1024);
    const r = new SharedRecordsReader(w.buffers);
    expect(w.set('small', bytes(1))).toBe(true);
    expect(w.set('small', new Uint8Array(10_000))).toBe(false);
    expect(r.get('small')).toBeUndefined();
    expect(r.full).toBe(true);
    expect(w.stats.full).toBe(true);
  });

  it('refuses options it cannot use, naming them', () => {
    expect(() => new SharedRecordsWriter(100)).toThrow(/maxArenaBytes/);
    expect(() => new SharedRecordsWriter(1 << 20, 3)).toThrow(/maxEntries/);
    expect(() => new SharedRecordsReader({} as never)).toThrow(/records/);
  });

  it('the state records decode to what was encoded', () => {
    const user = {
      key: 42,
      seenPos: 517,
      hidden: Int32Array.from([3, 9]),
      blocked: ['c1', 'ç2'],
      seen: Int32Array.from([1, 2, 3]),
      following: ['c4'],
      preference: Float32Array.from([0.5, -1, 2]),
      affinityCreators: ['c4', 'c5'],
      affinityScores: Float64Array.from([1.5, 0.25]),
      affinityAt: Float64Array.from([1.8e12, 1.8e12 + 3_600_000]),
      lambda: Math.LN2 / 3_600_000,
      idHash: 0xdeadbeef,
    };
    expect(decodeUserRecord(encodeUserState(user))).toEqual(user);
    // What a query reads: the affinities decayed to the latest of their times (one half-life here).
    const { key, seenPos, affinityAt, lambda, ...read } = user;
    expect([key, seenPos, affinityAt.length, lambda > 0]).toEqual([42, 517, 2, true]);
    expect(decodeUserState(encodeUserState(user))).toEqual({ ...read, affinityScores: Float64Array.from([1.5 / 2, 0.25]) });
    const noPref = {
      ...user,
      preference: null,
      hidden: new Int32Array(0),
      affinityCreators: [],
      affinityScores: new Float64Array(0),
      affinityAt: new Float64Array(0),
    };
    expect(decodeUserRecord(encodeUserState(noPref))).toEqual(noPref);
    const session = { agentId: 'agent-7', expiresAt: 1_735_689_600_123, seen: Int32Array.from([5, 6]) };
    expect(decodeSession(encodeSession(session))).toEqual(session);
    const related = {
      item: 4,
      n: 2,
      lambda: 1e-9,
      at: 1.8e12 + 0.5,
      partners: Int32Array.from([7, 3, 9]),
      scores: Float32Array.from([2.5, 1e-30, 4]),
    };
    expect(decodeRelated(encodeRelated(related))).toEqual({
      ...related,
      partners: related.partners.subarray(0, 2),
      scores: related.scores.subarray(0, 2),
    });
    // 24 bytes of header, 8 a partner.
    expect(encodeRelated(related).byteLength).toBe(24 + 8 * 2);
  });
});

const READER = `
const { parentPort, workerData } = require('node:worker_threads');
const { buffers, keys, done, url } = workerData;
import(url).then(({ SharedRecordsReader, sharedRecordRetries }) => {
  const r = new SharedRecordsReader(buffers);
  const stop = new Int32Array(done);
  const last = new Map();
  const violations = [];
  let reads = 0, found = 0;
  parentPort.postMessage({ type: 'ready' });
  for (let final = false; ; ) {
    if (Atomics.load(stop, 0) === 1) final = true;
    for (let k = 0; k < keys; k++) {
      const got = r.get('key-' + k);
      reads++;
      if (got === undefined) continue;
      found++;
      const v = new Int32Array(got.value.buffer, got.value.byteOffset, got.value.byteLength >> 2);
      const first = v[0];
      for (let i = 1; i < v.length; i++) if (v[i] !== first) { if (violations.length < 10) violations.push('torn value of key-' + k); break; }
      if (first % 1000 !== k) violations.push('key-' + k + ' read the value of key ' + (first % 1000));
      if (first < (last.get(k) ?? -1)) violations.push('key-' + k + ' went back from ' + last.get(k) + ' to ' + first);
      last.set(k, first);
    }
    if (final) break;
  }
  parentPort.postMessage({ type: 'report', reads, found, violations, retries: sharedRecordRetries() });
});
`;

interface Report {
  reads: number;
  found: number;
  violations: string[];
  retries: number;
}

describe('shared records across threads', () => {
  it('a reader thread never keeps a torn or stale-then-older record while the writer rewrites, deletes and reuses blocks', async () => {
    const KEYS = 200;
    const w = new SharedRecordsWriter(1 << 22, 4096);
    for (let k = 0; k < KEYS; k++) w.set(`key-${k}`, versioned(k, 16));
    const done = new SharedArrayBuffer(4);
    const url = new URL('../dist/shared/records.js', import.meta.url).href;
    const worker = new Worker(READER, { eval: true, workerData: { buffers: w.buffers, keys: KEYS, done, url } });
    try {
      const report = await new Promise<Report>((resolve, reject) => {
        worker.on('error', reject);
        worker.on('exit', (code) => reject(new Error(`reader exited early with code ${code}`)));
        worker.on('message', (msg: { type: string } & Report) => {
          if (msg.type !== 'ready') return resolve(msg);
          try {
            // Versions rise per key (version % 1000 is the key); values of varying length, some keys
            // deleted and put back, so records move and freed blocks are written again all along.
            let x = 42;
            const rnd = () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32;
            for (let i = 1; i <= 200_000; i++) {
              const k = Math.floor(rnd() * KEYS);
              if (rnd() < 0.05) w.delete(`key-${k}`);
              else w.set(`key-${k}`, versioned(i * 1000 + k, 8 + Math.floor(rnd() * 64)));
            }
          } catch (err) {
            reject(err);
          }
          Atomics.store(new Int32Array(done), 0, 1);
        });
      });
      expect(report.violations).toEqual([]);
      expect(report.found).toBeGreaterThan(0);
      // The writer wrote freed blocks again under the reader many times, so a torn read had chances to show.
      expect(w.stats.reused).toBeGreaterThan(100_000);
      console.log(
        `shared records: ${report.reads} reads, ${report.retries} done again after overlapping a write, ${w.stats.reused} blocks reused`,
      );
    } finally {
      worker.removeAllListeners('exit');
      await worker.terminate();
    }
  });
});
