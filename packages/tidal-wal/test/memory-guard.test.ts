import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInputError, MemoryPressureError, type TidalWarning } from 'tidal-load';
import { GroupCommit, MemoryGuard, SignalLog, resolveMemoryGuardOptions } from '../src/index.js';
import { AUTO_FLOOR_MIN_BYTES, MEMORY_SAMPLE_INTERVAL_MS, autoFloorBytes, parseMeminfo } from '../src/memory-guard.js';
import { openTestDb } from './db.js';

const MiB = 1024 * 1024;
const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tidal-mg-'));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A meminfo file in the kernel's format, figures in MiB. */
function meminfo(totalMiB: number, availableMiB: number, swapFreeMiB: number): string {
  return [
    `MemTotal:       ${totalMiB * 1024} kB`,
    `MemFree:        ${Math.floor(availableMiB / 2) * 1024} kB`,
    `MemAvailable:   ${availableMiB * 1024} kB`,
    `Cached:         1234 kB`,
    `SwapTotal:      ${swapFreeMiB * 1024} kB`,
    `SwapFree:       ${swapFreeMiB * 1024} kB`,
    '',
  ].join('\n');
}

function fixture(totalMiB: number, availableMiB: number, swapFreeMiB = 0) {
  const path = join(tempDir(), 'meminfo');
  writeFileSync(path, meminfo(totalMiB, availableMiB, swapFreeMiB));
  return {
    path,
    set: (a: number, s = 0) => writeFileSync(path, meminfo(totalMiB, a, s)),
  };
}

describe('parseMeminfo', () => {
  it('reads MemTotal and MemAvailable + SwapFree in bytes', () => {
    expect(parseMeminfo(meminfo(1000, 300, 200))).toEqual({ totalBytes: 1000 * MiB, availableBytes: 500 * MiB });
  });

  it('returns undefined when a line is missing', () => {
    expect(parseMeminfo('MemTotal: 100 kB\nSwapFree: 0 kB\n')).toBeUndefined();
    expect(parseMeminfo('')).toBeUndefined();
  });
});

describe('MemoryGuard options', () => {
  it("defaults to 'auto' = max(32 MiB, 2 % of MemTotal)", () => {
    expect(resolveMemoryGuardOptions()).toEqual({ floorBytes: 'auto', meminfoPath: '/proc/meminfo' });
    expect(autoFloorBytes(24 * 1024 * MiB)).toBe(Math.floor(24 * 1024 * MiB * 0.02));
    expect(autoFloorBytes(512 * MiB)).toBe(AUTO_FLOOR_MIN_BYTES);
    const f = fixture(10_000, 5_000);
    expect(MemoryGuard.create(resolveMemoryGuardOptions({ meminfoPath: f.path }), () => {})!.floorBytes).toBe(200 * MiB);
  });

  it('refuses a floor that is not a whole number of bytes, naming the option', () => {
    for (const bad of [1.5, -1, Number.NaN, Number.POSITIVE_INFINITY, '32', '32MiB', null, true]) {
      expect(() => resolveMemoryGuardOptions({ floorBytes: bad as never })).toThrow(InvalidInputError);
    }
    expect(() => resolveMemoryGuardOptions({ floorBytes: 1.5 })).toThrow(
      /memoryGuard\.floorBytes must be 'auto', 0 \(off\) or a whole number of bytes, got 1\.5 \(number\)/,
    );
    expect(() => resolveMemoryGuardOptions({ meminfoPath: '' })).toThrow(/memoryGuard\.meminfoPath/);
  });

  it('is off with a floor of 0, without reading anything', () => {
    expect(MemoryGuard.create({ floorBytes: 0, meminfoPath: '/nonexistent/meminfo' }, () => {})).toBeNull();
  });

  it("is off with a warning on a host without the file when the floor is 'auto'", () => {
    const warnings: TidalWarning[] = [];
    expect(MemoryGuard.create({ floorBytes: 'auto', meminfoPath: join(tempDir(), 'absent') }, (w) => warnings.push(w))).toBeNull();
    expect(warnings.map((w) => w.code)).toEqual(['TIDAL_MEMORY_GUARD_UNAVAILABLE']);
  });

  it('refuses to open when an explicit floor cannot be enforced, or the file is not meminfo', () => {
    expect(() => MemoryGuard.create({ floorBytes: 64 * MiB, meminfoPath: join(tempDir(), 'absent') }, () => {})).toThrow(
      /memoryGuard\.meminfoPath/,
    );
    const garbled = join(tempDir(), 'meminfo');
    writeFileSync(garbled, 'not a meminfo file\n');
    expect(() => MemoryGuard.create({ floorBytes: 'auto', meminfoPath: garbled }, () => {})).toThrow(InvalidInputError);
  });
});

describe('MemoryGuard sampling', () => {
  it('refuses under the floor and admits over it, counting free swap as available', () => {
    const f = fixture(4096, 100, 0);
    const guard = MemoryGuard.create({ floorBytes: 128 * MiB, meminfoPath: f.path }, () => {})!;
    const err = (() => {
      try {
        guard.admit();
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(MemoryPressureError);
    expect(err).toMatchObject({ code: 'TIDAL_MEMORY_PRESSURE', availableBytes: 100 * MiB, floorBytes: 128 * MiB });

    const withSwap = fixture(4096, 100, 50);
    const ok = MemoryGuard.create({ floorBytes: 128 * MiB, meminfoPath: withSwap.path }, () => {})!;
    expect(() => ok.admit()).not.toThrow();
    expect(ok.availableBytes).toBe(150 * MiB);
  });

  it('reads the file at most once per interval, on the first write after the sample went stale', () => {
    const f = fixture(4096, 1000);
    const clock = { now: 0 };
    const guard = MemoryGuard.create(
      { floorBytes: 128 * MiB, meminfoPath: f.path },
      () => {},
      () => clock.now,
    )!;
    guard.admit();
    f.set(10); // memory runs out
    clock.now = MEMORY_SAMPLE_INTERVAL_MS - 1;
    expect(() => guard.admit()).not.toThrow(); // still the old sample: no read yet
    clock.now = MEMORY_SAMPLE_INTERVAL_MS;
    expect(() => guard.admit()).toThrow(MemoryPressureError); // stale: this write re-read it
    f.set(1000); // memory is back
    clock.now = MEMORY_SAMPLE_INTERVAL_MS * 2 - 1;
    expect(() => guard.admit()).toThrow(MemoryPressureError);
    clock.now = MEMORY_SAMPLE_INTERVAL_MS * 2;
    expect(() => guard.admit()).not.toThrow();
  });

  it('keeps the last sample, with one warning, when a re-read fails', () => {
    const f = fixture(4096, 1000);
    const clock = { now: 0 };
    const warnings: TidalWarning[] = [];
    const guard = MemoryGuard.create(
      { floorBytes: 128 * MiB, meminfoPath: f.path },
      (w) => warnings.push(w),
      () => clock.now,
    )!;
    writeFileSync(f.path, 'garbage');
    for (let i = 1; i <= 3; i++) {
      clock.now = i * MEMORY_SAMPLE_INTERVAL_MS;
      expect(() => guard.admit()).not.toThrow();
    }
    expect(guard.availableBytes).toBe(1000 * MiB);
    expect(warnings.map((w) => w.code)).toEqual(['TIDAL_MEMORY_GUARD_STALE']);
  });

  it('refuses writes in the group commit before anything is enqueued', async () => {
    const f = fixture(4096, 10);
    const guard = MemoryGuard.create({ floorBytes: 128 * MiB, meminfoPath: f.path }, () => {})!;
    const db = openTestDb(join(tempDir(), 'db.sqlite'));
    const log = new SignalLog(db);
    const gc = new GroupCommit<{ n: number }>(
      db,
      {
        commit: (events, firstSeq) =>
          events.forEach((_, i) => log.appendAt(firstSeq + i, { ordinal: 0, kind: 0, weight: 1, at: 0, session: null })),
      },
      0,
      { maxDelayMs: 0 },
      { memoryGuard: guard },
    );
    let built = false;
    await expect(gc.enqueue(() => ((built = true), [{ n: 1 }]))).rejects.toBeInstanceOf(MemoryPressureError);
    expect(built).toBe(false);
    expect(gc.depth).toBe(0);
    expect(gc.stats.refusedMemory).toBe(1);
    gc.close();
    expect([...log.replay(0)].length).toBe(0);
    db.close();
  });
});
