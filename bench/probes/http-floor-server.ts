/**
 * The bare servers of http-floor.ts: `node http-floor-server.js http|fastify BYTES`. Each answers
 * every POST with the same JSON of about BYTES bytes (20 items shaped like a query's answer), after
 * reading and parsing the request's body, on 127.0.0.1 at a port of the system's; it prints
 * `listening on http://…` once ready and runs until killed.
 */
import { createServer } from 'node:http';
import Fastify from 'fastify';

const JSON_TYPE = 'application/json; charset=utf-8';

/** A 20-item answer of about `bytes` bytes: ids, scores, signals with windows and velocities. */
function answer(bytes: number): string {
  const items = [];
  for (let i = 0; items.length < 20; i++) {
    const n = 1000 + i * 37;
    items.push({
      id: `item-${String(i * 4099).padStart(6, '0')}`,
      score: n / 10_417,
      rank: i + 1,
      signals: {
        view: {
          score: n * 0.409,
          count: n,
          windows: { '1h': n, '24h': n, '7d': n, all: n },
          velocity: { '1h': n / 3600, '24h': n / 86_400, '7d': n / 604_800 },
        },
        like: { score: n * 0.0531, count: n >> 4, windows: { '24h': n >> 4, '7d': n >> 4, all: n >> 4 } },
      },
      createdAt: 1_794_000_000_000 + i * 86_400_000,
    });
  }
  const text = JSON.stringify({ items, degradationLevel: 'NoDiversity' });
  // Padded to the size asked for in one field, so the bytes written are the tidal answer's.
  const pad = Math.max(0, bytes - text.length - 10);
  return JSON.stringify({ items, degradationLevel: 'NoDiversity', pad: 'x'.repeat(pad) });
}

const [kind, size] = process.argv.slice(2);
const body = answer(Number(size ?? 7700));

if (kind === 'http') {
  const server = createServer((req, res) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (text += c));
    req.on('end', () => {
      JSON.parse(text === '' ? '{}' : text);
      res.writeHead(200, ['content-type', JSON_TYPE, 'content-length', String(Buffer.byteLength(body))]);
      res.end(body);
    });
  });
  server.listen(0, '127.0.0.1', () => {
    const a = server.address();
    process.stdout.write(`listening on http://127.0.0.1:${typeof a === 'object' && a !== null ? a.port : 0}\n`);
  });
} else if (kind === 'fastify') {
  const app = Fastify({ logger: false });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, text, done) => done(null, JSON.parse((text as string) || '{}')));
  app.post('/*', async (_req, reply) => {
    void reply.type(JSON_TYPE);
    return body;
  });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  process.stdout.write(`listening on ${url}\n`);
} else {
  process.stderr.write(`usage: http-floor-server.js http|fastify BYTES (got ${String(kind)})\n`);
  process.exit(2);
}
