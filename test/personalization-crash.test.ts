/**
 * The feedback loop survives SIGKILL: a child writes user signals (seen set, preference vector,
 * creator affinity move in the signal's batch) mixed with hides, blocks and follows, prints its
 * live state and kills itself; the reopened database must hold exactly that state. Several rounds
 * on one directory, each continuing the stream where the last left off, with checkpoints in between.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { TidalDb } from 'tidal-core';
import { FEEDBACK_NOW, FEEDBACK_SCHEMA, snapshot } from './fixtures/user-crash-events.mjs';
import { mulberry32 } from './helpers.js';

const WRITER = fileURLToPath(new URL('./fixtures/user-crash-writer.mjs', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'tidal-user-crash-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function writeThenKill(dir: string, first: number, batches: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WRITER, dir, String(first), String(batches)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`writer exited with ${code}: ${err}`));
      else resolve(JSON.parse(out.trim()));
    });
  });
}

describe('feedback loop: live state = state after SIGKILL + reopen', () => {
  it('holds over kills at seeded points, each continuing the stream', async () => {
    const rand = mulberry32(0xfeed);
    const dir = join(root, 'kills');
    let next = 0;
    for (let round = 0; round < 4; round++) {
      const batches = 2 + Math.floor(rand() * 8);
      const live = (await writeThenKill(dir, next, batches)) as {
        users: Record<string, { seen: string[]; preference: number[] | null } | null>;
        related: Record<string, [string, number][]>;
      };
      next += batches;
      const db = await TidalDb.builder()
        .path(dir)
        .workers(1)
        .clock(() => FEEDBACK_NOW)
        .schema(FEEDBACK_SCHEMA)
        .capacity({ items: 4096, signalSlots: 4096 })
        .open();
      try {
        const recovered = await snapshot(db);
        expect(recovered, `round ${round}`).toEqual(live);
        // Not vacuous: the stream moved every user's state.
        for (const u of Object.values(live.users)) expect(u!.seen.length, `round ${round}`).toBeGreaterThan(0);
        expect(live.users['user-1']!.preference, `round ${round}`).not.toBeNull();
        expect(
          Object.values(live.related).some((r) => r.length > 0),
          `round ${round}`,
        ).toBe(true);
      } finally {
        await db.close();
      }
    }
  }, 120_000);
});
