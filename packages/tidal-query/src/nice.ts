import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import type { NiceWarning } from './protocol.js';

/**
 * Sets this thread's nice value. On Linux, setpriority(2) given a thread id changes that thread
 * alone (the main thread and the writer keep theirs), and /proc/thread-self names the calling
 * thread. Raising one's own nice value needs no privilege.
 */
export function applyNice(asked: number): { nice: number; niceWarning?: NiceWarning } {
  let tid = 0;
  try {
    tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (asked !== 0) setPriority(tid, asked);
    return { nice: getPriority(tid) };
  } catch (err) {
    const nice = tid > 0 ? getPriority(tid) : getPriority();
    if (asked === 0) return { nice };
    return {
      nice,
      niceWarning: {
        code: 'TIDAL_WORKER_NICE_UNSET',
        message: `a query worker could not set its nice value to ${asked} (${(err as Error).message}); it runs at ${nice}`,
      },
    };
  }
}
