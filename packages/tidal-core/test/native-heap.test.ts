/**
 * The native heap's trim: memory the process freed inside glibc's arenas (holes between live
 * blocks, which freeing alone never gives back) returns to the kernel, and the stats count it.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { NativeHeap } from '../src/native-heap.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const MiB = 1024 * 1024;

// glibc on Linux (the platforms CI runs); elsewhere the trim is a documented no-op.
const glibc =
  process.platform === 'linux' &&
  Boolean((process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header?.glibcVersionRuntime);

describe.runIf(glibc)('NativeHeap', () => {
  it('gives back the free pages between live blocks, and counts them', async () => {
    const heap = new NativeHeap();
    await heap.trim();
    expect(heap.stats()).toMatchObject({ available: true, trims: 1 });
    const released0 = heap.stats().releasedBytes;

    // 2 000 blocks of 100 KB (below glibc's mmap threshold: they come from an arena), every tenth
    // kept: ~180 MB freed in holes a free() cannot return, since live blocks sit above each.
    const blocks: Buffer[] = Array.from({ length: 2000 }, () => Buffer.allocUnsafeSlow(100_000).fill(1));
    const kept = blocks.filter((_, i) => i % 10 === 9);
    blocks.length = 0;
    gc();
    gc();
    await heap.trim();
    const s = heap.stats();
    expect(s.trims).toBe(2);
    expect(s.releasedBytes - released0).toBeGreaterThan(64 * MiB);
    expect(s.lastMs).toBeGreaterThanOrEqual(0);
    expect(kept.every((b) => b[0] === 1)).toBe(true);
  });
});
