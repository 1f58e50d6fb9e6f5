/**
 * `workerNice`: each query worker thread lowers its own priority, and only its own. Checked
 * against the kernel's view of every thread of this process (/proc/self/task/TID/stat), not just
 * against what the workers report.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { getPriority } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInputError } from 'tidal-load';
import { TidalDb } from '../src/db.js';

const SCHEMA = { signals: [{ name: 'view', halfLifeMs: 3_600_000 }] };
const linux = process.platform === 'linux';

/** The nice value of each thread of this process, by thread id (field 19 of its stat line). */
function threadNices(): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      out.set(Number(tid), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]));
    } catch {
      // A thread that exited between the listing and the read.
    }
  }
  return out;
}

let db: TidalDb | undefined;
afterEach(async () => {
  await db?.close();
  db = undefined;
});

describe('workerNice', () => {
  it.skipIf(!linux)('sets the nice value of the query worker threads alone', async () => {
    const before = [...threadNices().values()].filter((n) => n === 7).length;
    db = await TidalDb.builder().ephemeral().schema(SCHEMA).workers(2).workerNice(7).open();
    const warmed = await db.warm();
    expect(warmed.map((w) => w.nice)).toEqual([7, 7]);
    expect(warmed.some((w) => w.niceWarning !== undefined)).toBe(false);
    const nices = threadNices();
    expect([...nices.values()].filter((n) => n === 7).length - before).toBe(2);
    // The calling thread (its thread id is the process id) keeps the process's own value.
    expect(nices.get(process.pid)).toBe(getPriority());
    // Queries still run on the lowered workers.
    await db.upsertItems([{ id: 'a', text: 'alpha' }]);
    expect((await db.search({ text: 'alpha' })).hits.map((h) => h.id)).toEqual(['a']);
  });

  it("leaves the workers at the process's value by default", async () => {
    db = await TidalDb.builder().ephemeral().schema(SCHEMA).workers(1).open();
    const warmed = await db.warm();
    expect(warmed.map((w) => w.nice)).toEqual([getPriority()]);
  });

  it.each([20, -1, 2.5, '5' as unknown as number])('refuses workerNice %j, naming it', async (bad) => {
    const err = await TidalDb.builder()
      .ephemeral()
      .schema(SCHEMA)
      .workerNice(bad)
      .open()
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(InvalidInputError.is(err)).toBe(true);
    expect((err as InvalidInputError).field).toBe('workerNice');
  });
});
