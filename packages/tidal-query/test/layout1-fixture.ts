import fs from 'node:fs';
import { mulberry32 } from './helpers/random.js';
import type { SignalKindSpec } from '../src/signals/store.js';

/*
 * A checkpoint in slot layout 1 (1 024-byte slots, before layout 2), written by that layout's store
 * (commit ac1aecc): `fixtures/slots-layout1.bin` is the used prefix of its slot arena after applying
 * `layout1Events()` in order to `SignalStore.create({ kinds: LAYOUT1_KINDS, maxOrdinals: 16,
 * maxSlots: 64 })`. The events are seeded, so the same list reproduces here and in the tests that
 * read the fixture: applied to a layout-2 store they must give what importing the fixture gives.
 */

const MIN = 60_000;
const HOUR = 3_600_000;
/** Monday 2025-01-06 12:00 UTC. */
export const LAYOUT1_T0 = Date.UTC(2025, 0, 6, 12, 0, 0);

export const LAYOUT1_KINDS: SignalKindSpec[] = [
  { name: 'view', halfLifeMs: HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true },
  { name: 'like', halfLifeMs: 2 * HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true },
  { name: 'share', halfLifeMs: 4 * HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true },
];

export interface Layout1Event {
  ordinal: number;
  kind: number;
  weight: number;
  at: number;
}

/**
 * 600 events on ordinals 0..3 (first seen in that order) and 3 kinds over about five weeks: steps of
 * up to 40 minutes, now and then a jump of two days (more than a lap of every minute ring), and one
 * event in five late by up to nine days (some too old for any ring).
 */
export function layout1Events(): Layout1Event[] {
  const rand = mulberry32(0x1a7e);
  const out: Layout1Event[] = [];
  let clock = LAYOUT1_T0;
  for (let i = 0; i < 600; i++) {
    clock += rand() < 0.02 ? 48 * HOUR : Math.floor(rand() * 40 * MIN);
    const late = rand() < 0.2 ? Math.floor(rand() * 9 * 24 * HOUR) : 0;
    const ordinal = i < 4 ? i : Math.floor(rand() * 4);
    const kind = Math.floor(rand() * 3);
    out.push({ ordinal, kind, weight: Math.round(rand() * 50) / 10, at: Math.max(0, clock - late) });
  }
  return out;
}

/** The time just after the last event's clock: a reading time for the tests. */
export function layout1Now(events: readonly Layout1Event[]): number {
  return Math.max(...events.map((e) => e.at)) + 7 * MIN;
}

/** The fixture's bytes. */
export function layout1Bytes(): Uint8Array {
  return new Uint8Array(fs.readFileSync(new URL('./fixtures/slots-layout1.bin', import.meta.url)));
}
