/**
 * The load generator's cheap HTTP/1.1 client (`--client raw`): plain `node:net` sockets to one
 * loopback origin, keep-alive, one request outstanding per connection, every request of the mix
 * serialized once into a Buffer and sent with one `socket.write`, and a response parser that reads
 * only what the generator counts (status, `content-length`, `connection`, one named header, the
 * `code` of a non-2xx JSON body).
 *
 * Why not undici: at 10× C (13 000 requests/s) undici's `Pool.request` cost the generator ≈ 73 µs of
 * CPU per request, a whole core on a 2-core machine, and the generator's own event-loop lag was then
 * billed to the server as latency. This client does less on purpose: it is not a general client, it
 * only has to read what tidal-serve writes (every response carries `Content-Length`).
 *
 * Errors of a request that got no response, by the code it is counted under:
 * - `LOADGEN_TIMEOUT`: no byte moved on its connection for `timeoutMs` (connecting, waiting for the
 *   head, or between body chunks; undici's headers and body timeouts cover the same waits);
 * - `LOADGEN_NO_LENGTH`: a response without `Content-Length` or with `Transfer-Encoding` (this client
 *   does not guess where such a body ends);
 * - `LOADGEN_BAD_RESPONSE`: bytes that are not an HTTP/1.x response head;
 * - the socket's own code (`ECONNREFUSED`, `ECONNRESET`, `EPIPE`, ...) for a socket error, and
 *   `ECONNRESET` when the server closed the connection cleanly before the whole response (as
 *   node:http's client reports it: "socket hang up").
 * The connection of a failed request is destroyed and leaves the pool.
 */
import { connect } from 'node:net';
import type { Socket } from 'node:net';
import { InvalidInputError } from 'tidal-core';

/** What the generator reads of one exchange: `status` 0 means no response (then `code` says why). */
export interface Outcome {
  readonly status: number;
  /** A non-2xx body's JSON `code` (`(none)` without one), or the error code when `status` is 0. */
  readonly code: string | null;
  /** The counted header's value on a 2xx response, `undefined` when absent or not asked for. */
  readonly counted: string | undefined;
  /**
   * `performance.now()` when the request's bytes were handed to its socket, after any wait for a
   * free connection; absent when it never was (it failed while queued) or the client does not say.
   */
  readonly writtenAt?: number;
}

/** One request as the clients take it: path already joined to the base URL's path. */
export interface PreparedRequest {
  readonly method: string;
  readonly path: string;
  readonly body: string | undefined;
  readonly headers: Readonly<Record<string, string>>;
}

export interface RawClientOptions {
  /** `http://host:port`, loopback (checked by the caller). */
  readonly origin: URL;
  /** Most connections open at once; requests past them wait in FIFO order for a free one. */
  readonly connections: number;
  /** Idle time on a connection with a request outstanding after which it fails with `LOADGEN_TIMEOUT`. */
  readonly timeoutMs: number;
  /** A lower-case header name whose value is returned on 2xx responses, or `null`. */
  readonly countHeader: string | null;
  /**
   * A free connection idle this long is closed instead of reused (default {@link IDLE_MS}).
   * @default 4000
   */
  readonly idleMs?: number;
  /** The clock idle time is measured by (tests move it). @default performance.now */
  readonly now?: () => number;
}

/**
 * A free connection idle this long is closed, not reused: undici's default `keepAliveTimeout`,
 * 1 s under node:http's server-side 5 s (`Keep-Alive: timeout=5`). A client that reuses a
 * connection the server is closing that very moment gets ECONNRESET: a 10-minute soak at 1 083
 * requests/s over 1 024 connections, reused last-in first-out, met it 6 times, where undici and
 * Node's own agent, which retire a connection before the server's timeout, would not.
 */
export const IDLE_MS = 4000;

const CRLFCRLF = Buffer.from('\r\n\r\n', 'latin1');
/** A head larger than this is not tidal-serve's (its heads are a few hundred bytes). */
const MAX_HEAD_BYTES = 64 * 1024;
/** Headers the client writes itself; a mix that sets them would send them twice or lie about the body. */
const OWN_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection']);
const NO_BODY_METHODS = new Set(['GET', 'HEAD', 'DELETE', 'OPTIONS']);

/** The bytes of one request, built once per mix entry. */
export function serializeRequest(req: PreparedRequest, host: string, field = 'requests'): Buffer {
  let head = `${req.method} ${req.path} HTTP/1.1\r\nHost: ${host}\r\n`;
  for (const [name, value] of Object.entries(req.headers)) {
    if (OWN_HEADERS.has(name.toLowerCase()))
      throw new InvalidInputError(
        `${field}.headers.${name}`,
        'a header the client does not write itself (not host, content-length, transfer-encoding, connection)',
        value,
      );
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name))
      throw new InvalidInputError(`${field}.headers`, 'header names of token characters', name);
    if (/[\r\n\0]/.test(value)) throw new InvalidInputError(`${field}.headers.${name}`, 'a value without CR, LF or NUL', value);
    head += `${name}: ${value}\r\n`;
  }
  const body = req.body === undefined ? null : Buffer.from(req.body, 'utf8');
  if (body !== null) head += `Content-Length: ${body.length}\r\n`;
  else if (!NO_BODY_METHODS.has(req.method)) head += 'Content-Length: 0\r\n';
  head += '\r\n';
  const headBytes = Buffer.from(head, 'latin1');
  return body === null ? headBytes : Buffer.concat([headBytes, body]);
}

/** The `code` of a JSON error body, `(none)` when there is none. */
export function codeOf(text: string): string {
  try {
    const parsed: unknown = JSON.parse(text);
    const code = typeof parsed === 'object' && parsed !== null ? (parsed as { code?: unknown }).code : undefined;
    return typeof code === 'string' ? code : '(none)';
  } catch {
    return '(none)';
  }
}

type Done = (outcome: Outcome) => void;

interface Pending {
  readonly bytes: Buffer;
  readonly noBody: boolean;
  readonly done: Done;
}

/** Parser states of a connection. */
const IDLE = 0;
const HEAD = 1;
const BODY = 2;

class Connection {
  state = IDLE;
  pending: Pending | null = null;
  /** Head bytes received so far when the head spans several chunks. */
  head: Buffer | null = null;
  status = 0;
  remaining = 0;
  close = false;
  counted: string | undefined = undefined;
  /** A non-2xx body, kept to read its `code`; `null` for a 2xx body (counted, not kept). */
  body: Buffer[] | null = null;
  /** `performance.now()` when the pending request was written. */
  writtenAt = 0;
  /** Until `'connect'`: a connection that is still connecting has no request of its own. */
  connected = false;
  /** The client's clock when it last joined the free list. */
  idleSince = 0;
  dead = false;
  error: string | null = null;

  constructor(readonly socket: Socket) {}
}

/** Connections {@link RawClient.preconnect} opens at once before it waits for them. */
const PRECONNECT_WAVE = 256;

/**
 * A fixed-capacity pool of keep-alive connections, opened lazily and reused from a free list. A
 * request waits in one FIFO queue until a connection is free; a new connection is opened when the
 * queue holds more requests than connections being opened, and takes the oldest waiting request
 * once connected (as undici's pool does). Binding a request to the connection opened for it would
 * leave it waiting out a slow connect (a SYN dropped by a full accept queue is resent after 1 s,
 * then 3 s) while other connections come free.
 */
export class RawClient {
  readonly #options: RawClientOptions;
  readonly #idleMs: number;
  readonly #now: () => number;
  readonly #free: Connection[] = [];
  readonly #all = new Set<Connection>();
  /** Requests waiting for a connection; `#queueHead` is the next one out (no shift per request). */
  #queue: Pending[] = [];
  #queueHead = 0;
  #connecting = 0;
  #destroyed = false;
  /**
   * Every connection reads into this one buffer (`onread`): no Buffer allocated per read and no
   * readable-stream machinery per chunk. Safe to share: libuv reads one socket into it and calls
   * back synchronously before the next read, and the parser copies the little it keeps (a head
   * split over reads, a non-2xx body). 64 KiB: the most one read of a loopback socket returns.
   */
  readonly #readBuffer = Buffer.allocUnsafe(64 * 1024);

  /** Free connections closed for being idle {@link IDLE_MS} or longer. */
  retired = 0;

  constructor(options: RawClientOptions) {
    this.#options = options;
    this.#idleMs = options.idleMs ?? IDLE_MS;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Connections open now (busy or free). */
  get open(): number {
    return this.#all.size;
  }

  /**
   * Opens connections until `n` (at most the pool's size) are open, before any request: a client
   * that keeps a pool of connections open, as a load balancer does, rather than one whose first
   * seconds of load are also a burst of new connections (which a server's accept queue may drop,
   * each dropped SYN costing its client a 1 s retransmission). Connects in waves of
   * {@link PRECONNECT_WAVE}; stops early when a whole wave fails. Resolves with the connections open.
   */
  async preconnect(n: number): Promise<number> {
    const want = Math.min(n, this.#options.connections);
    while (!this.#destroyed && this.#all.size < want) {
      const wave: Promise<boolean>[] = [];
      for (let i = 0; i < PRECONNECT_WAVE && this.#all.size < want; i++) {
        const { socket } = this.#open();
        wave.push(
          new Promise((resolve) => {
            socket.once('connect', () => resolve(true));
            socket.once('close', () => resolve(false));
          }),
        );
      }
      if (!(await Promise.all(wave)).some(Boolean)) break;
    }
    return this.#all.size;
  }

  /** Sends `bytes` (one serialized request) and calls `done` once with what came back. */
  request(bytes: Buffer, method: string, done: Done): void {
    const p: Pending = { bytes, noBody: method === 'HEAD', done };
    if (this.#destroyed) return done({ status: 0, code: 'LOADGEN_DESTROYED', counted: undefined });
    const now = this.#now();
    let conn = this.#free.pop();
    while (conn !== undefined && (conn.dead || now - conn.idleSince >= this.#idleMs)) {
      if (!conn.dead) this.#retire(conn);
      conn = this.#free.pop();
    }
    if (conn !== undefined) return this.#send(conn, p);
    this.#queue.push(p);
    this.#openForQueue();
  }

  /** As `request`, as a promise. */
  send(bytes: Buffer, method: string): Promise<Outcome> {
    return new Promise((resolve) => this.request(bytes, method, resolve));
  }

  /** Destroys every connection; outstanding and queued requests end with an error code. */
  destroy(): void {
    this.#destroyed = true;
    const queued = this.#queue.slice(this.#queueHead);
    this.#queue = [];
    this.#queueHead = 0;
    for (const p of queued) p.done({ status: 0, code: 'LOADGEN_DESTROYED', counted: undefined });
    for (const conn of [...this.#all]) this.#fail(conn, 'LOADGEN_DESTROYED');
  }

  #open(): Connection {
    const { origin, timeoutMs } = this.#options;
    const host = origin.hostname.startsWith('[') ? origin.hostname.slice(1, -1) : origin.hostname;
    // `conn` is set before any read can call back (reads start after `connect` returns).
    const socket = connect({
      host,
      port: Number(origin.port || 80),
      noDelay: true,
      onread: {
        buffer: this.#readBuffer,
        callback: (n: number, buf: Uint8Array): boolean => {
          this.#onData(conn, Buffer.from(buf.buffer, buf.byteOffset, n));
          return true; // false would pause the socket
        },
      },
    });
    const conn = new Connection(socket);
    this.#all.add(conn);
    this.#connecting++;
    // Node's idle timer, refreshed by every read and write: one timer per connection, not per request.
    socket.setTimeout(timeoutMs);
    const c = conn;
    socket.on('connect', () => {
      c.connected = true;
      this.#connecting--;
      this.#next(c);
    });
    socket.on('timeout', () => {
      // Idle with nothing asked is a kept-alive connection, left open; connecting counts as waiting.
      if (c.pending !== null || !c.connected) this.#fail(c, 'LOADGEN_TIMEOUT');
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      c.error ??= err.code ?? err.name;
    });
    socket.on('close', () => this.#fail(c, c.error ?? 'ECONNRESET'));
    return c;
  }

  #send(conn: Connection, p: Pending): void {
    conn.pending = p;
    conn.state = HEAD;
    conn.writtenAt = performance.now();
    conn.socket.write(p.bytes);
  }

  /** A connection that came free takes the oldest waiting request, or joins the free list. */
  #next(conn: Connection): void {
    if (this.#queueHead < this.#queue.length) this.#send(conn, this.#dequeue());
    else {
      conn.idleSince = this.#now();
      this.#free.push(conn);
    }
  }

  /** Closes a free connection idle too long: no request of its own, so no outcome to report. */
  #retire(conn: Connection): void {
    conn.dead = true;
    this.#all.delete(conn);
    conn.socket.destroy();
    this.retired++;
  }

  /** Opens connections while requests wait that no connection being opened will take. */
  #openForQueue(): void {
    while (!this.#destroyed && this.#queue.length - this.#queueHead > this.#connecting && this.#all.size < this.#options.connections)
      this.#open();
  }

  /**
   * Ends the connection's request with `code` and takes the connection out of the pool. A
   * connection that failed to connect had no request of its own: the oldest waiting one gets its
   * error (so a server that refuses connections fails requests, rather than being retried forever).
   */
  #fail(conn: Connection, code: string): void {
    if (conn.dead) return;
    const p = conn.pending;
    conn.dead = true;
    conn.pending = null;
    this.#all.delete(conn);
    conn.socket.destroy();
    if (!conn.connected) {
      this.#connecting--;
      if (!this.#destroyed && this.#queueHead < this.#queue.length) this.#dequeue().done({ status: 0, code, counted: undefined });
    } else if (p === null) {
      // Closed while idle (the server's keep-alive timeout): out of the free list now, rather
      // than left for `request` to skip.
      const i = this.#free.indexOf(conn);
      if (i >= 0) this.#free.splice(i, 1);
    }
    if (p !== null) p.done({ status: 0, code, counted: undefined, writtenAt: conn.writtenAt });
    this.#openForQueue();
  }

  #dequeue(): Pending {
    const p = this.#queue[this.#queueHead++]!;
    if (this.#queueHead === this.#queue.length) {
      this.#queue = [];
      this.#queueHead = 0;
    } else if (this.#queueHead > 4096 && this.#queueHead * 2 > this.#queue.length) {
      this.#queue = this.#queue.slice(this.#queueHead);
      this.#queueHead = 0;
    }
    return p;
  }

  #onData(conn: Connection, chunk: Buffer): void {
    if (conn.dead) return;
    if (conn.pending === null) {
      // Bytes on a connection with nothing asked: not a response to anything we sent.
      return this.#fail(conn, 'LOADGEN_BAD_RESPONSE');
    }
    let offset = 0;
    if (conn.state === HEAD) {
      let buf = chunk;
      let from = 0;
      if (conn.head !== null) {
        from = Math.max(0, conn.head.length - 3); // the blank line may straddle the chunks
        buf = Buffer.concat([conn.head, chunk]);
      }
      const end = buf.indexOf(CRLFCRLF, from);
      if (end < 0) {
        if (buf.length > MAX_HEAD_BYTES) return this.#fail(conn, 'LOADGEN_BAD_RESPONSE');
        conn.head = buf === chunk ? Buffer.from(chunk) : buf; // the read buffer is reused: copy
        return;
      }
      conn.head = null;
      const error = this.#parseHead(conn, buf.toString('latin1', 0, end));
      if (error !== null) return this.#fail(conn, error);
      conn.state = BODY;
      chunk = buf;
      offset = end + 4;
    }
    // BODY: exactly Content-Length bytes.
    const available = chunk.length - offset;
    const take = available < conn.remaining ? available : conn.remaining;
    if (conn.body !== null && take > 0) conn.body.push(Buffer.from(chunk.subarray(offset, offset + take))); // copied out of the read buffer
    conn.remaining -= take;
    if (conn.remaining > 0) return;
    // More than the response: the server does not keep to one response per request.
    if (offset + take < chunk.length) return this.#fail(conn, 'LOADGEN_BAD_RESPONSE');
    this.#complete(conn);
  }

  /** Reads the status line and the headers it needs; an error code, or `null`. */
  #parseHead(conn: Connection, head: string): string | null {
    if (!head.startsWith('HTTP/1.') || head.charCodeAt(8) !== 32) return 'LOADGEN_BAD_RESPONSE';
    const status = Number(head.slice(9, 12));
    if (!Number.isInteger(status) || status < 100 || status > 999) return 'LOADGEN_BAD_RESPONSE';
    // 1xx: tidal-serve sends none (the client never asks `Expect: 100-continue`).
    if (status < 200) return 'LOADGEN_BAD_RESPONSE';
    const countHeader = this.#options.countHeader;
    let length = -1;
    let chunked = false;
    let close = false;
    let counted: string | undefined;
    let at = head.indexOf('\r\n');
    while (at >= 0) {
      const next = head.indexOf('\r\n', at + 2);
      const line = next < 0 ? head.slice(at + 2) : head.slice(at + 2, next);
      at = next;
      const colon = line.indexOf(':');
      if (colon <= 0) return 'LOADGEN_BAD_RESPONSE';
      const name = line.slice(0, colon).toLowerCase();
      if (name === 'content-length') {
        const v = line.slice(colon + 1).trim();
        if (!/^\d{1,15}$/.test(v) || (length >= 0 && Number(v) !== length)) return 'LOADGEN_BAD_RESPONSE';
        length = Number(v);
      } else if (name === 'transfer-encoding') {
        chunked = true;
      } else if (name === 'connection') {
        close = line
          .slice(colon + 1)
          .toLowerCase()
          .includes('close');
      } else if (name === countHeader && counted === undefined) {
        counted = line.slice(colon + 1).trim();
      }
    }
    const noBody = conn.pending!.noBody || status === 204 || status === 304;
    if (noBody) length = 0;
    else if (chunked || length < 0) return 'LOADGEN_NO_LENGTH';
    conn.status = status;
    conn.remaining = length;
    conn.close = close;
    conn.counted = status >= 200 && status < 300 ? counted : undefined;
    conn.body = status >= 200 && status < 300 ? null : [];
    return null;
  }

  #complete(conn: Connection): void {
    const p = conn.pending!;
    const code = conn.body === null ? null : codeOf(Buffer.concat(conn.body).toString('utf8'));
    const outcome: Outcome = { status: conn.status, code, counted: conn.counted, writtenAt: conn.writtenAt };
    conn.pending = null;
    conn.state = IDLE;
    conn.body = null;
    if (conn.close) {
      conn.dead = true;
      this.#all.delete(conn);
      conn.socket.destroy();
    }
    p.done(outcome);
    if (conn.dead) this.#openForQueue();
    else this.#next(conn);
  }
}
