import { closeSync, constants, openSync, readSync, writeSync } from 'node:fs';
import type { WarningSink } from 'tidal-load';

const MAGIC = Buffer.from('TIDALACK', 'latin1');
const SIZE = 16;

/**
 * A 16-byte side file holding the highest acknowledged sequence number, rewritten in place after
 * every committed batch and before its promises resolve. It exists to detect one thing on open:
 * SQLite recovering fewer commits than were acknowledged.
 *
 * Why it is needed: SQLite validates its WAL's frame checksums on recovery and stops at the first
 * bad or missing frame, keeping every commit before it and none after. So a torn or corrupt WAL tail
 * never leaves a hole in the middle, but it silently drops the last commits. Comparing this mark
 * with the recovered `last_seq` turns that silent loss into a warning.
 *
 * It is advisory: written with one `pwrite` (no fsync), after the commit, so it can lag the
 * database (killed between the two writes: no false alarm) but never lead it while the OS keeps
 * its page cache. Under `'process'` durability a power loss can drop both the WAL tail and the
 * mark's last update; the warning then names what it can prove was lost, possibly less.
 */
export class AckMark {
  readonly #fd: number;
  readonly #warn: WarningSink;
  readonly #buf = Buffer.alloc(SIZE);
  #failed = false;

  private constructor(fd: number, warn: WarningSink) {
    this.#fd = fd;
    this.#warn = warn;
    MAGIC.copy(this.#buf, 0);
  }

  /** Opens (creating if needed) the mark file. */
  static open(path: string, warn: WarningSink): AckMark {
    return new AckMark(openSync(path, constants.O_RDWR | constants.O_CREAT, 0o644), warn);
  }

  /** The recorded sequence number, or undefined for a new or unreadable file. */
  read(): number | undefined {
    const buf = Buffer.alloc(SIZE);
    const n = readSync(this.#fd, buf, 0, SIZE, 0);
    if (n < SIZE || !buf.subarray(0, MAGIC.length).equals(MAGIC)) return undefined;
    const seq = Number(buf.readBigUint64LE(8));
    return Number.isSafeInteger(seq) ? seq : undefined;
  }

  /** Records `seq` as acknowledged. A failure is reported once and then ignored: the batch is committed regardless. */
  write(seq: number): void {
    if (this.#failed) return;
    this.#buf.writeBigUint64LE(BigInt(seq), 8);
    try {
      writeSync(this.#fd, this.#buf, 0, SIZE, 0);
    } catch (err) {
      this.#failed = true;
      this.#warn({
        code: 'TIDAL_ACK_MARK_FAILED',
        message: `could not write the acknowledgement mark (${(err as Error).message}); tail-loss detection is off until the next open`,
      });
    }
  }

  close(): void {
    closeSync(this.#fd);
  }
}
