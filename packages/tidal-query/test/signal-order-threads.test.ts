/**
 * The slot orders across threads: a worker walks the published orders (as popular and trending do)
 * while the main thread applies events fast enough to rebuild them many times over. Every reading
 * the worker's `stillValid()` accepts must be a well-formed order: each slot once, in range, keys
 * descending within each kind, newest times descending. Readings it rejects are retried, as the
 * executors do. The test counts readings and rebuilds; it does not depend on how fast either runs.
 */
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { SignalStore, type SignalKindSpec } from '../src/signals/store.js';

const HOUR = 3_600_000;
const T0 = Date.UTC(2025, 0, 6, 12, 0, 0);
const KINDS: SignalKindSpec[] = [
  { name: 'view', halfLifeMs: HOUR, windows: ['1h', '24h', 'all'], velocity: true },
  { name: 'like', halfLifeMs: 4 * HOUR, windows: ['24h', 'all'], velocity: false },
];

interface Report {
  valid: number;
  retried: number;
  violations: string[];
  generations: number;
}

const READER = `
const { parentPort, workerData } = require('node:worker_threads');
const { arena, kinds, done, storeUrl } = workerData;
import(storeUrl).then(({ SignalStore }) => {
  const store = SignalStore.attach(arena, kinds);
  const order = store.order;
  const stop = new Int32Array(done);
  const firstGen = order.generation;
  let valid = 0, retried = 0;
  const violations = [];
  parentPort.postMessage({ type: 'ready' });
  // Keep reading until the writer is done and one more full reading has been checked.
  let last = false;
  for (;;) {
    if (Atomics.load(stop, 0) === 1) last = true;
    if (!order.begin()) { violations.push('orders disabled'); break; }
    const used = store.slotsUsed();
    const problems = [];
    const seen = new Set();
    for (let k = 0; k < kinds.length; k++) {
      let prevKey = Infinity, prevNewest = Infinity;
      for (let i = order.start(k); i < order.end(k); i++) {
        const slot = order.keySlotAt(i);
        const key = order.keyAt(i);
        if (!Number.isInteger(slot) || slot < 0 || slot >= used) problems.push('key slot ' + slot + ' out of range at ' + i);
        if (seen.has(slot)) problems.push('slot ' + slot + ' twice');
        seen.add(slot);
        if (key > prevKey) problems.push('keys not descending at ' + i);
        prevKey = key;
        const newest = order.newestAt(i);
        const nslot = order.newestSlotAt(i);
        if (!Number.isInteger(nslot) || nslot < 0 || nslot >= used) problems.push('newest slot ' + nslot + ' out of range at ' + i);
        if (newest > prevNewest) problems.push('newest times not descending at ' + i);
        prevNewest = newest;
      }
    }
    for (let j = 0; j < order.dirtyCount; j++) {
      const slot = order.dirtySlot(j);
      if (!Number.isInteger(slot) || slot < 0 || slot >= used) problems.push('dirty slot ' + slot + ' out of range');
    }
    if (order.stillValid()) {
      valid++;
      for (const p of problems) if (violations.length < 20) violations.push(p);
      if (last) break;
    } else {
      retried++;
    }
  }
  parentPort.postMessage({ type: 'report', valid, retried, violations, generations: order.generation - firstGen });
});
`;

describe('slot orders across threads', () => {
  it('a worker only accepts well-formed orders while the writer rebuilds them', async () => {
    const store = SignalStore.create({ kinds: KINDS, maxOrdinals: 6000, maxSlots: 12_000 });
    // A first population, so the orders exist before the worker starts.
    for (let o = 0; o < 2000; o++) store.apply(o, o % 2, 1 + (o % 7), T0 - (o % 500) * 60_000);
    const done = new SharedArrayBuffer(4);
    const storeUrl = new URL('../dist/signals/store.js', import.meta.url).href;
    const worker = new Worker(READER, { eval: true, workerData: { arena: store.arena, kinds: KINDS, done, storeUrl } });
    try {
      const report = await new Promise<Report>((resolve, reject) => {
        worker.on('error', reject);
        worker.on('exit', (code) => reject(new Error(`reader exited early with code ${code}`)));
        worker.on('message', (msg: { type: string } & Report) => {
          if (msg.type === 'ready') {
            try {
              // Events to existing and to new slots, in and out of time order: every few hundred
              // changed slots the writer rebuilds the orders under the reader.
              let x = 12345;
              const rnd = () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32;
              for (let i = 0; i < 150_000; i++) {
                const o = Math.floor(rnd() * 6000);
                store.apply(
                  o,
                  rnd() < 0.7 ? 0 : 1,
                  rnd() < 0.05 ? -1 : 1 + Math.floor(rnd() * 3),
                  T0 + Math.floor(rnd() * 4 * HOUR) - 2 * HOUR,
                );
              }
            } catch (err) {
              reject(err);
            }
            Atomics.store(new Int32Array(done), 0, 1);
          } else {
            resolve(msg);
          }
        });
      });
      expect(report.violations).toEqual([]);
      expect(report.valid).toBeGreaterThan(0);
      // The writer did rebuild under the reader (hundreds of times), so the check had something to catch.
      expect(report.generations).toBeGreaterThan(10);
    } finally {
      worker.removeAllListeners('exit');
      await worker.terminate();
    }
  });
});
