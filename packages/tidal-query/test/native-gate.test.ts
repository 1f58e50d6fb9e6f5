/**
 * The native gate (native-gate.ts): an exit waits for a thread inside a call into usearch's addon,
 * and no call starts once the exit has begun. The exiting side is a worker running `closeGate`;
 * the thread inside is this test's, which leaves only after it has seen the exit's mark, so what
 * each side sees does not depend on timing.
 */
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { InternalError } from 'tidal-load';
import { adoptNativeGate, enterNative, leaveNative, nativeGateCells } from '../src/native-gate.js';

const GATE_URL = new URL('../dist/native-gate.js', import.meta.url).href;

const EXITER = `
const { parentPort, workerData } = require('node:worker_threads');
import(workerData.url).then(({ closeGate }) => {
  parentPort.postMessage(closeGate(new Int32Array(workerData.gate), workerData.waitMs));
});
`;

/** Resolves once `check` holds, looking between turns of the event loop. */
async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((resolve) => setImmediate(resolve));
}

afterEach(() => adoptNativeGate(null));

describe('the native gate', () => {
  it('an exit waits for the thread inside a call, and a call after the exit began is refused', async () => {
    const gate = new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT);
    adoptNativeGate(gate);
    const cells = nativeGateCells()!;
    enterNative();
    expect(Atomics.load(cells, 0)).toBe(1);

    const exiter = new Worker(EXITER, { eval: true, workerData: { url: GATE_URL, gate, waitMs: 30_000 } });
    const stillInside = new Promise<number>((resolve) => exiter.once('message', resolve));
    await until(() => Atomics.load(cells, 1) === 1);

    expect(() => enterNative()).toThrow(InternalError);
    expect(Atomics.load(cells, 0)).toBe(1); // the refused call counted itself out again
    leaveNative();
    expect(await stillInside).toBe(0);
    await exiter.terminate();
  });

  it('an exit waits no longer than its bound, and says how many threads are still inside', async () => {
    // The wait runs in a worker: an exit that ignored its bound would spin there, and this test
    // would time out rather than hang the suite's thread.
    const gate = new SharedArrayBuffer(2 * Int32Array.BYTES_PER_ELEMENT);
    adoptNativeGate(gate);
    enterNative();
    enterNative();
    const exiter = new Worker(EXITER, { eval: true, workerData: { url: GATE_URL, gate, waitMs: 0 } });
    try {
      expect(await new Promise<number>((resolve) => exiter.once('message', resolve))).toBe(2);
    } finally {
      await exiter.terminate();
    }
  }, 30_000);

  it('a thread with no gate calls freely', () => {
    adoptNativeGate(null);
    expect(nativeGateCells()).toBeNull();
    expect(() => {
      enterNative();
      leaveNative();
    }).not.toThrow();
  });
});
