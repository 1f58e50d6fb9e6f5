/**
 * A small embedding server with the common `/v1/embeddings` shape, for tests and the bench:
 * deterministic vectors (the same text always gets the same unit vector), an injectable latency,
 * injectable failures, and a count of the calls it is serving at once (and the most it ever was).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface EmbeddingServer {
  readonly url: string;
  /** Milliseconds each request waits before it is answered. */
  latencyMs: number;
  /** The next `count` requests are answered with `status` (and no embeddings). */
  failNext(count: number, status: number): void;
  /** Requests received, failed ones included. */
  readonly requests: number;
  readonly inFlight: number;
  /** The most requests it was serving at once. */
  readonly maxInFlight: number;
  /** Requests wait until released (for tests that need them in flight): `hold()` then `release()`. */
  hold(): void;
  release(): void;
  resetCounts(): void;
  close(): Promise<void>;
}

/** The deterministic vector of `text`: FNV-1a seeded per dimension, normalised. */
export function embeddingOf(text: string, dims: number): number[] {
  const v: number[] = [];
  for (let d = 0; d < dims; d++) {
    let h = 0x811c9dc5 ^ d;
    for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
    v.push(((h >>> 0) % 2001) / 1000 - 1);
  }
  const norm = Math.hypot(...v) || 1;
  return v.map((x) => x / norm);
}

export async function startEmbeddingServer(options: { dims?: number; latencyMs?: number } = {}): Promise<EmbeddingServer> {
  const dims = options.dims ?? 8;
  let failures: { count: number; status: number } = { count: 0, status: 503 };
  let requests = 0;
  let inFlight = 0;
  let maxInFlight = 0;
  let held: (() => void)[] | null = null;
  const state = { latencyMs: options.latencyMs ?? 0 };

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests++;
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      const answer = (): void => {
        inFlight--;
        if (req.url !== '/v1/embeddings' || req.method !== 'POST') {
          res.writeHead(404).end();
          return;
        }
        if (failures.count > 0) {
          failures.count--;
          res
            .writeHead(failures.status, { 'content-type': 'application/json' })
            .end(JSON.stringify({ error: { message: 'injected failure' } }));
          return;
        }
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { input: string | string[] };
        const input = typeof body.input === 'string' ? [body.input] : body.input;
        const data = input.map((text, index) => ({ object: 'embedding', index, embedding: embeddingOf(text, dims) }));
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ object: 'list', data }));
      };
      const afterLatency = (): void => {
        if (state.latencyMs > 0) setTimeout(answer, state.latencyMs);
        else answer();
      };
      if (held !== null) held.push(afterLatency);
      else afterLatency();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get latencyMs() {
      return state.latencyMs;
    },
    set latencyMs(ms: number) {
      state.latencyMs = ms;
    },
    failNext(count, status) {
      failures = { count, status };
    },
    get requests() {
      return requests;
    },
    get inFlight() {
      return inFlight;
    },
    get maxInFlight() {
      return maxInFlight;
    },
    hold() {
      held ??= [];
    },
    release() {
      const waiting = held ?? [];
      held = null;
      for (const go of waiting) go();
    },
    resetCounts() {
      requests = 0;
      maxInFlight = inFlight;
    },
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
