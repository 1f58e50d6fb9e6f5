import { DrainMeter, OnceTicket, checkInteger, checkObject, refuse } from './errors.js';
import { PERMIT_CELLS, SharedDrainMeter, type SharedView } from './shared-memory.js';
import type { AdmissionStage, Outcome, Refusal, RequestInfo, StageStats, Ticket } from './types.js';

/** One route's pool, as `routeStats` reports it. */
export interface RoutePermitStats {
  readonly limit: number;
  readonly inFlight: number;
  readonly admitted: number;
  readonly rejected: number;
}

/** The permit pools, with per-route counters. */
export interface PermitPoolStage extends AdmissionStage {
  readonly name: 'permits';
  /** Each pooled route's counters, by route name. */
  routeStats(): Record<string, RoutePermitStats>;
}

class RoutePool {
  readonly route: string;
  readonly max: number;
  readonly message: string;
  readonly drain = new DrainMeter();
  inFlight = 0;
  admitted = 0;
  rejected = 0;

  constructor(route: string, max: number) {
    this.route = route;
    this.max = max;
    this.message = `all ${max} permits of route ${route} are taken; retry after x-retry-after-ms`;
  }

  onRelease(_ticket: OnceTicket, outcome: Outcome): void {
    // Exactly once per ticket (OnceTicket), so the count can neither leak nor go below zero,
    // whatever order the requests end in.
    this.inFlight--;
    if (outcome.served !== false) this.drain.record(outcome.latencyMs);
  }
}

/** A route without a pool holds nothing: one shared ticket whose release does nothing. */
const UNPOOLED: Ticket = Object.freeze({ admitted: true as const, headers: undefined, release(): void {} });

class PermitPool implements PermitPoolStage {
  readonly name = 'permits' as const;
  readonly #pools: ReadonlyMap<string, RoutePool>;
  readonly #total: number;

  constructor(pools: ReadonlyMap<string, RoutePool>) {
    this.#pools = pools;
    let total = 0;
    for (const p of pools.values()) total += p.max;
    this.#total = total;
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    const pool = this.#pools.get(request.route);
    if (pool === undefined) return UNPOOLED;
    // try_acquire: never waits.
    if (pool.inFlight >= pool.max) {
      pool.rejected++;
      // As the cap: the pool's turnover, not one permit's (which the next arrival takes).
      return refuse('permits', pool.drain.holdMs(nowMs), pool.message);
    }
    pool.inFlight++;
    pool.admitted++;
    pool.drain.admitted(nowMs);
    return new OnceTicket(pool, nowMs);
  }

  routeStats(): Record<string, RoutePermitStats> {
    const out: Record<string, RoutePermitStats> = {};
    for (const p of this.#pools.values()) out[p.route] = { limit: p.max, inFlight: p.inFlight, admitted: p.admitted, rejected: p.rejected };
    return out;
  }

  stats(): StageStats {
    let inFlight = 0;
    let admitted = 0;
    let rejected = 0;
    for (const p of this.#pools.values()) {
      inFlight += p.inFlight;
      admitted += p.admitted;
      rejected += p.rejected;
    }
    return { name: 'permits', limit: this.#total, inFlight, admitted, rejected, tracked: this.#pools.size };
  }
}

/**
 * Stage 5: a permit pool per route (`{ retrieve: 16 }`): a request on a pooled route takes a permit
 * if one is free and never waits for one; all taken → a 503 `TIDAL_SERVE_PERMITS` whose
 * `retryAfterMs` is the route's measured mean time a request holds a permit (the pool's turnover). Routes not
 * named have no pool. The permit comes back when the ticket is released, once, however the request
 * ended (the server releases on the response's `close`, which fires for aborts too).
 *
 * @param permits - route name → a whole number of permits ≥ 1.
 * @throws {@link InvalidInputError} naming `options.permits.<route>`.
 */
export function createPermitPool(permits: Readonly<Record<string, number>>): PermitPoolStage {
  const o = checkObject('options.permits', permits);
  const pools = new Map<string, RoutePool>();
  for (const [route, n] of Object.entries(o)) pools.set(route, new RoutePool(route, checkInteger(`options.permits.${route}`, n, 1)));
  return new PermitPool(pools);
}

/** One route's pool over shared cells. */
class SharedRoutePool {
  readonly route: string;
  readonly max: number;
  readonly message: string;
  readonly cells: Int32Array;
  readonly at: number;
  readonly drain: SharedDrainMeter;

  constructor(view: SharedView, index: number, route: string, max: number) {
    this.route = route;
    this.max = max;
    this.message = `all ${max} permits of route ${route} are taken; retry after x-retry-after-ms`;
    this.cells = view.cells;
    this.at = view.layout.permits + index * PERMIT_CELLS.size;
    this.drain = new SharedDrainMeter(view, this.at + PERMIT_CELLS.drain);
  }

  onRelease(_ticket: OnceTicket, outcome: Outcome): void {
    Atomics.sub(this.cells, this.at + PERMIT_CELLS.inFlight, 1);
    if (outcome.served !== false) this.drain.record(outcome.latencyMs);
  }

  stats(): RoutePermitStats {
    const c = this.cells;
    return {
      limit: this.max,
      inFlight: Atomics.load(c, this.at),
      admitted: Atomics.load(c, this.at + PERMIT_CELLS.admitted),
      rejected: Atomics.load(c, this.at + PERMIT_CELLS.rejected),
    };
  }
}

class SharedPermitPool implements PermitPoolStage {
  readonly name = 'permits' as const;
  readonly #pools: ReadonlyMap<string, SharedRoutePool>;
  readonly #total: number;

  constructor(pools: ReadonlyMap<string, SharedRoutePool>) {
    this.#pools = pools;
    let total = 0;
    for (const p of pools.values()) total += p.max;
    this.#total = total;
  }

  admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
    const pool = this.#pools.get(request.route);
    if (pool === undefined) return UNPOOLED;
    const c = pool.cells;
    if (Atomics.add(c, pool.at + PERMIT_CELLS.inFlight, 1) >= pool.max) {
      Atomics.sub(c, pool.at + PERMIT_CELLS.inFlight, 1);
      Atomics.add(c, pool.at + PERMIT_CELLS.rejected, 1);
      return refuse('permits', pool.drain.holdMs(nowMs), pool.message);
    }
    Atomics.add(c, pool.at + PERMIT_CELLS.admitted, 1);
    pool.drain.admitted(nowMs);
    return new OnceTicket(pool, nowMs);
  }

  routeStats(): Record<string, RoutePermitStats> {
    const out: Record<string, RoutePermitStats> = {};
    for (const p of this.#pools.values()) out[p.route] = p.stats();
    return out;
  }

  stats(): StageStats {
    let inFlight = 0;
    let admitted = 0;
    let rejected = 0;
    for (const p of this.#pools.values()) {
      const s = p.stats();
      inFlight += s.inFlight;
      admitted += s.admitted;
      rejected += s.rejected;
    }
    return { name: 'permits', limit: this.#total, inFlight, admitted, rejected, tracked: this.#pools.size };
  }
}

/** {@link createPermitPool} over a shared state's cells: a route's cells are its place in `permits`. */
export function createPermitPoolInSharedMemory(view: SharedView, permits: Readonly<Record<string, number>>): PermitPoolStage {
  const o = checkObject('options.permits', permits);
  const pools = new Map<string, SharedRoutePool>();
  let i = 0;
  for (const [route, n] of Object.entries(o))
    pools.set(route, new SharedRoutePool(view, i++, route, checkInteger(`options.permits.${route}`, n, 1)));
  return new SharedPermitPool(pools);
}
