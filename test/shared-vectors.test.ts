/**
 * The int8 item vectors once per process: every query thread (the pool's workers, and a worker
 * module's thread answering reads itself) reads the same rows, and a write acknowledged in any
 * thread is in them for the next read in every thread. The ANN index is left to its own thread
 * (`ann.backgroundRows` 0) and never adopted, so vector searches are the exact search over those rows.
 */
import { BroadcastChannel } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { TidalDb, type ItemInput, type SchemaDefinition } from 'tidal-core';
import { HOUR, NOW, mulberry32 } from './helpers.js';

const MODULE = new URL('./fixtures/worker-module.mjs', import.meta.url);
const DIMS = 16;
const SCHEMA: SchemaDefinition = { signals: [{ name: 'view', halfLifeMs: HOUR }], embeddingDims: DIMS, metadata: {} };

const open: TidalDb[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((db) => db.close()));
});

async function call(
  port: number,
  method: string,
  ...args: unknown[]
): Promise<{ ok: boolean; value?: unknown; counts: { local: number } }> {
  const res = await fetch(`http://127.0.0.1:${port}/call`, { method: 'POST', body: JSON.stringify({ method, args }) });
  return (await res.json()) as { ok: boolean; value?: unknown; counts: { local: number } };
}

function items(n: number): ItemInput[] {
  const rand = mulberry32(7);
  return Array.from({ length: n }, (_, i) => ({
    id: `v${i}`,
    embedding: Array.from({ length: DIMS }, () => rand() * 2 - 1),
    createdAt: NOW - i * 1000,
  }));
}

/** A unit vector along dimension `d`: nearer to an item moved onto it than to any random one. */
function axis(d: number): number[] {
  return Array.from({ length: DIMS }, (_, k) => (k === d ? 1 : 0));
}

describe('shared item vectors', () => {
  it('an embedding changed in any thread is what the next vector search in every thread ranks by', async () => {
    const workers = 2;
    const channel = `shared-vectors-test-${Math.random()}`;
    const gate = new SharedArrayBuffer(8);
    const ports: number[] = [];
    const ch = new BroadcastChannel(channel);
    const reported = new Promise<void>((resolve) => {
      ch.onmessage = (ev) => {
        ports.push(((ev as MessageEvent).data as { port: number }).port);
        if (ports.length === workers) resolve();
      };
    });
    const db = await TidalDb.builder()
      .ephemeral()
      .schema(SCHEMA)
      .workers(workers)
      .clock(() => NOW)
      .ann({ backgroundRows: 0 })
      .onWarning(() => {})
      .workerModule(MODULE, { channel, gate })
      .open();
    open.push(db);
    await reported;
    ch.close();
    await db.upsertItems(items(200));
    await db.warm();
    expect(db.stats().memory.vectors).toMatchObject({ copies: 0, rows: 200 });

    for (let round = 0; round < 6; round++) {
      const id = `v${round * 31}`;
      const q = axis(round);
      // The write goes in from one thread (in turn the database's and each module thread) ...
      const from = round % 3;
      if (from === 0) await db.upsertItems([{ id, embedding: q, createdAt: NOW }]);
      else {
        const w = await call(ports[from - 1]!, 'upsertItems', [{ id, embedding: q, createdAt: NOW }]);
        expect(w.ok, JSON.stringify(w)).toBe(true);
      }
      // ... and the next search in each thread finds the item there.
      for (const port of ports) {
        const r = await call(port, 'search', { vector: q, limit: 1 });
        expect(r.ok, JSON.stringify(r)).toBe(true);
        expect(
          (r.value as { hits: { id: string }[] }).hits.map((h) => h.id),
          `round ${round}, port ${port}`,
        ).toEqual([id]);
      }
      for (let k = 0; k < workers; k++) {
        const r = await db.search({ vector: q, limit: 1 });
        expect(
          r.hits.map((h) => h.id),
          `round ${round}, pool`,
        ).toEqual([id]);
      }
    }
    // Every module-thread search ran in its own thread.
    for (const port of ports) expect((await call(port, 'search', { vector: axis(0), limit: 1 })).counts.local).toBeGreaterThan(0);
    expect(db.stats().memory.vectors).toMatchObject({ copies: 0, rows: 200 });
  });
});
