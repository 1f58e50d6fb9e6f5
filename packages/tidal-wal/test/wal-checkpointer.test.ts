/**
 * The WAL checkpoint worker against a writer that never pauses for long: commits of ~40 pages at
 * the write path's cadence (one every 2 ms, its group-commit window). SQLite starts the WAL over
 * only when the writer begins with every frame copied; a checkpoint every 200 ms never catches up
 * with it, so past `restartFrames` the worker must keep checkpointing until the WAL starts over.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { WalCheckpointer, openWriterConnection } from 'tidal-wal';
import { WAL_FILE_LIMIT_BYTES } from '../src/connection.js';
import { openStorage } from 'tidal-wal/storage';

const root = mkdtempSync(join(tmpdir(), 'tidal-wal-restart-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const COMMITS = 600;
const PAGE = 4096;

/** The WAL file's largest size over the run, in pages, and the pages the commits wrote. */
async function run(name: string, restartFrames: number): Promise<{ walPages: number; written: number }> {
  const file = join(root, `${name}.db`);
  const writer = openWriterConnection(file, 'process');
  openStorage(writer, file);
  const checkpointer = WalCheckpointer.start(writer, file, () => {}, undefined, restartFrames);
  const put = writer.prepare('INSERT OR REPLACE INTO signal_checkpoint (chunk, data) VALUES (?, ?)');
  const blob = Buffer.alloc(10 * PAGE, 7);
  let walPages = 0;
  try {
    for (let i = 0; i < COMMITS; i++) {
      writer.transaction(() => {
        for (let k = 0; k < 4; k++) put.run((i * 4 + k) % 256, blob);
      })();
      walPages = Math.max(walPages, Math.ceil(statSync(`${file}-wal`).size / PAGE));
      // The write path's cadence (a batch closes after its 2 ms window): the load's shape, not a wait for an event.
      await sleep(2);
    }
  } finally {
    await checkpointer.close();
    writer.close();
  }
  return { walPages, written: COMMITS * 4 * 11 };
}

describe('WAL checkpoint worker', () => {
  it('keeps the WAL short under writes that never pause', async () => {
    const { walPages, written } = await run('restart', 512);
    // 26 400 pages written. The WAL grows until the worker's first look (200 ms: ≈ 5 000 pages at
    // this cadence) and starts over soon after; without the short looks it held all 26 000.
    expect(walPages).toBeLessThan(written / 2);
  }, 60_000);

  it('cuts the WAL file back once it starts over after a load whose commits never paused', async () => {
    const file = join(root, 'limit.db');
    const writer = openWriterConnection(file, 'process');
    openStorage(writer, file);
    const checkpointer = WalCheckpointer.start(writer, file, () => {});
    const put = writer.prepare('INSERT OR REPLACE INTO signal_checkpoint (chunk, data) VALUES (?, ?)');
    const big = Buffer.alloc(256 * 1024, 3);
    const walBytes = () => statSync(`${file}-wal`).size;
    try {
      // A load: 96 MiB in back-to-back commits, faster than any checkpoint.
      for (let i = 0; i < 24; i++)
        writer.transaction(() => {
          for (let k = 0; k < 16; k++) put.run(i * 16 + k, big);
        })();
      const loaded = walBytes();
      expect(loaded).toBeGreaterThan(WAL_FILE_LIMIT_BYTES);
      // Then small commits at the write path's cadence until the WAL started over and was cut back.
      let commits = 0;
      while (walBytes() > WAL_FILE_LIMIT_BYTES && commits < 5_000) {
        put.run(100_000, Buffer.alloc(100, commits % 256));
        commits++;
        await sleep(2);
      }
      expect(walBytes()).toBeLessThanOrEqual(WAL_FILE_LIMIT_BYTES);
    } finally {
      await checkpointer.close();
      writer.close();
    }
  }, 60_000);
});
