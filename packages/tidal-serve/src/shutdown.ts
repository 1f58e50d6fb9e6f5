import type { TidalServer } from './server.js';

/** Settings of {@link handleShutdown}. */
export interface ShutdownOptions {
  /** How long in-flight requests may take to finish. */
  readonly drainMs: number;
  /** Where the one-line notes go. @default stderr */
  readonly log?: (line: string) => void;
  /** Called with the exit code once the server (and its database) closed. @default process.exit */
  readonly exit?: (code: number) => void;
}

/**
 * On the first SIGTERM or SIGINT: stop accepting, turn `/readyz` to 503, drain in-flight requests
 * within `drainMs`, close the database, exit 0 (1 when closing failed). A second signal during the
 * drain exits 1 at once: whoever sends it has stopped waiting. Returns a function that removes the
 * handlers.
 */
export function handleShutdown(server: Pick<TidalServer, 'inFlight' | 'close'>, options: ShutdownOptions): () => void {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals): void => {
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
  return () => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  };
}
