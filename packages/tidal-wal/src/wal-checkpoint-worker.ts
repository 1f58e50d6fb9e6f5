/**
 * Worker thread that copies SQLite's WAL into the main database file, off the main thread (see
 * `WalCheckpointer`). Every `pollMs` it looks at the WAL file and, if it was written since the last
 * look, runs a PASSIVE checkpoint: PASSIVE never waits for, or blocks, the writer or the readers.
 *
 * SQLite starts the WAL over only when a writer begins with every frame already copied. Under
 * writes that never pause, a checkpoint every `pollMs` never catches up with the writer (it copies
 * 200 ms of frames while the writer adds more), so the WAL grew by every commit: 303 000 frames,
 * 1.2 GB, after 30 s of single-event writes. Past `restartFrames` the worker looks again after 1 ms
 * instead, until the WAL is short again: a pass copies what the last one left, and the writer soon
 * begins with nothing left to copy (the same run stayed under 12 300 frames).
 */
import { statSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

interface Init {
  file: string;
  pollMs: number;
  restartFrames: number;
}

const { file, pollMs, restartFrames } = workerData as Init;
const wal = `${file}-wal`;
const db = new Database(file);
db.pragma('busy_timeout = 5000');
// This connection only checkpoints; it must never start one of its own from a commit.
db.pragma('wal_autocheckpoint = 0');

let timer: NodeJS.Timeout | undefined;

let lastSeen = '';

/** The WAL's modification time and size; a change means new frames. */
function walStamp(): string {
  try {
    const s = statSync(wal, { bigint: true });
    return `${s.mtimeNs}:${s.size}`;
  } catch {
    return '';
  }
}

function tick(): void {
  // Only when the writer wrote since the last look: an idle database costs one stat per poll.
  const stamp = walStamp();
  if (stamp !== '' && stamp !== lastSeen) {
    lastSeen = stamp;
    const [result] = db.pragma('wal_checkpoint(PASSIVE)') as { log: number }[];
    if (result !== undefined && result.log > restartFrames) {
      timer = setTimeout(tick, 1);
      return;
    }
  }
  timer = setTimeout(tick, pollMs);
}

parentPort!.on('message', (msg: { t: 'close' }) => {
  if (msg.t !== 'close') return;
  if (timer !== undefined) clearTimeout(timer);
  db.close();
  parentPort!.close();
});

timer = setTimeout(tick, pollMs);
