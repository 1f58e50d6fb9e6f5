import { createHmac, hash, randomBytes, timingSafeEqual } from 'node:crypto';
import { InvalidInputError } from 'tidal-load';
import { META, type Meta } from 'tidal-wal/storage';
import type { ChainRef } from './pinned-rankings.js';

/**
 * What a cursor carries: the query, the pinned ranking of its chain (see pinned-rankings.ts), how
 * far the pages have read it, and when the page that returned it was served. About 110 bytes.
 */
export interface CursorState extends ChainRef {
  /** The query's hash (see {@link queryHash}). */
  readonly query: string;
  /** Items of the pinned ranking the pages after the first have passed (returned or dropped). */
  readonly offset: number;
}

const MAC_BYTES = 16;

/**
 * Signs and checks cursors with a secret of the database (32 random bytes, {@link META}.cursorSecret
 * in `tidal_meta`, made on first use), so a cursor is opaque, cannot be altered, and is refused by another database.
 */
export class Cursors {
  readonly #secret: Buffer;

  constructor(meta: Meta | { readonly secretHex: string }) {
    let secret = 'secretHex' in meta ? meta.secretHex : meta.get(META.cursorSecret);
    if (secret === undefined) {
      secret = randomBytes(32).toString('hex');
      (meta as Meta).set(META.cursorSecret, secret);
    }
    this.#secret = Buffer.from(secret, 'hex');
  }

  /** Cursors signed with a secret read elsewhere (a worker thread gets the database's so). */
  static fromSecret(secretHex: string): Cursors {
    return new Cursors({ secretHex });
  }

  /** The secret, hex, for another thread of the same database. */
  get secretHex(): string {
    return this.#secret.toString('hex');
  }

  #mac(body: string): Buffer {
    return createHmac('sha256', this.#secret).update(body).digest().subarray(0, MAC_BYTES);
  }

  encode(state: CursorState): string {
    const body = Buffer.from(JSON.stringify([2, state.query, state.epoch, state.id, state.offset, state.issuedAtMs])).toString('base64url');
    return `${body}.${this.#mac(body).toString('base64url')}`;
  }

  /** The state of a cursor this database signed for the query `query`. */
  decode(value: unknown, query: string): CursorState {
    const refuse = (why: string): never => {
      throw new InvalidInputError('cursor', why, value);
    };
    if (typeof value !== 'string' || value.length > 1024) return refuse('a nextCursor string this database returned');
    const dot = value.indexOf('.');
    if (dot < 0) return refuse('a nextCursor string this database returned');
    const body = value.slice(0, dot);
    const macText = value.slice(dot + 1);
    // Node's base64url decoder skips characters outside the alphabet and ignores padding, so two
    // strings can decode to the same bytes: only the one encoding this database writes is taken.
    if (!isCanonicalBase64url(body) || !isCanonicalBase64url(macText)) return refuse('a nextCursor this database returned, unaltered');
    const mac = Buffer.from(macText, 'base64url');
    const want = this.#mac(body);
    if (mac.length !== want.length || !timingSafeEqual(mac, want)) return refuse('a nextCursor this database returned, unaltered');
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.from(body, 'base64url').toString());
    } catch {
      return refuse('a nextCursor this database returned');
    }
    // Version 1 carried the clock and the ordinals returned, and its pages were ranked afresh:
    // such a cursor is refused (its chain was never pinned).
    if (
      !Array.isArray(parsed) ||
      parsed[0] !== 2 ||
      typeof parsed[1] !== 'string' ||
      typeof parsed[2] !== 'string' ||
      !Number.isSafeInteger(parsed[3]) ||
      !Number.isSafeInteger(parsed[4]) ||
      typeof parsed[5] !== 'number'
    ) {
      return refuse('a nextCursor this database returned');
    }
    if (parsed[1] !== query) return refuse('a nextCursor of the same query (it was returned for another request)');
    return { query, epoch: parsed[2], id: parsed[3] as number, offset: parsed[4] as number, issuedAtMs: parsed[5] };
  }
}

/** Whether `text` is exactly what `toString('base64url')` writes for the bytes it decodes to. */
function isCanonicalBase64url(text: string): boolean {
  return /^[A-Za-z0-9_-]*$/.test(text) && Buffer.from(text, 'base64url').toString('base64url') === text;
}

/**
 * A hash of what a query ranks by (every validated field but the limit, the cursor and the
 * control options): a cursor is refused by any other query.
 */
export function queryHash(op: string, fields: Record<string, unknown>): string {
  // One string, hashed in one call: a hash object fed field by field crossed into C++ twice per
  // field, 3 % of tidal serve's main thread at 3× its capacity. JSON escapes U+0000 and base64
  // has none, so the separators cannot occur inside a value.
  let text = op;
  for (const k of Object.keys(fields).sort()) {
    const v = fields[k];
    text += `\u0000${k}=`;
    if (v instanceof Float32Array || v instanceof Int32Array) text += Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
    else text += JSON.stringify(v) ?? 'undefined';
  }
  return hash('sha256', text, 'base64url').slice(0, 22);
}

/**
 * {@link queryHash} computed on first call, then remembered: the fields are captured (validated,
 * never changed afterwards), the hash is only needed for a cursor given or a next cursor read.
 */
export function lazyQueryHash(op: string, fields: Record<string, unknown>): () => string {
  let hash: string | undefined;
  return () => (hash ??= queryHash(op, fields));
}

/**
 * A result's `nextCursor`, made on first read and remembered (a write replaces it). Most callers
 * never page, and a full page is the common case, so building every cursor eagerly cost each query
 * its hash and MAC on the main thread.
 */
export class LazyCursor {
  #make: (() => string | null) | null;
  #value: string | null = null;

  constructor(make: () => string | null) {
    this.#make = make;
  }

  get value(): string | null {
    const make = this.#make;
    if (make !== null) {
      this.#make = null;
      this.#value = make();
    }
    return this.#value;
  }

  set value(v: string | null) {
    this.#make = null;
    this.#value = v;
  }
}
