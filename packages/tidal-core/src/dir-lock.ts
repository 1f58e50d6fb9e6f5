/**
 * One owner per database directory, as LevelDB's `LOCK` file: `tidal.lock` is created exclusively
 * (`O_EXCL`) at open and holds the owner's pid and start time, and is removed at close. A second
 * opener, in another process or in this one, is refused with {@link DirectoryLockedError} naming
 * the holder. A lock whose process is gone (killed with kill -9, so it never closed) is taken over.
 *
 * An advisory file, not an OS lock (Node has no flock): a process that ignores it is not stopped,
 * and on a network filesystem O_EXCL may not be atomic. Every tidal opener honours it.
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { DirectoryLockedError, InternalError } from 'tidal-load';

export const LOCK_FILE = 'tidal.lock';

/** The directories this process holds, so a second database of the same process is refused too. */
const held = new Set<string>();

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, owned by someone else.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

interface Holder {
  pid: number;
  since: string;
}

function readHolder(file: string): Holder | null {
  try {
    const h = JSON.parse(readFileSync(file, 'utf8')) as Partial<Holder>;
    return typeof h.pid === 'number' && Number.isInteger(h.pid) && h.pid > 0
      ? { pid: h.pid, since: String(h.since ?? 'an unknown time') }
      : null;
  } catch {
    // Unreadable or half-written (its writer died between create and write): nobody holds it.
    return null;
  }
}

/** Takes the directory's lock; returns the function that releases it. @throws DirectoryLockedError */
export function lockDirectory(dir: string): () => void {
  const file = join(dir, LOCK_FILE);
  for (let attempt = 0; ; attempt++) {
    let fd: number;
    try {
      fd = openSync(file, 'wx', 0o644);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST')
        throw new InternalError(`could not create ${file}: ${(err as Error).message}`, { cause: err });
      const holder = readHolder(file);
      if (holder !== null && (holder.pid !== process.pid ? alive(holder.pid) : held.has(file)))
        throw new DirectoryLockedError(dir, holder.pid, holder.since);
      // Left by a process that is gone (or by this one, before a crash of its own): take it over.
      // Two takers race to unlink and create; O_EXCL lets one win, the other sees the winner.
      if (attempt > 2) throw new DirectoryLockedError(dir, holder?.pid ?? 0, holder?.since ?? 'an unknown time');
      try {
        unlinkSync(file);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT')
          throw new InternalError(`could not remove the stale ${file}: ${(e as Error).message}`, { cause: e });
      }
      continue;
    }
    try {
      writeSync(fd, JSON.stringify({ pid: process.pid, since: new Date().toISOString() }));
    } finally {
      closeSync(fd);
    }
    held.add(file);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      held.delete(file);
      try {
        // Only our own lock: a file another process wrote after a takeover is theirs.
        if (readHolder(file)?.pid === process.pid) unlinkSync(file);
      } catch {
        // Already gone.
      }
    };
  }
}
