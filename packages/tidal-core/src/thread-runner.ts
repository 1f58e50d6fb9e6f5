/**
 * The query runner of a worker module's thread (see thread-db.ts): where `QueryFront` sends an
 * admitted query there. The database's thread hands its queries to the query pool (a scheduler in
 * front of piscina); here they run in this very thread, from a priority queue drained a turn of
 * the event loop at a time, so the queries one turn admitted run together and the thread returns
 * to its event loop (to read more requests, and refuse what the chain refuses) within a budget.
 */
import { performance } from 'node:perf_hooks';
import { InternalError, TidalError } from 'tidal-load';
import type { TaskEnvelope, TaskOf } from 'tidal-query';
import { runInThread } from 'tidal-query/worker';
import type { QueryRunner } from './query-front.js';
import type { Executed, QueryResult, QueueControl } from './query-pool.js';
import { Dropped } from './scheduler.js';

/**
 * How long the queries this thread has taken run back to back before it returns to its event loop.
 * A query at the cheapest level takes about 0.1–1 ms on the bench corpus; 4 ms keeps a refusal's
 * wait behind queries to a few milliseconds, and is long enough that a burst's queries run together.
 */
const TURN_BUDGET_MS = 4;

interface Job {
  readonly run: () => void;
  readonly priority: number;
}

export class ThreadRunner implements QueryRunner {
  readonly #jobs: Job[] = [];
  #drainQueued = false;
  #dropped = 0;

  get waiting(): number {
    return this.#jobs.length;
  }

  get dropped(): number {
    return this.#dropped;
  }

  runQuery<Op extends 'retrieve' | 'search'>(
    op: Op,
    task: TaskOf<Op>['task'],
    env: () => TaskEnvelope,
    control: QueueControl,
  ): Promise<Executed<QueryResult<Op>>> {
    return new Promise<Executed<QueryResult<Op>>>((resolve, reject) => {
      const run = () => {
        // Given up while it waited: it leaves unrun, as it would leave the pool's queue.
        if (control.signal?.aborted === true || control.expired?.() === true) {
          this.#dropped++;
          reject(new Dropped(control.signal?.aborted === true ? 'aborted' : 'expired'));
          return;
        }
        const envelope = env();
        control.onDispatch?.(envelope.nowMs);
        try {
          const r =
            op === 'retrieve'
              ? runInThread({ op: 'retrieve', env: envelope, task: task as TaskOf<'retrieve'>['task'], cell: -1 })
              : runInThread({ op: 'search', env: envelope, task: task as TaskOf<'search'>['task'], cell: -1 });
          if ('skipped' in r) throw new InternalError(`${op} was skipped in its own thread`);
          resolve({ result: r as QueryResult<Op>, nowMs: envelope.nowMs });
        } catch (err) {
          reject(TidalError.is(err) ? err : new InternalError(`${op} failed: ${(err as Error)?.message ?? String(err)}`, { cause: err }));
        }
      };
      this.#enqueue({ run, priority: control.priority });
    });
  }

  #enqueue(job: Job): void {
    // Highest priority first, in arrival order within one: insert after the last of its rank.
    let i = this.#jobs.length;
    while (i > 0 && this.#jobs[i - 1]!.priority < job.priority) i--;
    this.#jobs.splice(i, 0, job);
    if (this.#drainQueued) return;
    this.#drainQueued = true;
    setImmediate(() => void this.#drain());
  }

  async #drain(): Promise<void> {
    const until = performance.now() + TURN_BUDGET_MS;
    while (this.#jobs.length > 0) {
      this.#jobs.shift()!.run();
      // The job's caller continues in the microtasks queued behind this one.
      await Promise.resolve();
      if (performance.now() >= until) break;
    }
    this.#drainQueued = false;
    if (this.#jobs.length > 0) {
      this.#drainQueued = true;
      setImmediate(() => void this.#drain());
    }
  }
}
