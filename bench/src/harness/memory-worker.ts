/**
 * A worker module (`TidalDbBuilder.workerModule`) that lets the memory suite ask every query worker
 * for its own memory: on `report` through a BroadcastChannel, the worker collects its garbage (when
 * the process runs with `--expose-gc`, which workers inherit) and answers with its V8 heap
 * statistics and its isolate's ArrayBuffer bytes. It holds nothing else, so it adds to a worker only
 * the module's link to the database's thread.
 */
import v8 from 'node:v8';
import { BroadcastChannel, threadId } from 'node:worker_threads';

/** One thread's JS memory, in bytes: its V8 heap and the ArrayBuffers its isolate allocated. */
export interface ThreadMemory {
  threadId: number;
  /** Pages V8 has committed for the heap (`total_physical_size`). */
  heapCommitted: number;
  /** Live objects after the collection (`used_heap_size`). */
  heapUsed: number;
  /** V8's own malloc'd memory (`malloced_memory`). */
  malloced: number;
  /** `process.memoryUsage().arrayBuffers`: typed arrays and ArrayBuffers of this isolate (SharedArrayBuffers it made or was given included). */
  arrayBuffers: number;
  /** `process.memoryUsage().external`: memory of C++ objects bound to JS objects (ArrayBuffers included). */
  external: number;
  /** Committed bytes per V8 heap space (`new_space`, `old_space`, `code_space`, `large_object_space`, ...). */
  spaces: Record<string, number>;
}

export interface ReportRequest {
  readonly op: 'report';
  readonly id: number;
}

export interface ReportAnswer {
  readonly op: 'answer';
  readonly id: number;
  readonly memory: ThreadMemory;
}

/** This thread's memory after a full collection (when `gc` is exposed and `collect`). */
export function threadMemory(collect = true): ThreadMemory {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (collect && typeof gc === 'function') gc();
  const h = v8.getHeapStatistics();
  const m = process.memoryUsage();
  return {
    threadId,
    heapCommitted: h.total_physical_size,
    heapUsed: h.used_heap_size,
    malloced: h.malloced_memory,
    arrayBuffers: m.arrayBuffers,
    external: m.external,
    spaces: Object.fromEntries(v8.getHeapSpaceStatistics().map((x) => [x.space_name, x.physical_space_size])),
  };
}

let channel: BroadcastChannel | undefined;

export function start(_db: unknown, data: unknown): void {
  const { channel: name, snapshotDir, collect = true } = data as { channel: string; snapshotDir?: string; collect?: boolean };
  channel = new BroadcastChannel(name);
  channel.onmessage = (e: { data: unknown }) => {
    const msg = e.data as ReportRequest;
    if (msg.op !== 'report') return;
    const memory = threadMemory(collect);
    // A heap snapshot, for attributing the heap to constructors: taken after the reading, as it grows the heap.
    if (snapshotDir !== undefined) v8.writeHeapSnapshot(`${snapshotDir}/worker-${threadId}.heapsnapshot`);
    const answer: ReportAnswer = { op: 'answer', id: msg.id, memory };
    channel?.postMessage(answer);
  };
}

export function stop(): void {
  channel?.close();
  channel = undefined;
}
