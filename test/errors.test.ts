import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import * as tidal from 'tidal-core';
import { ERROR_CODES, TidalError } from 'tidal-core';
import * as load from 'tidal-load';

const doc = readFileSync(new URL('../docs/errors.md', import.meta.url), 'utf8');
const documented = [...doc.matchAll(/^\| `(TIDAL_[A-Z_]+)` \| `(\w+)` \|/gm)].map((m) => ({ code: m[1]!, cls: m[2]! }));

describe('docs/errors.md', () => {
  it('lists every error code, and only those', () => {
    expect(documented.map((d) => d.code).sort()).toEqual([...ERROR_CODES].sort());
  });

  it('names, for each code, an exported class that carries that code', () => {
    for (const { code, cls } of documented) {
      // The errors of the shared limits are raised by tidal-fleet, which takes them from tidal-load.
      const ctor = (tidal as Record<string, unknown>)[cls] ?? (load as Record<string, unknown>)[cls];
      expect(typeof ctor, `${cls} is exported from tidal-core or tidal-load`).toBe('function');
      expect((ctor as { prototype: unknown }).prototype instanceof TidalError, `${cls} extends TidalError`).toBe(true);
      const sample = sampleOf(cls);
      expect(sample.code).toBe(code);
      expect(TidalError.is(sample)).toBe(true);
    }
  });
});

function sampleOf(cls: string): TidalError {
  switch (cls) {
    case 'InvalidInputError':
      return new tidal.InvalidInputError('limit', 'a whole number', 0);
    case 'ClosedError':
      return new tidal.ClosedError('retrieve');
    case 'CapacityError':
      return new tidal.CapacityError('item ids', 10, 'raise it');
    case 'InternalError':
      return new tidal.InternalError('boom');
    case 'OverloadedError':
      return new tidal.OverloadedError(1001, 1000, 5);
    case 'BackpressureError':
      return new tidal.BackpressureError(4096, 4096, 12);
    case 'MemoryPressureError':
      return new tidal.MemoryPressureError(1, 2);
    case 'RateLimitedError':
      return new tidal.RateLimitedError('agent-1', 'session-1', 5, 200, 10);
    case 'SessionClosedError':
      return new tidal.SessionClosedError('session-1', 'signal');
    case 'WriterFailedError':
      return new tidal.WriterFailedError(new TypeError('bug'));
    case 'AbortedError':
      return new tidal.AbortedError('retrieve', new Error('client went away'));
    case 'TimeoutError':
      return new tidal.TimeoutError('retrieve', 50);
    case 'SlotTimeoutError':
      return new load.SlotTimeoutError('embedder', 2, 150);
    case 'PooledSessionError':
      return new load.PooledSessionError('backend pid 10 then 11');
    case 'UnexpectedReplyError':
      return new load.UnexpectedReplyError('redis fixed window', '0, 1 or 2', 7);
    case 'DirectoryLockedError':
      return new load.DirectoryLockedError('/data', 4242, '2026-01-01T00:00:00.000Z');
    case 'CursorExpiredError':
      return new load.CursorExpiredError('evicted', 'was evicted');
    case 'MissingPackageError':
      return new load.MissingPackageError('tidal-fleet', '--redis', 'is not installed', 'npm install tidal-fleet');
    case 'SchemaChangeError':
      return new load.SchemaChangeError([{ change: 'half-life-changed', field: 'schema.signals.view.halfLifeMs', stored: 1, given: 2 }]);
    case 'DependencyUnavailableError':
      return new load.DependencyUnavailableError('embedder', 'shed', 0, 'bulkhead full');
    default:
      throw new Error(`no sample for ${cls}: add one when adding an error class`);
  }
}
