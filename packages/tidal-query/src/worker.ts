/**
 * The query worker entry (a piscina worker). Each worker opens its own read-only SQLite connection,
 * keeps a columnar catalog and an ANN index of the items, and maps the shared signal state. Before a
 * task runs, the worker pulls the item rows committed since it last looked, so a query sees every
 * write acknowledged before it started.
 */
import { performance } from 'node:perf_hooks';
import { workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { AnnIndex } from './ann.js';
import { Catalog } from './catalog.js';
import type { QueryContext } from './context.js';
import { RetrieveExecutor } from './retrieve.js';
import { SearchExecutor } from './search.js';
import { SignalStore, type SignalArena } from './signals/store.js';
import type { QuerySchema, RetrieveTask, SearchTask, TaskEnvelope, WorkerRetrieveResult, WorkerSearchResult } from './types.js';

export interface WorkerInit {
  file: string;
  schema: QuerySchema;
  arena: SignalArena;
}

export type WorkerTask =
  | { op: 'warm'; env: TaskEnvelope; barrier: SharedArrayBuffer; parties: number }
  | { op: 'retrieve'; env: TaskEnvelope; task: RetrieveTask }
  | { op: 'search'; env: TaskEnvelope; task: SearchTask };

export interface WarmResult {
  threadItems: number;
  annSize: number;
  refreshedRows: number;
}

interface State {
  db: Database.Database;
  catalog: Catalog;
  ctx: QueryContext & { ann: AnnIndex | null };
  retrieve: RetrieveExecutor;
  search: SearchExecutor;
}

let state: State | undefined;

function init(): State {
  const { file, schema, arena } = workerData as WorkerInit;
  const db = new Database(file, { readonly: true, fileMustExist: true });
  db.pragma('busy_timeout = 5000');
  const catalog = new Catalog(db, schema);
  const store = SignalStore.attach(arena, [...schema.kinds]);
  const ctx = { schema, catalog, store, ann: null as AnnIndex | null, db };
  return { db, catalog, ctx, retrieve: new RetrieveExecutor(ctx), search: new SearchExecutor(ctx) };
}

/** Pulls item changes up to at least `version`; returns the number of rows read. */
function sync(s: State, version: number): number {
  if (s.catalog.version >= version) return 0;
  const dims = s.ctx.schema.embeddingDims;
  const keys: number[] = [];
  const blobs: Buffer[] = [];
  const removed: number[] = [];
  const rows = s.catalog.refresh((row) => {
    if (row.present && row.embedding) {
      keys.push(row.ordinal);
      blobs.push(row.embedding);
    } else {
      removed.push(row.ordinal);
    }
  });
  // The index exists from the first embedding on; a schema without embeddings never builds one.
  if (removed.length > 0 && s.ctx.ann) for (const o of removed) s.ctx.ann.remove(o);
  if (keys.length > 0) {
    s.ctx.ann ??= new AnnIndex(dims);
    // Byte copies: a blob's offset in its Buffer need not be 4-byte aligned for a Float32Array view.
    const flat = new Float32Array(keys.length * dims);
    const bytes = new Uint8Array(flat.buffer);
    for (let i = 0; i < blobs.length; i++) bytes.set(blobs[i]!.subarray(0, dims * 4), i * dims * 4);
    s.ctx.ann.upsert(keys, flat);
  }
  return rows;
}

export default function run(msg: WorkerTask): WorkerRetrieveResult | WorkerSearchResult | WarmResult {
  const started = performance.now();
  state ??= init();
  const s = state;
  const refreshed = sync(s, msg.env.itemsVersion);
  switch (msg.op) {
    case 'retrieve': {
      const r = s.retrieve.run(msg.task, msg.env.level, msg.env.nowMs);
      return { ...r, serviceMs: performance.now() - started };
    }
    case 'search': {
      const r = s.search.run(msg.task, msg.env.level, msg.env.nowMs);
      return { ...r, serviceMs: performance.now() - started };
    }
    case 'warm': {
      // A barrier: each warm task holds its worker until every worker has one, so `parties` tasks
      // land on `parties` distinct workers and every worker has loaded the items when warm() returns.
      const counter = new Int32Array(msg.barrier);
      const arrived = Atomics.add(counter, 0, 1) + 1;
      if (arrived >= msg.parties) Atomics.notify(counter, 0);
      else {
        const deadline = Date.now() + 60_000;
        while (Atomics.load(counter, 0) < msg.parties && Date.now() < deadline) Atomics.wait(counter, 0, Atomics.load(counter, 0), 1000);
      }
      return { threadItems: s.catalog.presentCount, annSize: s.ctx.ann?.size ?? 0, refreshedRows: refreshed };
    }
  }
}
