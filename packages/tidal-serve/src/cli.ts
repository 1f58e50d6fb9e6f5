#!/usr/bin/env node
/**
 * The `tidal` command. `tidal serve --help` lists the flags. Exit codes: 0 after a clean shutdown,
 * 2 for a bad flag or value (one line on stderr), 1 for any other failure to start.
 */

import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { join, resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Registry } from 'prom-client';
import { DEFAULT_THRESHOLDS, InvalidInputError, TidalDb, autoAdmissionLimit, type SchemaDefinition } from 'tidal-core';
import { HELP, admissionOptions, isLoopback, parseServeArgs, resolveAcceptors, resolveWorkerNice, type ServeConfig } from './config.js';
import {
  ACCEPTOR_MODULE,
  acceptorData,
  openChannels,
  probePort,
  reusePortSupport,
  startAcceptors,
  type Acceptors,
} from './acceptor/acceptors.js';
import type { AcceptorData } from './acceptor/protocol.js';
import { createDashboard } from './dashboard/dashboard.js';
import { loadDemo } from './demo/load.js';
import { tidalSchema } from './demo/corpus.js';
import { createSharedAdmissionChain } from './admission/shared-limits.js';
import { createAdmissionChain, createSharedAdmissionState } from './admission/chain.js';
import { KeyRing } from './keys.js';
import { loadFleetModule, openFleetParts } from './fleet-loader.js';
import { createServer, type RoutesPlugin } from './server.js';
import { handleShutdown } from './shutdown.js';

const USAGE_EXIT = 2;

class UsageError extends Error {}

function noStoredSchema(path: string): InvalidInputError {
  return new InvalidInputError('--schema', `given: ${path} holds no database with a stored schema yet`, undefined);
}

function readSchema(path: string): SchemaDefinition {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new InvalidInputError('--schema', `a readable file (${(err as Error).message})`, path);
  }
  try {
    return JSON.parse(text) as SchemaDefinition;
  } catch (err) {
    throw new InvalidInputError('--schema', `a JSON file (${(err as Error).message})`, path);
  }
}

/** A `--routes` module's default export, resolved from the working directory. */
async function loadRoutes(file: string): Promise<RoutesPlugin> {
  const url = pathToFileURL(resolvePath(file)).href;
  let mod: { default?: unknown };
  try {
    mod = (await import(url)) as { default?: unknown };
  } catch (err) {
    throw new InvalidInputError('--routes', `a module that loads (${(err as Error).message})`, file);
  }
  if (typeof mod.default !== 'function')
    throw new InvalidInputError('--routes', 'a module whose default export is a fastify plugin function', file);
  return mod.default as RoutesPlugin;
}

async function serve(config: ServeConfig): Promise<void> {
  if (!isLoopback(config.host) && config.keys === undefined) {
    throw new UsageError(
      `--keys is required when --host is not a loopback address (got ${config.host}): anyone who can reach it could write`,
    );
  }
  const log = (line: string) => process.stderr.write(`tidal serve: ${line}\n`);
  const keys = config.keys === undefined ? undefined : KeyRing.fromFile(config.keys);
  // Left out on a --path that already holds a database: the schema stored there. The demo names its
  // items' creator, so follows, blocks and `following` work on it.
  const schema = config.demo
    ? { ...tidalSchema(128), creatorField: 'creator' }
    : config.schema === undefined
      ? undefined
      : readSchema(config.schema);
  if (!config.demo && schema === undefined && !existsSync(join(config.path!, 'tidal.db'))) throw noStoredSchema(config.path!);
  const routes = config.routes === undefined ? undefined : await loadRoutes(config.routes);
  // Before anything opens: a missing tidal-fleet is a setup error, said at once.
  const fleetModule = await loadFleetModule(config);
  const workers = config.workers ?? Math.min(64, availableParallelism());
  const plan = resolveAcceptors(config, workers, reusePortSupport());
  const registry = new Registry();
  let builder = TidalDb.builder().metrics(registry);
  if (schema !== undefined) builder = builder.schema(schema);
  builder = config.demo ? builder.ephemeral() : builder.path(config.path!);
  if (config.workers !== undefined) builder = builder.workers(config.workers);
  if (config.workerYoungGenerationMb !== undefined) builder = builder.workerYoungGenerationMb(config.workerYoungGenerationMb);
  // A worker that is also an acceptor answers HTTP itself: lowering it below the main thread (the
  // single-acceptor default) would only slow its own answers.
  builder = builder.workerNice(
    plan.threads > 0 && config.workerNice === 'auto' ? 0 : resolveWorkerNice(config.workerNice, availableParallelism()),
  );
  // With acceptor threads: the port they share (probed now, so a platform that cannot says so
  // before the database opens), and the settings each acceptor gets as the workers' module.
  let threaded: { data: AcceptorData; channels: ReturnType<typeof openChannels> } | undefined;
  let sharedChain: ReturnType<typeof createAdmissionChain> | undefined;
  if (plan.threads > 0) {
    const port = await probePort(config.port, config.host);
    const admissionLimit = autoAdmissionLimit(DEFAULT_THRESHOLDS, workers);
    const chainOptions = config.admission
      ? admissionOptions(config, { workers, admissionLimit, noDiversityAt: DEFAULT_THRESHOLDS.noDiversity }, keys !== undefined)
      : false;
    const data = acceptorData({
      port,
      host: config.host,
      backlog: config.backlog,
      acceptors: plan.threads,
      admission: chainOptions,
      ...(chainOptions === false ? {} : { admissionState: createSharedAdmissionState(chainOptions) }),
      ...(config.keys === undefined ? {} : { keysFile: resolvePath(config.keys) }),
      timeoutMs: config.timeoutMs,
      bodyLimitBytes: config.bodyLimitBytes,
      readyRequiresAnn: config.waitForAnn,
      ...(config.routes === undefined ? {} : { routes: pathToFileURL(resolvePath(config.routes)).href }),
    });
    threaded = { data, channels: openChannels(data) };
    // The main thread's listener admits over the same shared state: /stats and /metrics read the
    // whole server's stages, and a request it takes counts with the acceptors'.
    if (chainOptions !== false) sharedChain = createAdmissionChain(chainOptions, Date.now, { shared: data.admissionState! });
    builder = builder.workerModule(ACCEPTOR_MODULE, data);
  } else if (config.acceptors === 'auto') {
    log(`one acceptor, the main thread (${'why' in plan ? plan.why : ''})`);
  }
  const { fleet, replication } = await openFleetParts(fleetModule, config, log, registry);
  if (fleet.embedder !== undefined) builder = builder.embedder(fleet.embedder);
  if (replication !== undefined) builder = builder.replication(replication);
  let db: Awaited<ReturnType<typeof builder.open>>;
  try {
    db = await builder.open();
  } catch (err) {
    threaded?.channels.forEach((c) => (c.up.close(), c.down.close()));
    await fleet.close();
    if (schema === undefined && InvalidInputError.is(err) && err.field === 'schema') throw noStoredSchema(config.path!);
    throw err;
  }
  try {
    if (config.demo) {
      let shown = -1;
      await loadDemo(db, {
        items: config.demoItems,
        onProgress: ({ phase, done, total }) => {
          const pct = Math.floor((done / total) * 10) * 10;
          if (pct === shown && done !== total) return;
          shown = pct;
          log(`loading the demo corpus: ${phase} ${done}/${total}`);
          if (done === total) shown = -1;
        },
      });
    }
    const pool = { workers, admissionLimit: db.load.admissionLimit, noDiversityAt: db.load.thresholds.noDiversity };
    const admission = config.admission ? admissionOptions(config, pool, keys !== undefined) : false;
    // Read by the server's callbacks from listen() on, before startAcceptors() below resolves: undefined until then.
    let acceptors: Acceptors | undefined; // eslint-disable-line prefer-const -- see above
    const server = createServer({
      db,
      admission:
        threaded !== undefined
          ? (sharedChain ?? false)
          : admission === false
            ? false
            : fleet.shared === undefined
              ? admission
              : createSharedAdmissionChain(admission, Date.now, fleet.shared),
      fleetStats: () => fleet.stats(),
      onClose: () => fleet.close(),
      ...(keys === undefined ? {} : { keys }),
      timeoutMs: config.timeoutMs,
      bodyLimitBytes: config.bodyLimitBytes,
      readyRequiresAnn: config.waitForAnn,
      registry,
      closeDb: true,
      dashboard: (deps) => createDashboard(deps),
      ...(routes === undefined ? {} : { routes }),
      ...(threaded === undefined
        ? {}
        : {
            acceptorsInFlight: () => acceptors?.inFlightByAcceptor ?? new Map<number, number>(),
            acceptorStages: () => acceptors?.stages.values() ?? [],
            acceptorStats: () =>
              [...(acceptors?.counts.entries() ?? [])].map(([index, c]) => ({
                index,
                ...c,
                inFlight: acceptors?.inFlightByAcceptor.get(index) ?? 0,
              })),
          }),
    });
    if (threaded === undefined) {
      const url = await server.listen(config.port, config.host, config.backlog);
      handleShutdown(server, { drainMs: config.drainMs, ...(config.parentCheck ? {} : { parentCheckMs: 0 }) });
      process.stdout.write(`tidal serve listening on ${url}\n`);
      return;
    }
    const adminUrl = await server.listen(config.adminPort ?? 0, config.host, config.backlog);
    acceptors = await startAcceptors(threaded.channels, {
      data: threaded.data,
      admin: server,
      adminPort: Number(new URL(adminUrl).port),
      log,
    });
    log(`the main thread keeps the writer, metrics, dashboard and probes, also at ${adminUrl}`);
    const running = acceptors;
    handleShutdown(
      {
        get inFlight() {
          return running.inFlight;
        },
        async close(o) {
          await running.drain(o?.drainMs ?? config.drainMs);
          running.close();
          await server.close({ drainMs: 0 });
        },
      },
      { drainMs: config.drainMs, ...(config.parentCheck ? {} : { parentCheckMs: 0 }) },
    );
    process.stdout.write(
      `tidal serve listening on http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${threaded.data.port}\n`,
    );
  } catch (err) {
    await db.close().catch(() => {});
    await fleet.close();
    throw err;
  }
}

/** `tidal --version`: this package's version, tidal-core's it runs on, and Node's. */
function versionLine(): string {
  const require = createRequire(import.meta.url);
  const own = require('../package.json') as { version: string };
  const core = require('tidal-core/package.json') as { version: string };
  return `tidal-serve ${own.version} (tidal-core ${core.version}, Node ${process.version})`;
}

async function main(argv: readonly string[]): Promise<void> {
  const [command, ...rest] = argv;
  if (command === '--version' || command === '-v' || command === 'version') {
    process.stdout.write(`${versionLine()}\n`);
    return;
  }
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(`usage: tidal serve [flags]   (tidal serve --help lists them); tidal --version\n`);
    if (command === undefined) process.exitCode = USAGE_EXIT;
    return;
  }
  if (command !== 'serve')
    throw new UsageError(`unknown command ${JSON.stringify(command)}; the command is: tidal serve (see tidal serve --help)`);
  const config = parseServeArgs(rest);
  if (config.help) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  await serve(config);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  if (err instanceof UsageError || InvalidInputError.is(err)) {
    process.stderr.write(`tidal serve: ${err.message}\n`);
    process.exit(USAGE_EXIT);
  }
  process.stderr.write(`tidal serve: failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
