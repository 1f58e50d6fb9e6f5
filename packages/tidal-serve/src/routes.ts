import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import {
  InvalidInputError,
  levelName,
  type DegradationLevel,
  type Item,
  type RetrieveRequest,
  type SearchRequest,
  type SignalInput,
  type User,
} from 'tidal-core';
import { STAGE, stageEnd, stageStart } from 'tidal-load';
import { ServeError } from './errors.js';
import { contextOf } from './context.js';
import type { ServeDb } from './server.js';

/** What the routes need from the server. */
export interface RouteDeps {
  readonly db: ServeDb;
  /** A query's deadline without an `x-tidal-timeout-ms` header; 0 for none. */
  readonly defaultTimeoutMs: number;
  readonly ready: () => boolean;
  /** `/readyz` answers 503 while vector searches are exact (`tidal serve --wait-for-ann`). */
  readonly readyRequiresAnn: boolean;
  readonly stats: () => object | Promise<object>;
  readonly registry: Registry;
}

/** The header a request names its own deadline in, in milliseconds. */
export const TIMEOUT_HEADER = 'x-tidal-timeout-ms';
/** The header every successful query answer carries its degradation level in. */
export const LEVEL_HEADER = 'x-tidal-degradation-level';
const MAX_TIMEOUT_MS = 2_147_483_647;
const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * The chain's name for a request, from its method and path alone (the chain runs before routing).
 * Every route below maps to one of these; anything else is `other` (and ends as a 404).
 */
export function routeName(method: string, path: string): string {
  switch (path) {
    case '/retrieve':
      return 'retrieve';
    case '/search':
      return 'search';
    case '/signals':
      return 'signals';
    case '/items':
      return 'items';
    case '/sessions':
      return 'sessions';
    case '/users':
      return 'users';
  }
  if (path.startsWith('/items/')) return path.endsWith('/signals') && method === 'GET' ? 'item-signals' : 'items';
  if (path.startsWith('/sessions/')) return 'sessions';
  if (path.startsWith('/users/')) return 'users';
  return 'other';
}

function objectBody(body: unknown, field = 'body'): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new InvalidInputError(field, 'a JSON object', body);
  return body as Record<string, unknown>;
}

function agentOf(body: Record<string, unknown>): string {
  const agent = body.agent;
  if (typeof agent !== 'string' || agent.length === 0)
    throw new InvalidInputError('agent', "the session's agent id, a non-empty string", agent);
  return agent;
}

/** The request's deadline: its header, else the body's `timeoutMs`, else the server's default. */
function deadline(headers: IncomingHttpHeaders, body: Record<string, unknown>, fallback: number): number | undefined {
  const header = headers[TIMEOUT_HEADER];
  if (header !== undefined) {
    const text = Array.isArray(header) ? header[0] : header;
    const ms = /^[0-9]{1,10}$/.test(text ?? '') ? Number(text) : Number.NaN;
    if (!(ms >= 1 && ms <= MAX_TIMEOUT_MS)) {
      throw new InvalidInputError(TIMEOUT_HEADER, `a whole number of milliseconds from 1 to ${MAX_TIMEOUT_MS}`, text);
    }
    return ms;
  }
  if (body.timeoutMs !== undefined) return body.timeoutMs as number;
  return fallback > 0 ? fallback : undefined;
}

/**
 * Whether the answer carries `explain`: only when the body asks with `"explain": true`. Most
 * callers never read it, and it is a tenth of a search answer's bytes. Taken out of the body,
 * which becomes the query's request.
 */
function wantsExplain(body: Record<string, unknown>): boolean {
  const explain = body.explain;
  if (explain === undefined) return false;
  if (typeof explain !== 'boolean') throw new InvalidInputError('explain', 'true or false', explain);
  delete body.explain;
  return explain;
}

/** What a query's `run` answers: a retrieve's or a search's result. */
type QueryResultLike = { degradationLevel: DegradationLevel; explain: unknown };

/** A query's answer: its text and its length in bytes, or (profile `related`) the answer as an object. */
export type QueryAnswer = { readonly text: string; readonly length: number } | { readonly answer: Record<string, unknown> };

/**
 * Writes a query's answer on the raw response, as both paths do: 200, JSON, with its length. Past
 * fastify's reply, whose send measures the text itself and runs the hooks and checks an answer
 * goes through.
 */
export function writeAnswer(res: ServerResponse, a: QueryAnswer): void {
  const text = 'text' in a ? a.text : JSON.stringify(a.answer);
  const length = 'text' in a ? a.length : Buffer.byteLength(text);
  res.writeHead(200, ['content-type', JSON_TYPE, 'content-length', String(length)]);
  res.end(text);
}

/**
 * Runs a query from its parsed body, as both `POST /retrieve` and `/search` paths answer it (the
 * fastify route, and the server's own path for a body with a length). The deadline and the
 * client's disconnect become the query's timeoutMs and signal. The body was parsed for this
 * request alone and the result is built for this call alone, so both are completed in place
 * rather than copied.
 *
 * The query runs with `asJson`: its executor serializes the items (hits), which arrive here as one
 * string, and the answer is that string spliced into the rest of the result, measured in its flat
 * parts (measuring the joined text would copy it all into one string first, and the socket's
 * write copies it once more behind the response head). The level goes on the raw response, where
 * the server reads it back for the recorder when the response closes.
 */
export async function answerQuery(
  list: 'items' | 'hits',
  run: (request: Record<string, unknown>) => Promise<QueryResultLike>,
  rawBody: unknown,
  headers: IncomingHttpHeaders,
  raw: IncomingMessage,
  defaultTimeoutMs: number,
  res: { setHeader(name: string, value: string): unknown },
): Promise<QueryAnswer> {
  const body = objectBody(rawBody);
  const timeoutMs = deadline(headers, body, defaultTimeoutMs);
  const explain = wantsExplain(body);
  body.signal = contextOf(raw).signal();
  if (timeoutMs !== undefined) body.timeoutMs = timeoutMs;
  body.asJson = true;
  const result = await run(body);
  const level = levelName(result.degradationLevel);
  res.setHeader(LEVEL_HEADER, level);
  const answer = result as unknown as Record<string, unknown>;
  answer.degradationLevel = level;
  // JSON leaves out a field whose value is undefined: the answer keeps its shape.
  if (!explain) answer.explain = undefined;
  const jsonField = list === 'items' ? 'itemsJson' : 'hitsJson';
  const listJson = answer[jsonField];
  // Profile `related` is ranked on the answering thread and returns its items as objects.
  if (typeof listJson !== 'string') return { answer };
  answer[jsonField] = undefined;
  answer[list] = undefined;
  const t = stageStart();
  const rest = JSON.stringify(answer);
  const head = `{"${list}":`;
  const tail = rest === '{}' ? '}' : `,${rest.slice(1)}`;
  const length = head.length + Buffer.byteLength(listJson) + Buffer.byteLength(tail);
  stageEnd(STAGE.json, t);
  return { text: head + listJson + tail, length };
}

/** A user as JSON: the vectors as plain arrays. */
function userJson(user: User): Record<string, unknown> {
  const out: Record<string, unknown> = { ...user, preference: user.preference === null ? null : Array.from(user.preference) };
  if (user.embedding !== undefined) out.embedding = Array.from(user.embedding);
  return out;
}

/** The one string field `field` of a body (`item` of a hide, `creator` of a block), checked by the database itself after. */
function edgeField(body: Record<string, unknown>, field: 'item' | 'creator'): string {
  const keys = Object.keys(body).filter((k) => k !== field);
  if (keys.length > 0) throw new InvalidInputError(keys[0]!, `absent: the body is { ${field} }`, body[keys[0]!]);
  return body[field] as string;
}

/** An item as JSON: the embedding as a plain array (a Float32Array would serialise as an object). */
function itemJson(item: Item): Record<string, unknown> {
  return item.embedding === undefined ? { ...item } : { ...item, embedding: Array.from(item.embedding) };
}

/** Registers every route of tidal serve on `app` (the raw listener has already admitted the request). */
export function registerRoutes(app: FastifyInstance, deps: RouteDeps): void {
  const { db } = deps;

  // Probes, scrapes and /stats (exempt from the chain and from keys).
  app.get('/healthz', async () => ({ ok: true }));
  app.get('/readyz', async (_req, reply) => {
    if (!deps.ready())
      return reply
        .code(503)
        .send({ code: 'TIDAL_SERVE_DRAINING', message: 'not ready: the server is shutting down or its database is closed' });
    const { vectorSearch, annBuild } = await db.stats();
    if (deps.readyRequiresAnn && vectorSearch === 'exact') {
      const progress =
        annBuild.state !== 'building'
          ? `the build ${annBuild.state}`
          : annBuild.rowsTotal === 0
            ? 'no rows added yet'
            : `${annBuild.rowsDone} of ${annBuild.rowsTotal} rows added`;
      return reply.code(503).send({
        code: 'TIDAL_SERVE_ANN_BUILDING',
        message: `not ready: vector searches are exact until the ANN index is in use (${progress})`,
        vectorSearch,
      });
    }
    return { ready: true, vectorSearch };
  });
  app.get('/metrics', async (_req, reply) => {
    const text = await deps.registry.metrics();
    return reply.type(deps.registry.contentType).send(text);
  });
  app.get('/stats', async () => deps.stats());

  // Items.
  app.post('/items', async (req) => {
    const items = Array.isArray(req.body) ? req.body : [objectBody(req.body)];
    await db.upsertItems(items);
    return { upserted: items.length };
  });
  app.put<{ Params: { id: string } }>('/items/:id', async (req) => {
    const body = objectBody(req.body);
    const id = req.params.id;
    if (body.id !== undefined && body.id !== id)
      throw new InvalidInputError('id', `the id in the path (${JSON.stringify(id)}) or left out`, body.id);
    await db.upsertItems([{ ...body, id }]);
    return { upserted: 1 };
  });
  app.get<{ Params: { id: string } }>('/items/:id', async (req) => {
    const item = await db.get(req.params.id);
    if (item === undefined)
      throw new ServeError(404, 'TIDAL_SERVE_NOT_FOUND', `no item ${JSON.stringify(req.params.id)}`, { id: req.params.id });
    return itemJson(item);
  });
  app.delete<{ Params: { id: string } }>('/items/:id', async (req) => {
    await db.delete(req.params.id);
    return { deleted: req.params.id };
  });
  app.get<{ Params: { id: string } }>('/items/:id/signals', async (req) => ({
    id: req.params.id,
    signals: await db.itemSignals(req.params.id),
  }));

  // Signals: one object, or an array written all or none.
  app.post('/signals', async (req) => {
    if (Array.isArray(req.body)) {
      const first = await db.signals(req.body as SignalInput[]);
      return { seq: first, count: req.body.length };
    }
    const seq = await db.signal(objectBody(req.body) as unknown as SignalInput);
    return { seq, count: 1 };
  });

  const query =
    (list: 'items' | 'hits', run: (request: Record<string, unknown>) => Promise<QueryResultLike>) =>
    async (req: FastifyRequest, reply: FastifyReply) => {
      const a = await answerQuery(list, run, req.body, req.headers, req.raw, deps.defaultTimeoutMs, reply.raw);
      reply.hijack();
      writeAnswer(reply.raw, a);
    };
  app.post(
    '/retrieve',
    query('items', (r) => db.retrieve(r as unknown as RetrieveRequest)),
  );
  app.post(
    '/search',
    query('hits', (r) => db.search(r as unknown as SearchRequest)),
  );

  // Users and their hard negatives and follows: writes, answered once durable.
  app.post('/users', async (req) => {
    const users = Array.isArray(req.body) ? req.body : [objectBody(req.body)];
    await db.upsertUsers(users);
    return { upserted: users.length };
  });
  app.put<{ Params: { id: string } }>('/users/:id', async (req) => {
    const body = objectBody(req.body);
    const id = req.params.id;
    if (body.id !== undefined && body.id !== id)
      throw new InvalidInputError('id', `the id in the path (${JSON.stringify(id)}) or left out`, body.id);
    await db.upsertUsers([{ ...body, id }]);
    return { upserted: 1 };
  });
  app.get<{ Params: { id: string } }>('/users/:id', async (req) => {
    const user = await db.getUser(req.params.id);
    if (user === undefined)
      throw new ServeError(404, 'TIDAL_SERVE_NOT_FOUND', `no user ${JSON.stringify(req.params.id)}`, { id: req.params.id });
    return userJson(user);
  });
  app.delete<{ Params: { id: string } }>('/users/:id', async (req) => {
    await db.deleteUser(req.params.id);
    return { deleted: req.params.id };
  });
  for (const op of ['hide', 'unhide'] as const) {
    app.post<{ Params: { id: string } }>(`/users/:id/${op}`, async (req) => {
      const item = edgeField(objectBody(req.body), 'item');
      await db[op]({ user: req.params.id, item });
      return { user: req.params.id, item, [op === 'hide' ? 'hidden' : 'unhidden']: true };
    });
  }
  for (const op of ['block', 'unblock', 'follow', 'unfollow'] as const) {
    app.post<{ Params: { id: string } }>(`/users/:id/${op}`, async (req) => {
      const creator = edgeField(objectBody(req.body), 'creator');
      await db[op]({ user: req.params.id, creator });
      return { user: req.params.id, creator, [`${op}ed`]: true };
    });
  }

  // Agent sessions.
  app.post('/sessions', async (req, reply) => {
    const body = objectBody(req.body);
    const handle = await db.openSession(body as unknown as Parameters<ServeDb['openSession']>[0]);
    return reply.code(201).send(handle);
  });
  app.get('/sessions', async () => ({ sessions: await db.openSessions() }));
  app.post<{ Params: { id: string } }>('/sessions/:id/signals', async (req) => {
    const body = objectBody(req.body);
    const { agent: _agent, ...signal } = body;
    const seq = await db.sessionSignal({ id: req.params.id, agentId: agentOf(body) }, signal as unknown as SignalInput);
    return { seq };
  });
  app.post<{ Params: { id: string } }>('/sessions/:id/close', async (req) => {
    const body = req.body === undefined ? {} : objectBody(req.body);
    return db.closeSession({ id: req.params.id, agentId: agentOf(body) });
  });
}
