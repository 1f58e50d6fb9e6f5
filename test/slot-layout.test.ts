import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { TidalDb, type SchemaDefinition } from 'tidal-core';
import { LAYOUT1_KINDS, layout1Bytes, layout1Events, layout1Now } from '../packages/tidal-query/test/layout1-fixture.js';

/*
 * A database whose signal checkpoint was written in slot layout 1 (1 024-byte slots) opens with
 * the same signal state: the checkpoint is converted on import, and the next checkpoint rewrites it
 * in the current layout. The layout-1 rows are the fixture the layout-1 store wrote for the same
 * events (packages/tidal-query/test/layout1-fixture.ts).
 */

const dir = mkdtempSync(join(tmpdir(), 'tidal-layout-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const SCHEMA: SchemaDefinition = {
  signals: LAYOUT1_KINDS.map((k) => ({ name: k.name, halfLifeMs: k.halfLifeMs, velocity: true })),
  metadata: {},
};
const events = layout1Events();
const now = layout1Now(events);
const ids = [0, 1, 2, 3].map((o) => `item-${o}`);

async function open(): Promise<TidalDb> {
  return TidalDb.builder()
    .path(dir)
    .schema(SCHEMA)
    .workers(1)
    .clock(() => now)
    .open();
}

function rows(): { layout: string | undefined; bytes: number } {
  const db = new Database(join(dir, 'tidal.db'), { readonly: true });
  try {
    const layout = db.prepare("SELECT value FROM tidal_meta WHERE key = 'checkpoint_slot_layout'").pluck().get() as string | undefined;
    const bytes = db.prepare('SELECT COALESCE(SUM(length(data)), 0) FROM signal_checkpoint').pluck().get() as number;
    return { layout, bytes };
  } finally {
    db.close();
  }
}

describe('a signal checkpoint in slot layout 1', () => {
  it('opens with the signal state it held, and is rewritten in the current layout as it opens', async () => {
    const first = await open();
    // One batch: ordinals and slots are handed out in the order of first appearance, as the fixture's store did.
    await first.signals(events.map((e) => ({ item: ids[e.ordinal]!, kind: LAYOUT1_KINDS[e.kind]!.name, weight: e.weight, at: e.at })));
    const expected = ids.map((id) => first.itemSignals(id));
    await first.close();
    expect(rows()).toEqual({ layout: '2', bytes: 12 * 256 });

    // What a file written before layout 2 holds: the layout-1 rows, and no layout key.
    const raw = new Database(join(dir, 'tidal.db'));
    raw.transaction(() => {
      raw.prepare('DELETE FROM signal_checkpoint').run();
      raw.prepare('INSERT INTO signal_checkpoint (chunk, data) VALUES (0, ?)').run(Buffer.from(layout1Bytes()));
      raw.prepare("DELETE FROM tidal_meta WHERE key = 'checkpoint_slot_layout'").run();
    })();
    raw.close();
    expect(rows()).toEqual({ layout: undefined, bytes: 12 * 1024 });

    const second = await open();
    // The log was covered by the checkpoint at close, so this state is the converted checkpoint's,
    // and the open rewrote the rows in layout 2.
    expect(rows()).toEqual({ layout: '2', bytes: 12 * 256 });
    expect(ids.map((id) => second.itemSignals(id))).toEqual(expected);
    expect(expected[0]!.view!.count).toBeGreaterThan(0);
    await second.close();
    expect(rows()).toEqual({ layout: '2', bytes: 12 * 256 });

    const third = await open();
    expect(ids.map((id) => third.itemSignals(id))).toEqual(expected);
    await third.close();
  });
});
