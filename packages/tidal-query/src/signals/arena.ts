/// <reference lib="es2024.sharedmemory" />
import { CapacityError, InvalidInputError } from 'tidal-load';
import { CONTROL_INT32, SLOT_BYTES } from './layout.js';
import { createOrderArena, orderControlInts, orderDirtyBytes, orderEntryBytes, type OrderArena } from './order.js';
import { checkCount, type SignalArena } from './types.js';

/*
 * The signal store's shared memory: reserving the buffers of a new arena, growing them, and checking
 * an arena posted from another thread before a reader attaches to it.
 */

/**
 * Growth steps. Slots come in steps of 64 (16 KiB; a 64 KiB checkpoint row holds 256), starting at
 * 1 024 slots (256 KiB) and doubling, so a store that reaches 4 Mi slots grows 12 times; the index
 * starts at 64 KiB. Growing only commits pages (nothing is copied and views stay valid), and committed pages
 * are resident only once written, so doubling costs no memory beyond the slots in use.
 */
export const SLOT_STEP = 64;
export const INITIAL_SLOTS = 16 * SLOT_STEP;
export const INDEX_STEP = 16_384;

/**
 * A buffer of `maxBytes` at most, `initialBytes` of it usable now. Falls back to a fixed buffer of
 * the maximum when the platform refuses a growable reservation that large (Node 20 caps
 * `maxByteLength` at 4 GiB).
 */
export function reserveBuffer(initialBytes: number, maxBytes: number, reservation: 'grow' | 'fixed'): SharedArrayBuffer {
  if (reservation === 'grow' && initialBytes < maxBytes) {
    try {
      return new SharedArrayBuffer(initialBytes, { maxByteLength: maxBytes });
    } catch (err) {
      if (!(err instanceof RangeError)) throw err;
    }
  }
  return new SharedArrayBuffer(maxBytes);
}

/** The next size of a growing buffer, in elements: at least `need`, doubling, in whole steps, capped. */
export function nextSize(current: number, need: number, step: number, max: number): number {
  const target = Math.max(need, current * 2);
  return Math.min(max, Math.ceil(target / step) * step);
}

/** A fixed-length view of the index as long as the buffer is now. */
export function indexView(buf: SharedArrayBuffer): Int32Array {
  return new Int32Array(buf, 0, buf.byteLength / 4);
}

/** The maximum a buffer can reach: its reservation if growable, else its length. */
export function maxBytesOf(buf: SharedArrayBuffer): number {
  return buf.growable ? buf.maxByteLength : buf.byteLength;
}

/**
 * Reserves the buffers of a new arena for `kinds` kinds, `maxOrdinals` ordinals and `maxSlots`
 * slots, and commits a small first part of each.
 *
 * @throws CapacityError if the platform cannot reserve that much shared memory.
 */
export function createArena(kinds: number, maxOrdinals: number, maxSlots: number, reservation: 'grow' | 'fixed'): SignalArena {
  let control: SharedArrayBuffer;
  let index: SharedArrayBuffer;
  let slots: SharedArrayBuffer;
  let order: OrderArena;
  try {
    control = new SharedArrayBuffer(CONTROL_INT32 * 4);
    const entries = maxOrdinals * kinds;
    index = reserveBuffer(Math.min(entries, INDEX_STEP) * 4, entries * 4, reservation);
    slots = reserveBuffer(Math.min(maxSlots, INITIAL_SLOTS) * SLOT_BYTES, maxSlots * SLOT_BYTES, reservation);
    order = createOrderArena(kinds, maxSlots, INITIAL_SLOTS, (initial, max) => reserveBuffer(initial, max, reservation));
  } catch (err) {
    if (err instanceof RangeError) {
      throw new CapacityError(
        'signal state',
        maxSlots,
        `could not reserve ${maxSlots} slots for ${maxOrdinals} ordinals (${err.message}); lower capacity.signalSlots or capacity.items`,
      );
    }
    throw err;
  }
  return Object.freeze({ control, index, slots, kinds, maxOrdinals, maxSlots, order });
}

/**
 * Checks an arena posted from another thread against the `kinds` signal kinds it should hold, and
 * returns a frozen copy of it (the buffers themselves are shared, not copied).
 *
 * @throws InvalidInputError if the arena is malformed or does not match `kinds`.
 */
export function checkArena(arena: SignalArena, kinds: number): SignalArena {
  if (typeof arena !== 'object' || arena === null) {
    throw new InvalidInputError('arena', 'a signal arena object', arena);
  }
  if (arena.kinds !== kinds) {
    throw new InvalidInputError('arena.kinds', `${kinds} (the number of signal kinds given)`, arena.kinds);
  }
  checkCount('arena.maxOrdinals', arena.maxOrdinals);
  checkCount('arena.maxSlots', arena.maxSlots);
  const expect = (field: 'control' | 'index' | 'slots', bytes: number): void => {
    const buf = arena[field];
    if (!(buf instanceof SharedArrayBuffer) || maxBytesOf(buf) !== bytes) {
      throw new InvalidInputError(`arena.${field}`, `a SharedArrayBuffer reserving ${bytes} bytes`, buf);
    }
  };
  expect('control', CONTROL_INT32 * 4);
  expect('index', arena.maxOrdinals * arena.kinds * 4);
  expect('slots', arena.maxSlots * SLOT_BYTES);
  const order = arena.order as OrderArena | undefined;
  const sab = (field: string, buf: unknown, bytes: number): SharedArrayBuffer => {
    if (!(buf instanceof SharedArrayBuffer) || maxBytesOf(buf) !== bytes) {
      throw new InvalidInputError(`arena.order.${field}`, `a SharedArrayBuffer reserving ${bytes} bytes`, buf);
    }
    return buf;
  };
  if (typeof order !== 'object' || order === null || !Array.isArray(order.entries) || !Array.isArray(order.dirty)) {
    throw new InvalidInputError('arena.order', 'the signal order buffers', order);
  }
  const orderCopy: OrderArena = Object.freeze({
    control: sab('control', order.control, orderControlInts(arena.kinds) * 4),
    entries: Object.freeze(
      [0, 1].map((b) => sab(`entries[${b}]`, order.entries[b], orderEntryBytes(arena.maxSlots))),
    ) as unknown as OrderArena['entries'],
    dirty: Object.freeze(
      [0, 1].map((b) => sab(`dirty[${b}]`, order.dirty[b], orderDirtyBytes(arena.maxSlots))),
    ) as unknown as OrderArena['dirty'],
  });
  return Object.freeze({
    control: arena.control,
    index: arena.index,
    slots: arena.slots,
    kinds: arena.kinds,
    maxOrdinals: arena.maxOrdinals,
    maxSlots: arena.maxSlots,
    order: orderCopy,
  });
}
