/**
 * The memory readings of the bench (bench/src/harness/memory.ts): the resident pages summed by
 * mapping add up to the process's Rss and anonymous totals, and a file mapped under the data
 * directory is counted under its own name. Linux only (the readings are empty elsewhere).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { mappingBreakdown, residentMemory } from '../bench/src/harness/memory.js';

const linux = process.platform === 'linux';

describe.runIf(linux)('bench memory readings', () => {
  it('the groups by mapping add up to smaps_rollup, and a data file is named', () => {
    const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'bench-memory-')));
    const db = new Database(path.join(dir, 'm.db'));
    try {
      // A memory-mapped database file with resident pages.
      db.pragma('mmap_size = 8388608');
      db.exec('CREATE TABLE t (x BLOB)');
      const ins = db.prepare('INSERT INTO t VALUES (?)');
      db.transaction(() => {
        for (let i = 0; i < 1000; i++) ins.run(Buffer.alloc(4000, i & 255));
      })();
      expect(db.prepare('SELECT sum(length(x)) AS n FROM t').get()).toEqual({ n: 4_000_000 });
      const total = residentMemory();
      const m = mappingBreakdown(dir);
      const sum = (g: Record<string, { rssMiB: number; anonymousMiB: number }>, k: 'rssMiB' | 'anonymousMiB') =>
        Object.values(g).reduce((s, x) => s + x[k], 0);
      const rss = sum(m.files, 'rssMiB') + sum(m.anonymous, 'rssMiB');
      // Read a moment apart: within a few MiB of each other.
      expect(Math.abs(rss - total.rssMiB)).toBeLessThan(Math.max(8, total.rssMiB * 0.05));
      expect(Math.abs(sum(m.anonymous, 'anonymousMiB') + sum(m.files, 'anonymousMiB') - total.anonymousMiB)).toBeLessThan(
        Math.max(8, total.anonymousMiB * 0.05),
      );
      expect(m.files['data: m.db']?.rssMiB ?? 0).toBeGreaterThan(1);
      expect(m.files['node binary']?.rssMiB ?? 0).toBeGreaterThan(1);
      expect(m.largestAnonymousMiB.length).toBeGreaterThan(0);
    } finally {
      db.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
