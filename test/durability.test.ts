import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TidalDb } from 'tidal-core';
import { BASE, ITEMS, SCHEMA, replayState } from './fixtures/crash-events.mjs';
import { writeThenKill } from './fixtures/crash-harness.mjs';

const dir = mkdtempSync(join(tmpdir(), 'tidal-crash-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('durability: kill -9 mid-stream', () => {
  it('keeps every acknowledged signal, exactly once, across repeated crashes', async () => {
    let next = 0;
    for (let round = 0; round < 4; round++) {
      const acked = await writeThenKill(dir, next, 200 + round * 150);
      const now = BASE + 10_000_000;
      const db = await TidalDb.builder()
        .path(dir)
        .schema(SCHEMA)
        .workers(1)
        .clock(() => now)
        .open();
      try {
        // Everything committed is present: at least what was acknowledged, maybe a batch more.
        let total = 0;
        for (let i = 0; i < ITEMS; i++) {
          for (const v of Object.values(db.itemSignals(`item-${i}`))) total += v.count;
        }
        expect(total).toBeGreaterThanOrEqual(acked);
        expect(total - acked).toBeLessThanOrEqual(25);
        const expected = replayState(total, now);
        for (let i = 0; i < ITEMS; i++) {
          const got = db.itemSignals(`item-${i}`);
          for (const kind of ['view', 'like']) {
            const want = expected.get(`item-${i}/${kind}`);
            if (!want) {
              expect(got[kind]).toBeUndefined();
              continue;
            }
            expect(got[kind]!.count).toBe(want.count);
            expect(got[kind]!.score).toBeCloseTo(want.score, 9);
          }
        }
        next = total;
      } finally {
        // Closing checkpoints, so later rounds recover from a checkpoint plus the log after it.
        await db.close();
      }
    }
    expect(next).toBeGreaterThan(800);
  });
});
