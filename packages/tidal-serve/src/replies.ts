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
    const text = body as string;
    try {
      done(null, JSON.parse(text));
    } catch (err) {
      done(new InvalidInputError('body', `a JSON document (${(err as Error).message})`, text), undefined);
    }
  });
  app.setErrorHandler((err, req, reply) => {
    const mapped = fastifyError(err, bodyLimit);
    const r = errorReply(mapped);
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
