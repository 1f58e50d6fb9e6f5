import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AckMark, GroupCommit, SignalLog } from '../src/index.js';
import { openTestDb } from './db.js';

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-ack-'));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('AckMark', () => {
  it('round-trips the last acknowledged sequence number and reads a new or foreign file as unknown', () => {
    const path = join(tempDir(), 'db-ack');
    const mark = AckMark.open(path, () => {});
    expect(mark.read()).toBeUndefined();
    mark.write(12_345_678_901);
    expect(mark.read()).toBe(12_345_678_901);
    mark.close();
    expect(AckMark.open(path, () => {}).read()).toBe(12_345_678_901);
    writeFileSync(path, 'something else entirely');
    expect(AckMark.open(path, () => {}).read()).toBeUndefined();
  });

  it('is written by the group commit after the batch commits and before its promises resolve', async () => {
    const dir = tempDir();
    const db = openTestDb(join(dir, 'db.sqlite'));
    const log = new SignalLog(db);
    const path = join(dir, 'db-ack');
    const mark = AckMark.open(path, () => {});
    const seen: (number | undefined)[] = [];
    const gc = new GroupCommit<number>(
      db,
      {
        commit(events, firstSeq) {
          // Inside the transaction the mark still holds the previous batch.
          seen.push(mark.read());
          events.forEach((o, i) => log.appendAt(firstSeq + i, { ordinal: o, kind: 0, weight: 1, at: 0, session: null }));
          log.setLastSeq(firstSeq + events.length - 1);
        },
      },
      0,
      { maxBatch: 3, maxDelayMs: 1 },
      { ackMark: mark },
    );
    const a = gc.enqueue([1, 2, 3]).then((seq) => ({ seq, mark: mark.read() }));
    const b = gc.enqueue([4, 5]).then((seq) => ({ seq, mark: mark.read() }));
    expect(await a).toEqual({ seq: 1, mark: 3 });
    expect(await b).toEqual({ seq: 4, mark: 5 });
    expect(seen).toEqual([undefined, 3]);
    gc.close();
    mark.close();
    expect(readFileSync(path).length).toBe(16);
  });
});
