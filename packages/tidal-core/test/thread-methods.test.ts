/**
 * The one table of what a worker thread's handle does (src/thread-methods.ts): every method of
 * `TidalDb` is in it or named as not for threads, and the handle and the database thread's
 * handlers are made from it.
 */
import { describe, expect, it } from 'vitest';
import { TidalDb } from '../src/db.js';
import { NOT_FOR_THREADS, THREAD_METHODS, dbHandlers } from '../src/thread-methods.js';
import { ThreadDb } from '../src/thread-db.js';

/** `TidalDb`'s public members (methods and getters), from its prototype. */
function members(proto: object): string[] {
  return Object.getOwnPropertyNames(proto).filter((k) => k !== 'constructor');
}

describe('the thread method table', () => {
  it('every TidalDb member is in the table or named as not for threads, and nothing else is', () => {
    const listed = [...THREAD_METHODS, ...Object.keys(NOT_FOR_THREADS)].sort();
    expect(members(TidalDb.prototype).sort()).toEqual(listed);
  });

  it("a thread's handle has each method of the table, and forwards the ones it does not run itself", async () => {
    const calls: [string, unknown[]][] = [];
    const handle = Object.create(ThreadDb.prototype) as ThreadDb;
    // Only the forwarding is exercised: forward() is replaced, so no link or database is needed.
    Object.defineProperty(handle, 'forward', { value: (m: string, args: unknown[]) => (calls.push([m, args]), Promise.resolve(m)) });
    for (const m of THREAD_METHODS) {
      expect(typeof (handle as unknown as Record<string, unknown>)[m], m).toBe('function');
      if (m === 'retrieve' || m === 'search') continue;
      await expect((handle as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[m]!('x', 2)).resolves.toBe(m);
    }
    expect(calls.map(([m]) => m)).toEqual(THREAD_METHODS.filter((m) => m !== 'retrieve' && m !== 'search'));
    expect(calls.every(([, args]) => args.length === 2 && args[0] === 'x' && args[1] === 2)).toBe(true);
  });

  it("the database thread's handlers call the database's method of the same name with the arguments as they came", () => {
    const seen: [string, unknown[]][] = [];
    const fake = Object.fromEntries(THREAD_METHODS.map((m) => [m, (...args: unknown[]) => (seen.push([m, args]), m)]));
    const handlers = dbHandlers(fake as unknown as TidalDb);
    expect(Object.keys(handlers).sort()).toEqual([...THREAD_METHODS].sort());
    for (const m of THREAD_METHODS) expect((handlers[m] as (...a: unknown[]) => unknown)(1, 'b')).toBe(m);
    expect(seen).toEqual(THREAD_METHODS.map((m) => [m, [1, 'b']]));
  });
});
