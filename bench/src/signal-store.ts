/// <reference lib="es2024.sharedmemory" />
/**
 * `npm run bench:store`: the capacity of the shared-memory signal state, on this machine.
 *
 * 1. Reservation: what creating stores costs the host. For a growable and a fixed reservation,
 *    `/proc/self/status` VmSize and VmRSS and `/proc/meminfo` Committed_AS before and after
 *    creating `--stores` stores of `--slots` slots and `--ordinals` ordinals × 3 kinds, and whether
 *    `child_process.spawnSync('true')` still works with them open. Then again with enough stores
 *    to reserve more than the host's RAM + swap, where heuristic overcommit refuses a fork whose
 *    private writable memory exceeds it.
 * 2. Memory: bytes per slot, and the resident growth for `--resident` slots taken.
 * 3. Speed: `apply` into a fresh store, a trending-style scan over every slot (the calls
 *    retrieve.ts makes per slot) and a full `read` per slot, for a store over growable buffers and
 *    one over fixed buffers, interleaved in `--rounds` rounds (medians reported); and plain element
 *    reads through a length-tracking view over a growable buffer, which Node 20 runs far slower
 *    than a fixed-length one (the reason the store remakes fixed-length views as it grows).
 *
 * With `--baseline DIR` (another built checkout), sections 2 and 3 also measure that tree's signal
 * store in the same process: its resident memory per slot first, then this tree's, and apply, scan
 * and read of the two trees' growable stores interleaved round by round (after ÷ before).
 *
 * Linux only (it reads /proc). Flags: `--stores N` (default 4), `--slots N` (default 4194304),
 * `--ordinals N` (default 4194304), `--scan-slots N` (default 200000), `--events N` (default
 * 1000000), `--rounds N` (default 7), `--resident N` (default 262144), `--baseline DIR`.
 */

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { SignalStore, SLOT_BYTES, type SignalKindSpec, type WindowName } from 'tidal-query';
import { mulberry32 } from './random.js';
import { Report, collectGarbage, fmtInt, fmtRatio, loadBaseline, nowMs, parseOptions } from './harness/index.js';

const opts = parseOptions('store', {
  stores: { type: 'int', default: 4, description: 'stores created for the reservation figures' },
  slots: { type: 'int', default: 4_194_304, description: 'slots per store' },
  ordinals: { type: 'int', default: 4_194_304, description: 'ordinals per store (× 3 kinds)' },
  'scan-slots': { type: 'int', default: 200_000, description: 'slots in the speed rounds' },
  events: { type: 'int', default: 1_000_000, description: 'events applied per speed round' },
  rounds: { type: 'int', default: 7, description: 'interleaved speed rounds; medians reported' },
  resident: { type: 'int', default: 262_144, description: 'slots taken for the resident-memory figure' },
  baseline: { type: 'string', description: "another built checkout: its signal store measured beside this one's" },
});
const baseline = loadBaseline(opts.baseline, ['tidal-query']);
/** A signal store class: this tree's, or the baseline's (the same API). */
type StoreClass = typeof SignalStore;
interface Tree {
  label: string;
  Store: StoreClass;
  slotBytes: number;
}
const trees: Tree[] = [{ label: 'this tree', Store: SignalStore, slotBytes: SLOT_BYTES }];
if (baseline !== undefined) {
  const other = await baseline.load<{ SignalStore: StoreClass; SLOT_BYTES: number }>('tidal-query');
  trees.unshift({ label: `baseline ${baseline.commit}`, Store: other.SignalStore, slotBytes: other.SLOT_BYTES });
}
const STORES = opts.stores;
const SLOTS = opts.slots;
const ORDINALS = opts.ordinals;
const SCAN_SLOTS = opts['scan-slots'];
const EVENTS = opts.events;
const ROUNDS = opts.rounds;
const RESIDENT = opts.resident;

const HOUR = 3_600_000;
const BASE = Date.UTC(2026, 0, 1);
const KINDS: SignalKindSpec[] = [
  { name: 'view', halfLifeMs: 6 * HOUR, windows: ['1h', '24h', '7d', 'all'], velocity: true },
  { name: 'like', halfLifeMs: 24 * HOUR, windows: ['24h', 'all'], velocity: false },
  { name: 'share', halfLifeMs: 72 * HOUR, windows: ['all'], velocity: false },
];
type Reservation = 'grow' | 'fixed';
const MODES: readonly Reservation[] = ['grow', 'fixed'];
const MiB = 2 ** 20;
const report = new Report('store', opts);
const log = (s = '') => report.line(s);

// ---------------------------------------------------------------------------------------------
// 1. Reservation and overcommit
// ---------------------------------------------------------------------------------------------

interface MemoryReading {
  vmSizeMiB: number;
  vmRssMiB: number;
  committedMiB: number;
}

function kib(text: string, key: string): number {
  const m = new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text);
  return m ? Number(m[1]) : Number.NaN;
}

function memory(): MemoryReading {
  const status = fs.readFileSync('/proc/self/status', 'utf8');
  const meminfo = fs.readFileSync('/proc/meminfo', 'utf8');
  return {
    vmSizeMiB: kib(status, 'VmSize') / 1024,
    vmRssMiB: kib(status, 'VmRSS') / 1024,
    committedMiB: kib(meminfo, 'Committed_AS') / 1024,
  };
}

function spawnWorks(): string {
  const r = spawnSync('true');
  return r.error ? ((r.error as NodeJS.ErrnoException).code ?? r.error.message) : 'ok';
}

function reservationRow(mode: Reservation, stores: number): string[] {
  collectGarbage();
  const before = memory();
  const held: SignalStore[] = [];
  let failure = '';
  try {
    for (let i = 0; i < stores; i++)
      held.push(SignalStore.create({ kinds: KINDS, maxOrdinals: ORDINALS, maxSlots: SLOTS, reservation: mode }));
  } catch (err) {
    failure = ` (store ${held.length + 1}: ${(err as Error).message})`;
  }
  const after = memory();
  const spawn = spawnWorks();
  const row = [
    mode,
    String(held.length),
    fmtInt((held.length * (SLOTS * SLOT_BYTES + ORDINALS * KINDS.length * 4)) / MiB),
    fmtInt(after.vmSizeMiB - before.vmSizeMiB),
    fmtInt(after.vmRssMiB - before.vmRssMiB),
    fmtInt(after.committedMiB - before.committedMiB),
    spawn + failure,
  ];
  held.length = 0;
  collectGarbage();
  return row;
}

function reservation(): void {
  const meminfo = fs.readFileSync('/proc/meminfo', 'utf8');
  const ramSwapMiB = (kib(meminfo, 'MemTotal') + kib(meminfo, 'SwapTotal')) / 1024;
  const perStoreMiB = (SLOTS * SLOT_BYTES + ORDINALS * KINDS.length * 4) / MiB;
  const many = Math.floor(ramSwapMiB / perStoreMiB) + 1;
  log('## 1. Reservation');
  log();
  log(
    `vm.overcommit_memory = ${fs.readFileSync('/proc/sys/vm/overcommit_memory', 'utf8').trim()}, ` +
      `RAM + swap ${fmtInt(ramSwapMiB)} MiB, CommitLimit ${fmtInt(kib(meminfo, 'CommitLimit') / 1024)} MiB. ` +
      `Each store reserves ${fmtInt(SLOTS)} slots and ${fmtInt(ORDINALS)} ordinals × ${KINDS.length} kinds (${fmtInt(perStoreMiB)} MiB).`,
  );
  log();
  const rows: string[][] = [];
  for (const stores of [STORES, many]) for (const mode of MODES) rows.push(reservationRow(mode, stores));
  log(
    report.markdown(
      ['reservation', 'stores', 'reserved MiB', 'Δ VmSize MiB', 'Δ VmRSS MiB', 'Δ Committed_AS MiB', "spawnSync('true')"],
      rows,
    ),
  );
  log();
}

// ---------------------------------------------------------------------------------------------
// 3. Speed: growable vs fixed
// ---------------------------------------------------------------------------------------------

interface Stream {
  ordinal: Int32Array;
  at: Float64Array;
}

/** The same events every round: ordinals uniform over `SCAN_SLOTS`, times over two days. */
function stream(): Stream {
  const rnd = mulberry32(8);
  const ordinal = new Int32Array(EVENTS);
  const at = new Float64Array(EVENTS);
  for (let i = 0; i < EVENTS; i++) {
    ordinal[i] = Math.floor(rnd() * SCAN_SLOTS);
    at[i] = BASE + Math.floor((i / EVENTS) * 48 * HOUR);
  }
  return { ordinal, at };
}

interface SpeedSample {
  applyNs: number;
  scanNs: number;
  readNs: number;
}

let sink = 0;

// Each measured loop is its own function, so it is optimised as a whole and not by on-stack replacement.
function applyAll(store: SignalStore, events: Stream, n: number): void {
  for (let i = 0; i < n; i++) store.apply(events.ordinal[i]!, 0, 1, events.at[i]!);
}

/** What the one-kind trending scan in retrieve.ts calls per slot. */
function scanAll(store: SignalStore, now: number, hourMs: number): number {
  const horizon = now - hourMs;
  const used = store.slotsUsed();
  let acc = 0;
  for (let s = 0; s < used; s++) {
    if (store.slotKind(s) !== 0) continue;
    if (!store.hasEvents(s)) continue;
    acc += store.slotOrdinal(s);
    acc += store.decayedScore(s, now);
    acc += store.newestAt(s) < horizon ? 0 : store.velocity(s, '1h', now, false);
  }
  return acc;
}

function readAll(store: SignalStore, now: number, windows: readonly WindowName[]): number {
  const used = store.slotsUsed();
  let acc = 0;
  for (let s = 0; s < used; s++) acc += store.read(s, now, false, windows, true).count;
  return acc;
}

/** The measured loops, self-contained so that a tree can have copies of its own. */
interface Loops {
  applyAll: typeof applyAll;
  scanAll: typeof scanAll;
  readAll: typeof readAll;
}

/**
 * Copies of the measured loops compiled afresh, for the baseline's store: loops shared by two store
 * classes see both at every call site and run polymorphic (measured, after ÷ before: the scan 1.58×
 * with shared loops, 0.92× with a copy each).
 */
function ownLoops(): Loops {
  const copy = <F>(fn: F): F => {
    // eslint-disable-next-line @typescript-eslint/no-implied-eval -- a fresh copy of this file's own functions, not outside input
    const make = new Function(`return (${String(fn)});`) as () => F;
    return make();
  };
  return { applyAll: copy(applyAll), scanAll: copy(scanAll), readAll: copy(readAll) };
}

const LOOPS: Loops = { applyAll, scanAll, readAll };

function speedRound(mode: Reservation, events: Stream, Store: StoreClass = SignalStore, loops: Loops = LOOPS): SpeedSample {
  const store = Store.create({ kinds: KINDS.slice(0, 1), maxOrdinals: SCAN_SLOTS, maxSlots: SCAN_SLOTS, reservation: mode });
  const now = BASE + 48 * HOUR;
  const t0 = nowMs();
  loops.applyAll(store, events, EVENTS);
  const t1 = nowMs();
  sink += loops.scanAll(store, now, HOUR);
  const t2 = nowMs();
  sink += loops.readAll(store, now, KINDS[0]!.windows);
  const t3 = nowMs();
  const used = store.slotsUsed();
  return { applyNs: ((t1 - t0) * 1e6) / EVENTS, scanNs: ((t2 - t1) * 1e6) / used, readNs: ((t3 - t2) * 1e6) / used };
}

// Element access through the three kinds of view, each in its own function so none of them sees
// another's view type (mixed, every access site would go polymorphic).
function sumFixed(v: Int32Array): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]!;
  return s;
}
function sumTracking(v: Int32Array): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]!;
  return s;
}
function sumFixedOverGrowable(v: Int32Array): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]!;
  return s;
}

/** ns per element: a view over a fixed buffer, a length-tracking view and a fixed-length view over a growable one. */
function views(): string[][] {
  const n = 1 << 24;
  const fixedBuf = new SharedArrayBuffer(n * 4);
  const growable = new SharedArrayBuffer(4096, { maxByteLength: n * 8 });
  growable.grow(n * 4);
  const cases: [string, (v: Int32Array) => number, Int32Array][] = [
    ['fixed buffer', sumFixed, new Int32Array(fixedBuf)],
    ['growable buffer, length-tracking view', sumTracking, new Int32Array(growable)],
    ['growable buffer, fixed-length view (what the store uses)', sumFixedOverGrowable, new Int32Array(growable, 0, n)],
  ];
  const out: number[][] = cases.map(() => []);
  for (let r = 0; r < ROUNDS; r++) {
    cases.forEach(([, fn, v], c) => {
      const t0 = nowMs();
      sink += fn(v);
      out[c]!.push(((nowMs() - t0) * 1e6) / n);
    });
  }
  const base = median(out[0]!);
  return cases.map(([label], c) => [label, median(out[c]!).toFixed(2), fmtRatio(median(out[c]!) / base)]);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function speed(): void {
  const events = stream();
  const samples: Record<Reservation, SpeedSample[]> = { grow: [], fixed: [] };
  // One warm-up round each, so both modes run optimised code; then alternate, swapping the order.
  for (const mode of MODES) speedRound(mode, events);
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? MODES : [...MODES].reverse();
    for (const mode of order) {
      collectGarbage();
      samples[mode].push(speedRound(mode, events));
    }
  }
  const med = (mode: Reservation, key: keyof SpeedSample) => median(samples[mode].map((s) => s[key]));
  log('## 3. Speed: a store over growable buffers vs fixed ones');
  log();
  log(`${fmtInt(EVENTS)} events into ${fmtInt(SCAN_SLOTS)} slots (one kind), then a scan of every slot; medians of ${ROUNDS} rounds, ns.`);
  log();
  const rows = (
    [
      ['apply, per event (fresh store, growth included)', 'applyNs'],
      ['trending scan, per slot', 'scanNs'],
      ['read(), per slot', 'readNs'],
    ] as const
  ).map(([label, key]) => [
    label,
    med('grow', key).toFixed(1),
    med('fixed', key).toFixed(1),
    fmtRatio(med('grow', key) / med('fixed', key)),
  ]);
  log(report.markdown(['operation', 'growable ns', 'fixed ns', 'growable / fixed'], rows));
  log();
  if (trees.length === 2) {
    const [before, after] = trees as [Tree, Tree];
    const byTree: SpeedSample[][] = [[], []];
    const loops = [ownLoops(), LOOPS];
    trees.forEach((t, i) => speedRound('grow', events, t.Store, loops[i]));
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 === 0 ? [0, 1] : [1, 0];
      for (const i of order) {
        collectGarbage();
        byTree[i]!.push(speedRound('grow', events, trees[i]!.Store, loops[i]));
      }
    }
    const m = (i: number, key: keyof SpeedSample) => median(byTree[i]!.map((x) => x[key]));
    log(
      `The same rounds over growable buffers, ${before.label} (${before.slotBytes}-byte slots) against this tree (${after.slotBytes}), taking turns:`,
    );
    log();
    const cmp = (
      [
        ['apply, per event (fresh store, growth included)', 'applyNs'],
        ['trending scan, per slot', 'scanNs'],
        ['read() of 1h, 24h, 7d, all and velocity, per slot', 'readNs'],
      ] as const
    ).map(([label, key]) => [label, m(0, key).toFixed(1), m(1, key).toFixed(1), fmtRatio(m(1, key) / m(0, key))]);
    log(report.markdown(['operation', 'before ns', 'after ns', 'after / before'], cmp));
    log();
    report.set('baselineSpeed', { baseline: before.label, before: byTree[0], after: byTree[1] });
  }
  log(`Reading ${fmtInt(1 << 24)} Int32 elements in a loop, ns per element (medians of ${ROUNDS}):`);
  log();
  log(report.markdown(['view', 'ns', 'vs fixed buffer'], views()));
  log();
}

// ---------------------------------------------------------------------------------------------
// 2. Memory per slot
// ---------------------------------------------------------------------------------------------

/** The resident growth of `RESIDENT` slots of one tree's store: after reserve(), and after a first event on each. */
function residentRows(tree: Tree): string[][] {
  collectGarbage();
  const store = tree.Store.create({ kinds: KINDS, maxOrdinals: ORDINALS, maxSlots: SLOTS });
  const before = memory();
  const ordinals = new Int32Array(RESIDENT);
  const kinds = new Int32Array(RESIDENT);
  for (let i = 0; i < RESIDENT; i++) {
    ordinals[i] = Math.floor(i / KINDS.length);
    kinds[i] = i % KINDS.length;
  }
  const committed = (s: SignalStore) => fmtInt((s.arena.slots.byteLength + s.arena.index.byteLength) / MiB);
  const orders = (s: SignalStore) => fmtInt(s.arena.order.entries.reduce((sum, buf) => sum + buf.byteLength, 0) / MiB);
  const row = (after: string, m: MemoryReading, s: SignalStore) => [
    tree.label,
    String(tree.slotBytes),
    after,
    fmtInt(m.vmRssMiB - before.vmRssMiB),
    fmtInt(((m.vmRssMiB - before.vmRssMiB) * MiB) / RESIDENT),
    committed(s),
    orders(s),
  ];
  store.reserve(ordinals, kinds, RESIDENT);
  const rows = [row('reserve()', memory(), store)];
  for (let i = 0; i < RESIDENT; i++) store.apply(ordinals[i]!, kinds[i]!, 1, BASE + i);
  rows.push(row('first event on each', memory(), store));
  // The store is garbage once this returns; the next tree's rows collect it before they start.
  return rows;
}

function resident(): void {
  log('## 2. Memory');
  log();
  log(
    `Each slot, plus 4 bytes per (ordinal, kind) index entry up to the highest ordinal with a slot, ` +
      `and the slot orders' two entry buffers (32 bytes per slot each, written from the first event on). ` +
      `${fmtInt(RESIDENT)} slots over ${fmtInt(RESIDENT / KINDS.length)} items × ${KINDS.length} kinds:`,
  );
  log();
  const rows = trees.flatMap((t) => residentRows(t));
  log(
    report.markdown(
      [
        'tree',
        'slot bytes',
        'after',
        'Δ VmRSS MiB',
        'bytes per slot',
        'committed buffer MiB (slots + index)',
        'committed order buffers MiB',
      ],
      rows,
    ),
  );
  log();
}

reservation();
// Before the speed rounds, whose freed buffers would otherwise blur the resident figures.
resident();
speed();
if (sink === 42) log('');
report.finish();
