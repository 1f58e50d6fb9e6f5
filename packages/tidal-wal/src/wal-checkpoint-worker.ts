/**
 * Worker thread that copies SQLite's WAL into the main database file, off the main thread (see
 * `WalCheckpointer`). Every `pollMs` it looks at the WAL file and, if it was written since the last
 * look, runs a PASSIVE checkpoint: PASSIVE never waits for, or blocks, the writer or the readers.
 */
import { statSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

interface Init {
  file: string;
  pollMs: number;
}

const { file, pollMs } = workerData as Init;
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
    db.pragma('wal_checkpoint(PASSIVE)');
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
