import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { TidalDb } from 'tidal-core';
import { BASE, ITEMS, SCHEMA, eventAt } from './fixtures/crash-events.mjs';

const WRITER = fileURLToPath(new URL('./fixtures/crash-writer.mjs', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'tidal-crash-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Ev {
  item: string;
  kind: string;
  weight: number;
  at: number;
}

/** Runs the writer until it has acknowledged at least `minAcks` more events, then SIGKILLs it. */
function writeThenKill(start: number, minAcks: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WRITER, dir, String(start)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let acked = start;
    let buf = '';
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdout.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.startsWith('ACK ')) acked = Number(line.slice(4));
        if (acked - start >= minAcks && child.exitCode === null && !child.killed) child.kill('SIGKILL');
      }
    });
    child.on('exit', (code, signal) => {
      if (signal === 'SIGKILL') resolve(acked);
      else reject(new Error(`writer exited with ${code}: ${stderr}`));
    });
  });
}

/** The expected per-(item, kind) state after events 0..n-1, replayed in order with the documented formulas. */
function replay(n: number, now: number) {
  const state = new Map<string, { count: number; score: number; tRef: number; last1h: number }>();
  const lambda = (kind: string) => Math.LN2 / SCHEMA.signals.find((s: { name: string }) => s.name === kind).halfLifeMs;
  for (let i = 0; i < n; i++) {
    const e = eventAt(i) as Ev;
    const key = `${e.item}/${e.kind}`;
    const s = state.get(key);
    const l = lambda(e.kind);
    if (!s) {
      state.set(key, { count: 1, score: e.weight, tRef: e.at, last1h: 0 });
      continue;
    }
    s.count++;
    if (e.at >= s.tRef) {
      s.score = s.score * Math.exp(-l * (e.at - s.tRef)) + e.weight;
      s.tRef = e.at;
    } else {
      s.score += e.weight * Math.exp(-l * (s.tRef - e.at));
    }
  }
  const out = new Map<string, { count: number; score: number }>();
  for (const [key, s] of state) out.set(key, { count: s.count, score: s.score * Math.exp(-lambda(key.split('/')[1]!) * Math.max(0, now - s.tRef)) });
  return out;
}

describe('durability: kill -9 mid-stream', () => {
  it('keeps every acknowledged signal, exactly once, across repeated crashes', async () => {
    let next = 0;
    for (let round = 0; round < 4; round++) {
      const acked = await writeThenKill(next, 200 + round * 150);
      const now = BASE + 10_000_000;
      const db = await TidalDb.builder().path(dir).schema(SCHEMA).workers(1).clock(() => now).open();
      try {
        // Everything committed is present: at least what was acknowledged, maybe a batch more.
        let total = 0;
        for (let i = 0; i < ITEMS; i++) {
          for (const v of Object.values(db.itemSignals(`item-${i}`))) total += v.count;
        }
        expect(total).toBeGreaterThanOrEqual(acked);
        expect(total - acked).toBeLessThanOrEqual(25);
        const expected = replay(total, now);
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
