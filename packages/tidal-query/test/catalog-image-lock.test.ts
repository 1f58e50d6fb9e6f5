/**
 * The catalog image's build lock (shared/catalog-image.ts): a thread that waits for it does the
 * work it was given while the holder says it reads rows from the table, once, and only then; the
 * lock is a hint with a deadline. The holder here is another thread's id written into the control
 * buffer, as a holder thread would leave it.
 */
import { describe, expect, it } from 'vitest';
import { CatalogShare, createCatalogShare } from '../src/shared/catalog-image.js';

const OTHER = 999;

function share(): { s: CatalogShare; control: Int32Array } {
  const init = createCatalogShare(`lock-test-${Math.random()}`, 1, 2);
  return { s: new CatalogShare(init), control: new Int32Array(init.control) };
}

describe('the catalog image build lock', () => {
  it('while the holder reads rows, a waiter runs its work once, then takes the lock when it is let go', () => {
    const { s, control } = share();
    control[0] = OTHER;
    control[3] = 1; // what readingRows(true) sets
    let runs = 0;
    const held = s.lock(5_000, () => {
      runs++;
      // The holder lets go when the work is done (the release a waiter is woken by).
      Atomics.store(control, 0, 0);
    });
    expect(held).toBe(true);
    expect(runs).toBe(1);
    expect(control[0]).not.toBe(0);
    s.unlock();
    expect(control[0]).toBe(0);
    s.close();
  });

  it('does no work while the holder loads a snapshot, and gives up at its deadline', () => {
    const { s, control } = share();
    control[0] = OTHER;
    let runs = 0;
    expect(s.lock(0, () => runs++)).toBe(false);
    expect(runs).toBe(0);
    // Not held: unlock leaves the other thread's lock alone.
    s.unlock();
    expect(control[0]).toBe(OTHER);
    s.readingRows(true);
    expect(control[3]).toBe(1);
    s.readingRows(false);
    expect(control[3]).toBe(0);
    expect(s.tryLock()).toBe(false);
    control[0] = 0;
    expect(s.tryLock()).toBe(true);
    s.unlock();
    expect(control[0]).toBe(0);
    s.close();
  });
});
