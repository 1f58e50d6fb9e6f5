/**
 * tidal-fleet (and with it the Redis and PostgreSQL clients) is an optional peer of tidal-serve:
 * only `--redis`, `--replicate` and `--embedder` need it, so the module that imports it is loaded
 * when one of them is given, and a server without them starts with tidal-fleet not installed.
 */
import type { Registry } from 'prom-client';
import { MissingPackageError, type ReplicationLink } from 'tidal-core';
import type { ServeConfig } from './config.js';
import type { Fleet } from './admission/shared-fleet.js';

/** What `tidal serve` holds for the fleet: the connections, and the replication link with `--replicate`. */
export interface FleetParts {
  readonly fleet: Fleet;
  readonly replication: ReplicationLink | undefined;
}

/** A server with none of the fleet's flags: nothing shared, nothing to close. */
const NO_FLEET: Fleet = Object.freeze({
  shared: undefined,
  embedder: undefined,
  stats: () => ({}),
  close: () => Promise.resolve(),
});

type SharedFleetModule = typeof import('./admission/shared-fleet.js');

/** The first flag given that needs tidal-fleet, or `undefined`. */
export function fleetFlag(config: Pick<ServeConfig, 'redis' | 'replicate' | 'embedder'>): string | undefined {
  if (config.replicate) return '--replicate';
  if (config.redis !== undefined) return '--redis';
  if (config.embedder !== undefined) return '--embedder';
  return undefined;
}

/**
 * Loads the fleet module when a flag needs it. A missing package becomes a
 * {@link MissingPackageError} naming it and the flag, before anything is opened.
 * `load` is replaceable for tests.
 */
export async function loadFleetModule(
  config: Pick<ServeConfig, 'redis' | 'replicate' | 'embedder'>,
  load: () => Promise<SharedFleetModule> = () => import('./admission/shared-fleet.js'),
): Promise<SharedFleetModule | undefined> {
  const flag = fleetFlag(config);
  if (flag === undefined) return undefined;
  try {
    return await load();
  } catch (err) {
    const missing = missingPackage(err);
    if (missing === undefined) throw err;
    throw new MissingPackageError(missing, `tidal serve ${flag}`, 'is not installed', `npm install ${missing}`, { cause: err });
  }
}

/** Connects what the flags name, through a module {@link loadFleetModule} returned (none: nothing). */
export async function openFleetParts(
  module: SharedFleetModule | undefined,
  config: ServeConfig,
  log: (line: string) => void,
  registry: Registry,
): Promise<FleetParts> {
  if (module === undefined) return { fleet: NO_FLEET, replication: undefined };
  const fleet = await module.openFleet(config, log, registry);
  return { fleet, replication: config.replicate ? module.connectReplication(config.redis!) : undefined };
}

/** The package an `ERR_MODULE_NOT_FOUND` names, when it is a package (not a file) that is missing. */
function missingPackage(err: unknown): string | undefined {
  if ((err as { code?: unknown })?.code !== 'ERR_MODULE_NOT_FOUND') return undefined;
  return /Cannot find package '([^']+)'/.exec((err as Error).message)?.[1];
}
