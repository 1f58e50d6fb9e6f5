#!/usr/bin/env node
/**
 * The `tidal` command. `tidal serve --help` lists the flags. Exit codes: 0 after a clean shutdown,
 * 2 for a bad flag or value (one line on stderr), 1 for any other failure to start.
 */

import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Registry } from 'prom-client';
import { InvalidInputError, TidalDb, type SchemaDefinition } from 'tidal-core';
import { HELP, admissionOptions, isLoopback, parseServeArgs, resolveWorkerNice, type ServeConfig } from './config.js';
import { createDashboard } from './dashboard/dashboard.js';
import { loadDemo } from './demo/load.js';
import { tidalSchema } from './demo/corpus.js';
import { createSharedAdmissionChain } from './admission/shared-limits.js';
import { KeyRing } from './keys.js';
import { openFleet } from './admission/shared-fleet.js';
import { createServer } from './server.js';
import { handleShutdown } from './shutdown.js';

const USAGE_EXIT = 2;

class UsageError extends Error {}

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

async function serve(config: ServeConfig): Promise<void> {
  if (!isLoopback(config.host) && config.keys === undefined) {
    throw new UsageError(`--keys is required when --host is not a loopback address (got ${config.host}): anyone who can reach it could write`);
  }
  const keys = config.keys === undefined ? undefined : KeyRing.fromFile(config.keys);
  const schema = config.demo ? tidalSchema(128) : readSchema(config.schema!);
  const registry = new Registry();
  let builder = TidalDb.builder().schema(schema as SchemaDefinition).metrics(registry);
  builder = config.demo ? builder.ephemeral() : builder.path(config.path!);
  if (config.workers !== undefined) builder = builder.workers(config.workers);
  builder = builder.workerNice(resolveWorkerNice(config.workerNice, availableParallelism()));
  const fleet = await openFleet(config, (line) => process.stderr.write(`tidal serve: ${line}\n`));
  if (fleet.embedder !== undefined) builder = builder.embedder(fleet.embedder);
  let db: Awaited<ReturnType<typeof builder.open>>;
  try {
    db = await builder.open();
  } catch (err) {
    await fleet.close();
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
          process.stderr.write(`tidal serve: loading the demo corpus: ${phase} ${done}/${total}\n`);
          if (done === total) shown = -1;
        },
      });
    }
    // tidal-core's default worker count is the number of cores (at most 64).
    const pool = { workers: config.workers ?? Math.min(64, availableParallelism()), admissionLimit: db.load.admissionLimit, noDiversityAt: db.load.thresholds.noDiversity };
    const admission = config.admission ? admissionOptions(config, pool, keys !== undefined) : false;
    const server = createServer({
      db,
      admission: admission === false || fleet.shared === undefined ? admission : createSharedAdmissionChain(admission, Date.now, fleet.shared),
      fleetStats: () => fleet.stats(),
      onClose: () => fleet.close(),
      ...(keys === undefined ? {} : { keys }),
      timeoutMs: config.timeoutMs,
      bodyLimitBytes: config.bodyLimitBytes,
      registry,
      closeDb: true,
      dashboard: (deps) => createDashboard(deps),
    });
    const url = await server.listen(config.port, config.host, config.backlog);
    handleShutdown(server, { drainMs: config.drainMs });
    process.stdout.write(`tidal serve listening on ${url}\n`);
  } catch (err) {
    await db.close().catch(() => {});
    await fleet.close();
    throw err;
  }
}

async function main(argv: readonly string[]): Promise<void> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(`usage: tidal serve [flags]   (tidal serve --help lists them)\n`);
    if (command === undefined) process.exitCode = USAGE_EXIT;
    return;
  }
  if (command !== 'serve') throw new UsageError(`unknown command ${JSON.stringify(command)}; the command is: tidal serve (see tidal serve --help)`);
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
