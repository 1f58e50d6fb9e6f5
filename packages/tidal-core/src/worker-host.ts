/**
 * The query worker's entry when the database has a worker module (`TidalDbBuilder.workerModule`):
 * tidal-query's worker, unchanged, plus the module. On the first warm task the worker opens its
 * link to the database's thread and imports the module; it starts the module when that thread
 * says `start` (it has then opened its ends of every worker's link), and reports back.
 */
import { threadId, workerData } from 'node:worker_threads';
import run from 'tidal-query/worker';
import type { WorkerInit, WorkerResult, WorkerTask } from 'tidal-query';
import { ThreadDb, type ThreadInit } from './thread-db.js';
import { LinkClient } from './worker-link.js';

/** What the database puts in `WorkerInit.host` for this entry. */
export interface HostInit {
  readonly thread: ThreadInit;
  readonly module: { readonly url: string; readonly data: unknown };
}

/** What a worker module exports. */
export interface WorkerModuleExports {
  start(db: ThreadDb, data: unknown): void | Promise<void>;
  stop?(): void | Promise<void>;
}

let loading: Promise<void> | undefined;

async function load(host: HostInit): Promise<void> {
  const link = new LinkClient(host.thread.link, threadId);
  const db = new ThreadDb(host.thread, link);
  let mod: WorkerModuleExports | undefined;
  let failure: Error | undefined;
  try {
    mod = (await import(host.module.url)) as WorkerModuleExports;
    if (typeof mod.start !== 'function') throw new TypeError(`the worker module ${host.module.url} exports no start(db, data) function`);
  } catch (err) {
    failure = err instanceof Error ? err : new Error(String(err), { cause: err });
  }
  link.onControl = (c) => {
    if (c.op === 'start') {
      const started = failure === undefined ? Promise.resolve().then(() => mod!.start(db, host.module.data)) : Promise.reject(failure);
      started.then(
        () => void link.call('moduleStarted', [threadId, null]).catch(() => {}),
        (err: unknown) => void link.call('moduleStarted', [threadId, (err as Error)?.message ?? String(err)]).catch(() => {}),
      );
    } else {
      db.flushReports();
      void Promise.resolve(mod?.stop?.()).finally(() => setImmediate(() => link.close()));
    }
  };
}

export default async function host(msg: WorkerTask): Promise<WorkerResult> {
  const result = run(msg);
  if (msg.op === 'warm') {
    const init = (workerData as WorkerInit).host as HostInit;
    // Opened before this warm task answers: the database's thread opens its ends after every
    // warm task has, so the channels exist on both sides before anything is posted.
    loading ??= load(init);
    await loading;
  }
  return result;
}
