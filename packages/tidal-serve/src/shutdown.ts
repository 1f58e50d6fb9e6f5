import type { TidalServer } from './server.js';

/** Settings of {@link handleShutdown}. */
export interface ShutdownOptions {
  /** How long in-flight requests may take to finish. */
  readonly drainMs: number;
  /** Where the one-line notes go. @default stderr */
  readonly log?: (line: string) => void;
  /** Called with the exit code once the server (and its database) closed. @default process.exit */
  readonly exit?: (code: number) => void;
  /**
   * How often to check that the parent process is still the one that started the server; when it
   * is gone (`process.ppid` changed: the child was re-parented), the server drains as on SIGTERM.
   * A launcher that exits on SIGTERM without passing it on (`npx`, `npm exec`, `npm run`) would
   * otherwise leave the server running, orphaned and listening. 0 turns the check off.
   * @default 1000
   */
  readonly parentCheckMs?: number;
  /** The parent's pid now. @default () => process.ppid */
  readonly parentPid?: () => number;
}

/** One `process.ppid` read a second: a drain starts at most a second after the launcher went away. */
const PARENT_CHECK_MS = 1_000;

/**
 * On the first SIGTERM or SIGINT, or when the parent process goes away: stop accepting, turn `/readyz` to 503, drain in-flight requests
 * within `drainMs`, close the database, exit 0 (1 when closing failed). A second signal during the
 * drain exits 1 at once: whoever sends it has stopped waiting. Returns a function that removes the
 * handlers.
 */
export function handleShutdown(server: Pick<TidalServer, 'inFlight' | 'close'>, options: ShutdownOptions): () => void {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let stopping = false;
  let parentTimer: NodeJS.Timeout | undefined;
  const onSignal = (signal: string): void => {
    clearInterval(parentTimer);
    if (stopping) {
      log(`tidal serve: ${signal} again, exiting without waiting`);
      exit(1);
      return;
    }
    stopping = true;
    log(`tidal serve: ${signal}, draining ${server.inFlight} in-flight requests (up to ${options.drainMs} ms)`);
    server.close({ drainMs: options.drainMs }).then(
      () => {
        log('tidal serve: closed');
        exit(0);
      },
      (err: unknown) => {
        log(`tidal serve: closing failed: ${err instanceof Error ? err.message : String(err)}`);
        exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const parentCheckMs = options.parentCheckMs ?? PARENT_CHECK_MS;
  if (parentCheckMs > 0) {
    const parentPid = options.parentPid ?? (() => process.ppid);
    const parent = parentPid();
    parentTimer = setInterval(() => {
      const now = parentPid();
      if (now !== parent) onSignal(`the parent process ${parent} is gone (now ${now})`);
    }, parentCheckMs).unref();
  }
  return () => {
    clearInterval(parentTimer);
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  };
}
