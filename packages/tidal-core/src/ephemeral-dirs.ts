/**
 * The directories of the ephemeral databases this process has open. `close()` deletes its own; a
 * process that exits without closing (`process.exit`, an uncaught exception) deletes the rest in its
 * `exit` event, synchronously, as that event requires. A process killed by a signal runs no
 * handler: its directories stay in the temporary directory.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const open = new Set<string>();
let listening = false;

function removeAll(): void {
  for (const dir of open) rmSync(dir, { recursive: true, force: true });
  open.clear();
}

/** A new temporary directory, deleted when the process exits unless {@link removeEphemeralDir} came first. */
export function createEphemeralDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-'));
  open.add(dir);
  if (!listening) {
    listening = true;
    process.once('exit', removeAll);
  }
  return dir;
}

/** Deletes an ephemeral database's directory now (its database closed, or failed to open). */
export function removeEphemeralDir(dir: string): void {
  open.delete(dir);
  rmSync(dir, { recursive: true, force: true });
}
