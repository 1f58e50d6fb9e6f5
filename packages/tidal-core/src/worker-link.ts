/**
 * Calls from a query worker thread to the database's own thread, and their answers: what a worker
 * that answers HTTP (an acceptor) cannot do where it is (writes, which have one writer; reads of
 * state only that thread holds). One pair of `BroadcastChannel`s per worker thread, each with one
 * sender and one receiver; the calls a thread makes in one turn of its event loop travel as one
 * message, and so do the answers the database's thread has for it in one turn.
 *
 * Order of start-up: a worker opens its pair while it warms, before it answers the warm task; the
 * database's thread opens the other ends once every warm task has answered (it learns the thread
 * ids from them), then sends `start`. Nothing is posted before both ends exist, so nothing is lost.
 */
import { BroadcastChannel } from 'node:worker_threads';
import { InternalError, TidalError, reviveError } from 'tidal-load';
import type { LinkCalls, LinkHandlers, LinkMethod } from './thread-methods.js';

/** One call: `method(...args)` on the database's thread. */
interface Call {
  readonly id: number;
  readonly method: LinkMethod;
  readonly args: readonly unknown[];
}

/** An error as it crosses a thread: a `TidalError`'s code and public fields survive. */
interface WireError {
  readonly name: string;
  readonly message: string;
  readonly code: string | null;
  readonly fields: Record<string, unknown>;
}

type Reply =
  | { readonly id: number; readonly ok: true; readonly value: unknown }
  | { readonly id: number; readonly ok: false; readonly error: WireError };

/** What the database's thread sends a worker besides answers. */
export type LinkControl = { readonly op: 'start' } | { readonly op: 'stop' };

type Down = { readonly replies: readonly Reply[] } | { readonly control: LinkControl };
type Up = { readonly calls: readonly Call[] };

function upName(link: string, threadId: number): string {
  return `${link}:up:${threadId}`;
}

function downName(link: string, threadId: number): string {
  return `${link}:down:${threadId}`;
}

function toWire(err: unknown): WireError {
  const e = err as Error;
  const fields: Record<string, unknown> = {};
  if (TidalError.is(err)) {
    for (const [k, v] of Object.entries(err)) {
      if (k === 'code' || k === 'name' || k === 'stack' || k === 'cause' || k === 'message') continue;
      // A field the structured clone cannot carry (a function, a symbol) is left out, not fatal.
      if (typeof v === 'function' || typeof v === 'symbol') continue;
      fields[k] = v;
    }
  }
  return { name: e?.name ?? 'Error', message: e?.message ?? String(err), code: TidalError.is(err) ? err.code : null, fields };
}

/** The error a worker's caller sees: the class of its code, with the same message and fields. */
function fromWire(w: WireError): TidalError {
  if (w.code === null) return new InternalError(`the database thread failed: ${w.message}`);
  return reviveError(w.code, w.message, w.fields);
}

/** The worker's end: `call` resolves with what the method returned there, or rejects with its error. */
export class LinkClient {
  readonly #up: BroadcastChannel;
  readonly #down: BroadcastChannel;
  readonly #waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();
  #next = 1;
  #batch: Call[] = [];
  #flushQueued = false;
  #onControl: ((c: LinkControl) => void) | undefined;
  #closed = false;

  constructor(link: string, threadId: number) {
    this.#up = new BroadcastChannel(upName(link, threadId));
    this.#down = new BroadcastChannel(downName(link, threadId));
    this.#down.onmessage = (ev) => this.#receive((ev as MessageEvent).data as Down);
  }

  /** Called with every control message (`start`, `stop`). */
  set onControl(handler: (c: LinkControl) => void) {
    this.#onControl = handler;
  }

  call<M extends LinkMethod>(method: M, args: LinkCalls[M]['args']): Promise<LinkCalls[M]['answer']> {
    if (this.#closed) return Promise.reject(new InternalError(`cannot call ${method}: the link to the database thread is closed`));
    const id = this.#next++;
    return new Promise<LinkCalls[M]['answer']>((resolve, reject) => {
      this.#waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.#batch.push({ id, method, args });
      if (this.#flushQueued) return;
      this.#flushQueued = true;
      // After this turn: every call made in it (a burst of requests parsed together) leaves in one message.
      setImmediate(() => this.#flush());
    });
  }

  #flush(): void {
    this.#flushQueued = false;
    const calls = this.#batch;
    this.#batch = [];
    if (calls.length === 0 || this.#closed) return;
    try {
      this.#up.postMessage({ calls } satisfies Up);
    } catch (err) {
      // An argument the structured clone cannot carry fails its own call, not the others.
      for (const c of calls) {
        let sent = false;
        try {
          this.#up.postMessage({ calls: [c] } satisfies Up);
          sent = true;
        } catch {
          // reported below
        }
        if (!sent)
          this.#settle({
            id: c.id,
            ok: false,
            error: toWire(new InternalError(`cannot send ${c.method} to the database thread: ${(err as Error).message}`)),
          });
      }
    }
  }

  #receive(msg: Down): void {
    if ('control' in msg) {
      this.#onControl?.(msg.control);
      return;
    }
    for (const r of msg.replies) this.#settle(r);
  }

  #settle(r: Reply): void {
    const w = this.#waiting.get(r.id);
    if (w === undefined) return;
    this.#waiting.delete(r.id);
    if (r.ok) w.resolve(r.value);
    else w.reject(fromWire(r.error));
  }

  /** Rejects what still waits and closes both channels. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#up.close();
    this.#down.close();
    const err = new InternalError('the link to the database thread closed before it answered');
    for (const w of this.#waiting.values()) w.reject(err);
    this.#waiting.clear();
  }
}

/** The database thread's end: answers every worker's calls with `handlers`. */
export class LinkServer {
  readonly #threads = new Map<number, { up: BroadcastChannel; down: BroadcastChannel; replies: Reply[]; flushQueued: boolean }>();
  readonly #handlers: LinkHandlers;
  #closed = false;
  /** Calls answered so far (for stats and tests). */
  calls = 0;
  /** Messages that carried calls (each one a worker's batch). */
  batches = 0;

  constructor(link: string, threadIds: readonly number[], handlers: LinkHandlers) {
    this.#handlers = handlers;
    for (const threadId of threadIds) {
      const t = {
        up: new BroadcastChannel(upName(link, threadId)),
        down: new BroadcastChannel(downName(link, threadId)),
        replies: [] as Reply[],
        flushQueued: false,
      };
      t.up.onmessage = (ev) => this.#receive(threadId, (ev as MessageEvent).data as Up);
      // Referenced: a worker's calls (its writes) must be answered even when nothing else on
      // this thread is pending. The database's close() closes them.
      this.#threads.set(threadId, t);
    }
  }

  /** Sends a control message to every worker. */
  control(c: LinkControl): void {
    if (this.#closed) return;
    for (const t of this.#threads.values()) t.down.postMessage({ control: c } satisfies Down);
  }

  #receive(threadId: number, msg: Up): void {
    this.batches++;
    for (const c of msg.calls) {
      this.calls++;
      let value: unknown;
      try {
        const fn = Object.hasOwn(this.#handlers, c.method) ? this.#handlers[c.method] : undefined;
        if (fn === undefined) throw new InternalError(`the database thread has no method ${JSON.stringify(c.method)} for a worker`);
        value = (fn as (...args: readonly unknown[]) => unknown)(...c.args);
      } catch (err) {
        this.#reply(threadId, { id: c.id, ok: false, error: toWire(err) });
        continue;
      }
      if (value instanceof Promise) {
        value.then(
          (v: unknown) => this.#reply(threadId, { id: c.id, ok: true, value: v }),
          (err: unknown) => this.#reply(threadId, { id: c.id, ok: false, error: toWire(err) }),
        );
      } else this.#reply(threadId, { id: c.id, ok: true, value });
    }
  }

  #reply(threadId: number, r: Reply): void {
    const t = this.#threads.get(threadId);
    if (t === undefined || this.#closed) return;
    t.replies.push(r);
    if (t.flushQueued) return;
    t.flushQueued = true;
    setImmediate(() => {
      t.flushQueued = false;
      const replies = t.replies;
      t.replies = [];
      if (replies.length === 0 || this.#closed) return;
      try {
        t.down.postMessage({ replies } satisfies Down);
      } catch {
        // A value the clone cannot carry: answer each alone, the bad one as an error.
        for (const one of replies) {
          try {
            t.down.postMessage({ replies: [one] } satisfies Down);
          } catch (err) {
            t.down.postMessage({
              replies: [
                { id: one.id, ok: false, error: toWire(new InternalError(`cannot send an answer to a worker: ${(err as Error).message}`)) },
              ],
            } satisfies Down);
          }
        }
      }
    });
  }

  close(): void {
    if (this.#closed) return;
    this.control({ op: 'stop' });
    this.#closed = true;
    for (const t of this.#threads.values()) {
      t.up.close();
      t.down.close();
    }
  }
}
