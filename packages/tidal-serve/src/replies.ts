/**
 * fastify's side of every answer: a body is read as JSON whatever its Content-Type says, and an
 * error or an unknown route answers in tidal's error shape.
 */
import type { FastifyInstance } from 'fastify';
import { InvalidInputError } from 'tidal-core';
import { JSON_TYPE } from './admission/refusal.js';
import { findContext } from './context.js';
import { ServeError, errorReply } from './errors.js';

/** Installs the body parser, the error handler and the 404 handler on `app`. */
export function setReplyHandlers(app: FastifyInstance, bodyLimit: number): void {
  // Every body is read as JSON whatever its Content-Type says (curl -d sends a form type).
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    let parsed: unknown;
    try {
      parsed = parseBody(body as string);
    } catch (err) {
      done(err as Error, undefined);
      return;
    }
    done(null, parsed);
  });
  app.setErrorHandler((err, req, reply) => {
    const r = errorResponse(err, bodyLimit);
    const ctx = findContext(req.raw);
    if (ctx !== undefined) ctx.code = r.body.code;
    void reply.code(r.status).headers(r.headers).type(JSON_TYPE).send(r.body);
  });
  app.setNotFoundHandler((req, reply) => {
    const ctx = findContext(req.raw);
    if (ctx !== undefined) ctx.code = 'TIDAL_SERVE_NOT_FOUND';
    void reply
      .code(404)
      .type(JSON_TYPE)
      .send({ code: 'TIDAL_SERVE_NOT_FOUND', message: `no route ${req.method} ${req.url.split('?')[0]}` });
  });
}

/** A request's body as JSON. @throws InvalidInputError (field `body`) when it is not JSON. */
export function parseBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new InvalidInputError('body', `a JSON document (${(err as Error).message})`, text);
  }
}

/** The answer to a failed request, fastify's own errors (body too large, bad content length) in tidal's error shape. */
export function errorResponse(err: unknown, bodyLimit: number): ReturnType<typeof errorReply> {
  return errorReply(fastifyError(err, bodyLimit));
}

/** fastify's own errors (body too large, bad content length) in tidal's error shape. */
function fastifyError(err: unknown, bodyLimit: number): unknown {
  const e = err as { code?: unknown; statusCode?: unknown; message?: unknown };
  if (e?.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return new ServeError(413, 'TIDAL_SERVE_BODY_TOO_LARGE', `the request body is over the limit of ${bodyLimit} bytes`, {
      limitBytes: bodyLimit,
    });
  }
  if (
    typeof e?.code === 'string' &&
    e.code.startsWith('FST_') &&
    typeof e.statusCode === 'number' &&
    e.statusCode >= 400 &&
    e.statusCode < 500
  ) {
    return new ServeError(e.statusCode, 'TIDAL_SERVE_BAD_REQUEST', String(e.message));
  }
  return err;
}
