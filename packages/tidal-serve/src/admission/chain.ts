import { InvalidInputError } from 'tidal-core';
import { createAdaptiveLimit, createAdaptiveLimitInSharedMemory } from './adaptive-limit.js';
import { NOT_SERVED, checkInteger, checkObject } from './errors.js';
import { createInFlightCap, createInFlightCapInSharedMemory } from './inflight-cap.js';
import { createPeriodLimit, createPeriodLimitInSharedMemory } from './period-limit.js';
import { createPermitPool, createPermitPoolInSharedMemory } from './permit-pool.js';
import { makeSharedState, openSharedState, type SharedAdmissionState, type SharedView } from './shared-memory.js';
import { createTenantLimiter, createTenantLimiterInSharedMemory } from './tenant-limiter.js';
import type {
  AdmissionChain,
  AdmissionOptions,
  AdmissionStage,
  Clock,
  Outcome,
  Refusal,
  RequestInfo,
  StageStats,
  Ticket,
} from './types.js';

const ADMIT_ALL: Ticket = Object.freeze({ admitted: true as const, headers: undefined, release(): void {} });

/** The chain, with its stages in order (for `/stats` and tests). */
export interface BuiltAdmissionChain extends AdmissionChain {
  readonly stages: readonly AdmissionStage[];
}

/** Releases every stage's ticket, last stage first, the first time it is released. */
class ChainTicket implements Ticket {
  readonly admitted = true as const;
  readonly headers: Readonly<Record<string, string>> | undefined;
  #tickets: Ticket[] | null;

  constructor(tickets: Ticket[], headers: Readonly<Record<string, string>> | undefined) {
    this.#tickets = tickets;
    this.headers = headers;
  }

  release(outcome: Outcome): void {
    const tickets = this.#tickets;
    if (tickets === null) return;
    this.#tickets = null;
    for (let i = tickets.length - 1; i >= 0; i--) tickets[i]!.release(outcome);
  }
}

/**
 * Runs `stages` in order: the first refusal is the answer, the tickets the earlier stages granted
 * are released unserved at once, and no later stage is asked. Admitted, the ticket releases every
 * stage's ticket once.
 */
export function composeAdmissionStages(stages: readonly AdmissionStage[]): BuiltAdmissionChain {
  const list = Object.freeze([...stages]);
  const n = list.length;
  return {
    stages: list,
    admit(request: RequestInfo, nowMs: number): Ticket | Refusal {
      if (n === 0) return ADMIT_ALL;
      if (n === 1) return list[0]!.admit(request, nowMs);
      const tickets = new Array<Ticket>(n);
      let headers: Readonly<Record<string, string>> | undefined;
      for (let i = 0; i < n; i++) {
        const r = list[i]!.admit(request, nowMs);
        if (!r.admitted) {
          for (let j = i - 1; j >= 0; j--) tickets[j]!.release(NOT_SERVED);
          return r;
        }
        tickets[i] = r;
        if (r.headers !== undefined) headers = headers === undefined ? r.headers : { ...headers, ...r.headers };
      }
      return new ChainTicket(tickets, headers);
    },
    stats(): StageStats[] {
      return list.map((s) => s.stats());
    },
  };
}

/** Options of {@link createAdmissionChain} beyond the settings. */
export interface ChainBuildOptions {
  /**
   * Keep every stage's state in this shared memory (from {@link createSharedAdmissionState} with the
   * same settings), so chains built over it in several threads decide as one server. Without it the
   * chain's state is this thread's own.
   */
  readonly shared?: SharedAdmissionState;
}

/**
 * Builds the admission chain from its settings: the enabled stages in the order in-flight cap (with
 * its rate bound) →
 * adaptive limit → tenant limiter → permit pools → period limit, cheapest and broadest first. A
 * request refused by one stage never reaches the next.
 *
 * @param clock - the adaptive limit reads it when tickets are released; `admit` takes the time as
 *   an argument. Chains over one shared state need clocks that agree (`Date.now` in every thread).
 * @throws {@link InvalidInputError} for any bad setting, naming it (`options.inFlightCap`,
 *   `options.adaptive.backoff`, ...), before anything is built: a safety setting never falls back;
 *   and for a `shared` state made from other settings.
 */
export function createAdmissionChain(options: AdmissionOptions, clock: Clock, build: ChainBuildOptions = {}): BuiltAdmissionChain {
  const o = checkObject('options', options);
  if (typeof clock !== 'function') throw new InvalidInputError('clock', 'a function returning milliseconds', clock);
  const view: SharedView | undefined = build.shared === undefined ? undefined : openSharedState(build.shared, options, clock);
  const cap = checkInteger('options.inFlightCap', o.inFlightCap, 0);
  const stages: AdmissionStage[] = [];
  const rateBound = (o.rateBound ?? false) as AdmissionOptions['rateBound'];
  // The cap is the rate bound's ceiling: a measured rate alone would let memory grow with it.
  if (rateBound !== false && cap === 0)
    throw new InvalidInputError('options.inFlightCap', 'a whole number ≥ 1 when options.rateBound is on (it is its ceiling)', cap);
  if (cap > 0) stages.push(view === undefined ? createInFlightCap(cap, rateBound) : createInFlightCapInSharedMemory(view, cap, rateBound));
  if (o.adaptive !== false) {
    if (o.adaptive === undefined) throw new InvalidInputError('options.adaptive', 'false or the adaptive settings', o.adaptive);
    // The cap is the adaptive limit's ceiling: without one, additive increase would never stop.
    if (cap === 0)
      throw new InvalidInputError(
        'options.inFlightCap',
        'a whole number ≥ 1 when options.adaptive is on (it is the adaptive ceiling)',
        cap,
      );
    const adaptive = { ...(checkObject('options.adaptive', o.adaptive) as Exclude<AdmissionOptions['adaptive'], false>), cap };
    stages.push(view === undefined ? createAdaptiveLimit(adaptive, clock) : createAdaptiveLimitInSharedMemory(adaptive, clock, view));
  }
  if (o.tenants !== false) {
    if (o.tenants === undefined) throw new InvalidInputError('options.tenants', 'false or the tenant settings', o.tenants);
    const tenants = o.tenants as Exclude<AdmissionOptions['tenants'], false>;
    stages.push(view === undefined ? createTenantLimiter(tenants) : createTenantLimiterInSharedMemory(tenants, view));
  }
  const permits = checkObject('options.permits', o.permits) as AdmissionOptions['permits'];
  if (Object.keys(permits).length > 0)
    stages.push(view === undefined ? createPermitPool(permits) : createPermitPoolInSharedMemory(view, permits));
  if (o.period !== false) {
    if (o.period === undefined) throw new InvalidInputError('options.period', 'false or the period settings', o.period);
    const period = o.period as Exclude<AdmissionOptions['period'], false>;
    stages.push(view === undefined ? createPeriodLimit(period) : createPeriodLimitInSharedMemory(period, view));
  }
  return composeAdmissionStages(stages);
}

/**
 * The chain's state in shared memory, made once (on the thread that starts the others) for
 * `options`: a plain object of one `SharedArrayBuffer` and numbers, which `postMessage` and
 * `workerData` copy by reference to the same memory. Build each thread's chain with
 * `createAdmissionChain(options, clock, { shared })` and the same options.
 *
 * Its tables take 52 bytes an entry, for the power of two at or above twice the keys they hold:
 * 1.7 MB for the CLI's 10 000 tenants, 13.6 MB for the period limit's default 100 000 keys.
 *
 * @throws {@link InvalidInputError} for any bad setting, as `createAdmissionChain`.
 */
export function createSharedAdmissionState(options: AdmissionOptions): SharedAdmissionState {
  return makeSharedState(options, (o) => {
    createAdmissionChain(o, () => 0);
  });
}
