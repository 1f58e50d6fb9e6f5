/**
 * `POST /retrieve` and `POST /search` answered by the server's own listener, past fastify: its
 * routing, body parser and reply cost 10–27 µs a request on a 2-core machine (a bare fastify
 * server against a bare `node:http` one answering the same bytes: bench/probes/http-floor.ts),
 * up to a tenth of a query answered from a kept result. The request is one with a body of a
 * stated length within the limit and no query string; anything else (a chunked or empty body, one
 * over the limit, a query string) goes on to fastify's route, which answers the same way through
 * the same functions (`answerQuery`, `parseBody`, `errorResponse`, `writeAnswer`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RetrieveRequest, SearchRequest } from 'tidal-core';
import { JSON_TYPE } from './admission/refusal.js';
import { findContext } from './context.js';
import { errorResponse, parseBody } from './replies.js';
import { answerQuery, writeAnswer } from './routes.js';
import type { ServeDb } from './server.js';

/** What the path needs from the server. */
export interface QueryPathDeps {
  readonly db: ServeDb;
  readonly bodyLimit: number;
  readonly defaultTimeoutMs: number;
}

const DECIMAL = /^[0-9]{1,10}$/;

/**
 * The body length of a request this path answers: a POST of a route name `retrieve` or `search`,
 * its URL the bare path, a `content-length` from 1 to the limit and no `transfer-encoding`; 0 for
 * any other request.
 */
export function queryBodyLength(req: IncomingMessage, route: string, url: string, path: string, bodyLimit: number): number {
  if ((route !== 'retrieve' && route !== 'search') || req.method !== 'POST' || url !== path) return 0;
  if (req.headers['transfer-encoding'] !== undefined) return 0;
  const stated = req.headers['content-length'];
  if (stated === undefined || !DECIMAL.test(stated)) return 0;
  const n = Number(stated);
  return n >= 1 && n <= bodyLimit ? n : 0;
}

/** Answers a query read from `req` (a request {@link queryBodyLength} said yes to) on `res`. */
export function createQueryPath(deps: QueryPathDeps): (route: 'retrieve' | 'search', req: IncomingMessage, res: ServerResponse) => void {
  const { db, bodyLimit, defaultTimeoutMs } = deps;
  const retrieve = (r: Record<string, unknown>) => db.retrieve(r as unknown as RetrieveRequest);
  const search = (r: Record<string, unknown>) => db.search(r as unknown as SearchRequest);

  function fail(req: IncomingMessage, res: ServerResponse, err: unknown): void {
    const r = errorResponse(err, bodyLimit);
    const ctx = findContext(req);
    if (ctx !== undefined) ctx.code = r.body.code;
    if (res.headersSent || res.destroyed) return;
    const text = JSON.stringify(r.body);
    const headers: string[] = [];
    for (const k in r.headers) headers.push(k.toLowerCase(), String(r.headers[k]));
    headers.push('content-type', JSON_TYPE, 'content-length', String(Buffer.byteLength(text)));
    res.writeHead(r.status, headers);
    res.end(text);
  }

  async function answer(route: 'retrieve' | 'search', text: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const a = await answerQuery(
        route === 'retrieve' ? 'items' : 'hits',
        route === 'retrieve' ? retrieve : search,
        parseBody(text),
        req.headers,
        req,
        defaultTimeoutMs,
        res,
      );
      writeAnswer(res, a);
    } catch (err) {
      fail(req, res, err);
    }
  }

  return (route, req, res) => {
    const chunks: Buffer[] = [];
    let received = 0;
    req.on('data', (c: Buffer) => {
      chunks.push(c);
      received += c.length;
    });
    // A client gone before its body arrived: the response's 'close' releases the request.
    req.on('error', () => undefined);
    req.on('end', () => {
      const body = chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks, received).toString('utf8');
      void answer(route, body, req, res);
    });
  };
}
