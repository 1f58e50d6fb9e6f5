/**
 * The admission chain as a fastify plugin, for an application that keeps its own fastify server
 * and embeds tidal: the chain runs at `onRequest` (before the body is read), a refusal is written
 * there exactly as `tidal serve` writes it (status, `Retry-After`, `x-retry-after-ms`, the stage's
 * headers, the JSON body: `refusal.ts`), and an admitted request's ticket is released once, when
 * its response closes, however it ended (a client that went away included).
 */
import type { FastifyInstance, FastifyPluginCallback, FastifyReply, FastifyRequest } from 'fastify';
import { InvalidInputError } from 'tidal-core';
import { routeName } from '../routes.js';
import { createAdmissionChain } from './chain.js';
import { checkObject } from './errors.js';
import { JSON_TYPE, refusalBody, refusalHeaders, refusalSendsDate } from './refusal.js';
import type { SharedAdmissionState } from './shared-memory.js';
import type { AdmissionChain, AdmissionOptions, Clock, Tier } from './types.js';

/** Options of {@link tidalAdmission}. */
export interface TidalAdmissionOptions {
  /** The chain, or its settings (the plugin builds it with `createAdmissionChain`). */
  readonly admission: AdmissionOptions | AdmissionChain;
  /** The route's name for the chain. @default `tidal serve`'s names from the method and path (`retrieve`, `signals`, ..., `other`) */
  readonly route?: (req: FastifyRequest) => string;
  /** Who the request is for. @default `{ tenant: 'anonymous', tier: 'free' }` */
  readonly tenant?: (req: FastifyRequest) => { readonly tenant: string; readonly tier: Tier };
  /** Requests the chain never sees (probes, scrapes). @default none */
  readonly exempt?: (req: FastifyRequest) => boolean;
  /** @default Date.now */
  readonly clock?: Clock;
  /** With settings: build the chain over this shared state (`createSharedAdmissionState`). */
  readonly shared?: SharedAdmissionState;
}

const ANONYMOUS = Object.freeze({ tenant: 'anonymous', tier: 'free' });
/** Status 499 (nginx's "client closed request"), as the server records an aborted request. */
const CLIENT_CLOSED = 499;

function defaultRoute(req: FastifyRequest): string {
  const url = req.url;
  const q = url.indexOf('?');
  return routeName(req.method, q === -1 ? url : url.slice(0, q));
}

/**
 * Registers the admission chain on a fastify instance: `app.register(tidalAdmission, { admission })`.
 * It applies to the instance it is registered on and everything registered after it (it does not
 * get a scope of its own, as `fastify-plugin` would arrange).
 *
 * @throws {@link InvalidInputError} (through `register`'s callback) for bad options or settings.
 */
export const tidalAdmission: FastifyPluginCallback<TidalAdmissionOptions> = (
  app: FastifyInstance,
  options: TidalAdmissionOptions,
  done: (err?: Error) => void,
): void => {
  let chain: AdmissionChain;
  let clock: Clock;
  try {
    const o = checkObject('options', options);
    clock = (o.clock as Clock | undefined) ?? Date.now;
    if (typeof clock !== 'function') throw new InvalidInputError('options.clock', 'a function returning milliseconds', clock);
    for (const fn of ['route', 'tenant', 'exempt'] as const) {
      if (o[fn] !== undefined && typeof o[fn] !== 'function')
        throw new InvalidInputError(`options.${fn}`, 'a function of the request', o[fn]);
    }
    const admission = checkObject('options.admission', o.admission) as unknown as AdmissionOptions | AdmissionChain;
    chain =
      'admit' in admission
        ? admission
        : createAdmissionChain(admission, clock, options.shared === undefined ? {} : { shared: options.shared });
  } catch (err) {
    done(err as Error);
    return;
  }
  const route = options.route ?? defaultRoute;
  const tenantOf = options.tenant ?? (() => ANONYMOUS);
  const exempt = options.exempt;

  app.addHook('onRequest', (req: FastifyRequest, reply: FastifyReply, next: (err?: Error) => void) => {
    if (exempt?.(req) === true) {
      next();
      return;
    }
    const who = tenantOf(req);
    const start = clock();
    const answer = chain.admit({ route: route(req), tenant: who.tenant, tier: who.tier }, start);
    if (!answer.admitted) {
      const list = refusalHeaders(answer);
      const headers: Record<string, string> = {};
      for (let i = 0; i < list.length; i += 2) headers[list[i]!] = list[i + 1]!;
      reply.raw.sendDate = refusalSendsDate(answer);
      // Answered from the hook: fastify skips the body and the handler; `next` is not called.
      void reply.code(answer.status).headers(headers).type(JSON_TYPE).send(refusalBody(answer));
      return;
    }
    if (answer.headers !== undefined) void reply.headers(answer.headers);
    const res = reply.raw;
    // 'close' fires once, however the response ends; the ticket is released there, once.
    res.once('close', () => {
      const status = res.writableFinished ? res.statusCode : CLIENT_CLOSED;
      answer.release({ latencyMs: clock() - start, ok: status !== 500 && status !== 503 && status !== 504 });
    });
    next();
  });
  done();
};

// What fastify-plugin marks a plugin with: registered without a scope of its own, so the hook
// applies to the instance it is registered on.
Object.defineProperty(tidalAdmission, Symbol.for('skip-override'), { value: true });
Object.defineProperty(tidalAdmission, Symbol.for('fastify.display-name'), { value: 'tidal-admission' });
