import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as local from '../src/index.js';
import { ERROR_CODES, OverloadedError, TidalError, type ErrorCode } from '../src/index.js';

type ErrorModule = typeof local;

/** One instance of each error class, built from a given copy of the package. */
function samples(m: ErrorModule): Record<ErrorCode, TidalError> {
  return {
    TIDAL_INVALID_INPUT: new m.InvalidInputError('limit', 'a whole number', 0),
    TIDAL_CLOSED: new m.ClosedError('retrieve'),
    TIDAL_CAPACITY: new m.CapacityError('item ids', 10, 'raise it'),
    TIDAL_INTERNAL: new m.InternalError('boom'),
    TIDAL_OVERLOADED: new m.OverloadedError(256, 256, 5),
    TIDAL_BACKPRESSURE: new m.BackpressureError(4096, 4096, 12),
    TIDAL_MEMORY_PRESSURE: new m.MemoryPressureError(1, 2),
    TIDAL_RATE_LIMITED: new m.RateLimitedError('agent-1', 'session-1', 5, 200, 10),
    TIDAL_SESSION_CLOSED: new m.SessionClosedError('session-1', 'signal'),
    TIDAL_WRITER_FAILED: new m.WriterFailedError(new TypeError('bug')),
    TIDAL_ABORTED: new m.AbortedError('retrieve', new Error('gone')),
    TIDAL_TIMEOUT: new m.TimeoutError('retrieve', 5),
    TIDAL_SLOT_TIMEOUT: new m.SlotTimeoutError('embedder', 2, 150),
    TIDAL_POOLED_SESSION: new m.PooledSessionError('backend pid 10 then 11'),
    TIDAL_UNEXPECTED_REPLY: new m.UnexpectedReplyError('redis fixed window', '0, 1 or 2', 7),
    TIDAL_DEPENDENCY_UNAVAILABLE: new m.DependencyUnavailableError('embedder', 'shed', 0, 'bulkhead full'),
    TIDAL_DIRECTORY_LOCKED: new m.DirectoryLockedError('/data', 4242, '2026-01-01T00:00:00.000Z'),
    TIDAL_CURSOR_EXPIRED: new m.CursorExpiredError('expired', 'expired'),
    TIDAL_MISSING_PACKAGE: new m.MissingPackageError('tidal-fleet', '--redis', 'is not installed', 'npm install tidal-fleet'),
    TIDAL_SCHEMA_INCOMPATIBLE: new m.SchemaChangeError([
      { change: 'kind-removed', field: 'schema.signals.like', stored: 'like', given: undefined },
    ]),
  };
}

/** Each code's class, looked up by its sample's name in a given copy of the package. */
function classes(m: ErrorModule): Record<ErrorCode, { is(value: unknown): boolean; name: string }> {
  const byName = m as unknown as Record<string, { is(value: unknown): boolean; name: string }>;
  const out = {} as Record<ErrorCode, { is(value: unknown): boolean; name: string }>;
  for (const [code, sample] of Object.entries(samples(m)) as [ErrorCode, TidalError][]) out[code] = byName[sample.constructor.name]!;
  return out;
}

describe('type guards', () => {
  it('each class recognises its own code and no other', () => {
    const all = samples(local);
    const guards = classes(local);
    expect(Object.keys(all).sort()).toEqual([...ERROR_CODES].sort());
    for (const code of ERROR_CODES) {
      for (const other of ERROR_CODES) {
        expect(guards[code].is(all[other]), `${guards[code].name}.is(${all[other].constructor.name})`).toBe(code === other);
      }
      expect(TidalError.is(all[code])).toBe(true);
    }
  });

  it('are not fooled by a look-alike: the code alone, or the marker alone, is not enough', () => {
    const lookalike = Object.assign(new Error('overloaded'), { code: 'TIDAL_OVERLOADED' });
    expect(OverloadedError.is(lookalike)).toBe(false);
    expect(TidalError.is(lookalike)).toBe(false);
    const markedOnly = new TidalError('TIDAL_CLOSED', 'closed');
    expect(TidalError.is(markedOnly)).toBe(true);
    expect(OverloadedError.is(markedOnly)).toBe(false);
    for (const value of [null, undefined, 0, 'TIDAL_OVERLOADED', {}, { code: 'TIDAL_OVERLOADED' }]) {
      expect(OverloadedError.is(value)).toBe(false);
      expect(TidalError.is(value)).toBe(false);
    }
  });

  it('narrow to the class, so its fields can be read without a cast', () => {
    const caught: unknown = new OverloadedError(300, 256, 7);
    if (!OverloadedError.is(caught)) throw new Error('not recognised');
    expect([caught.inFlight, caught.admissionLimit, caught.retryAfterMs]).toEqual([300, 256, 7]);
  });

  describe('across two copies of the package', () => {
    const dist = fileURLToPath(new URL('../dist', import.meta.url));
    let dir: string;
    let copy: ErrorModule;

    beforeAll(async () => {
      // A second, separately loaded copy of the built package: what a duplicated dependency gives.
      // Its source-map comments are dropped: the maps point at sources the copy does not have.
      dir = mkdtempSync(join(tmpdir(), 'tidal-load-copy-'));
      for (const file of readdirSync(dist).filter((f) => f.endsWith('.js'))) {
        const code = readFileSync(join(dist, file), 'utf8').replace(/^\/\/# sourceMappingURL=.*$/m, '');
        writeFileSync(join(dir, file), code);
      }
      copy = (await import(pathToFileURL(join(dir, 'index.js')).href)) as ErrorModule;
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it('recognise an error from the other copy by its code, where instanceof fails', () => {
      expect(copy.OverloadedError).not.toBe(OverloadedError);
      const theirs = samples(copy);
      const ours = samples(local);
      const localGuards = classes(local);
      const copyGuards = classes(copy);
      for (const code of ERROR_CODES) {
        expect(theirs[code] instanceof TidalError).toBe(false);
        expect(TidalError.is(theirs[code])).toBe(true);
        for (const other of ERROR_CODES) {
          expect(localGuards[code].is(theirs[other]), `local ${code} vs copy ${other}`).toBe(code === other);
          expect(copyGuards[code].is(ours[other]), `copy ${code} vs local ${other}`).toBe(code === other);
        }
      }
    });
  });
});

describe('fields', () => {
  const base = new Set(['code', 'name', 'message', 'stack', 'cause']);
  const fieldsOf = (e: TidalError) => Object.keys(e).filter((k) => !base.has(k));

  it('carry what the constructor was given, under names that say what it is', () => {
    const all = samples(local);
    expect(all.TIDAL_CAPACITY).toMatchObject({ resource: 'item ids', capacity: 10 });
    expect(all.TIDAL_OVERLOADED).toMatchObject({ inFlight: 256, admissionLimit: 256, retryAfterMs: 5 });
    expect(all.TIDAL_BACKPRESSURE).toMatchObject({ depth: 4096, maxQueueEvents: 4096, retryAfterMs: 12 });
    expect(all.TIDAL_RATE_LIMITED).toMatchObject({
      agentId: 'agent-1',
      sessionId: 'session-1',
      ratePerSecond: 5,
      burst: 10,
      retryAfterMs: 200,
    });
    expect(all.TIDAL_MEMORY_PRESSURE).toMatchObject({ availableBytes: 1, floorBytes: 2 });
    expect(all.TIDAL_RATE_LIMITED.message).toBe(
      'agent "agent-1" session "session-1" is over its limit of 5 signals/s (bursts of 10); retry after 200 ms',
    );
    expect(all.TIDAL_BACKPRESSURE.message).toBe('write queue depth 4096 is at or over maxQueueEvents 4096; retry after 12 ms');
  });

  it('give a field name one meaning: a name two classes share means the same thing in both', () => {
    const owners = new Map<string, string[]>();
    for (const e of Object.values(samples(local))) {
      for (const f of fieldsOf(e)) owners.set(f, [...(owners.get(f) ?? []), e.name]);
    }
    const shared = [...owners]
      .filter(([, cls]) => cls.length > 1)
      .map(([f]) => f)
      .sort();
    // The same quantity wherever they appear: a protected dependency's name, the request field the
    // refused value was given in, why the call could not be served, a wait in milliseconds, a session's id.
    expect(shared).toEqual(['dependency', 'field', 'reason', 'retryAfterMs', 'sessionId']);
    // `limit` is a result count in requests; no error uses it for a cap, a depth or a rate.
    expect(owners.has('limit')).toBe(false);
  });
});
