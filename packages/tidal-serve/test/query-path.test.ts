/**
 * Which requests the server answers on its own query path (query-path.ts) and which go on to
 * fastify's route: the answers of the two are compared in server.test.ts.
 */
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { queryBodyLength } from '../src/query-path.js';

function request(method: string, headers: Record<string, string>): IncomingMessage {
  return { method, headers } as unknown as IncomingMessage;
}

describe('queryBodyLength', () => {
  const limit = 1000;
  it('takes a POST to /retrieve or /search with a stated length within the limit', () => {
    expect(queryBodyLength(request('POST', { 'content-length': '17' }), 'retrieve', '/retrieve', '/retrieve', limit)).toBe(17);
    expect(queryBodyLength(request('POST', { 'content-length': '1000' }), 'search', '/search', '/search', limit)).toBe(1000);
  });

  it.each([
    ['another route', request('POST', { 'content-length': '17' }), 'items', '/items'],
    ['a GET', request('GET', { 'content-length': '17' }), 'retrieve', '/retrieve'],
    ['a query string', request('POST', { 'content-length': '17' }), 'retrieve', '/retrieve?x=1'],
    ['no length', request('POST', {}), 'retrieve', '/retrieve'],
    ['an empty body', request('POST', { 'content-length': '0' }), 'retrieve', '/retrieve'],
    ['a body over the limit', request('POST', { 'content-length': '1001' }), 'retrieve', '/retrieve'],
    ['a length that is not a number', request('POST', { 'content-length': '1e2' }), 'retrieve', '/retrieve'],
    ['a chunked body', request('POST', { 'content-length': '17', 'transfer-encoding': 'chunked' }), 'retrieve', '/retrieve'],
  ])('leaves %s to fastify', (_what, req, route, url) => {
    expect(queryBodyLength(req, route, url, url.split('?')[0]!, limit)).toBe(0);
  });
});
