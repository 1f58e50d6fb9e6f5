/**
 * The worker module of thread-reads.ts: on `run` (a BroadcastChannel message) this query thread
 * answers a list of personalized queries in a closed loop of `concurrency` in flight, each either
 * run here (`local`, what a thread does now) or sent to the database's thread as every personalized
 * read was before (`forward`), and reports how many it answered and the time it took.
 */
import { performance } from 'node:perf_hooks';
import { BroadcastChannel, threadId } from 'node:worker_threads';
import type { RetrieveRequest, ThreadDb } from 'tidal-core';

export interface RunMessage {
  readonly op: 'run';
  readonly id: number;
  readonly mode: 'local' | 'forward';
  readonly queries: readonly RetrieveRequest[];
  readonly concurrency: number;
}

export interface RunAnswer {
  readonly op: 'done';
  readonly id: number;
  readonly threadId: number;
  readonly answered: number;
  readonly failed: number;
  readonly ms: number;
  readonly latencies: number[];
}

let channel: BroadcastChannel | undefined;

export function start(db: ThreadDb, data: { channel: string }): void {
  channel = new BroadcastChannel(data.channel);
  channel.onmessage = (e) => {
    const msg = (e as MessageEvent).data as RunMessage;
    if (msg.op !== 'run') return;
    void run(db, msg).then((answer) => channel?.postMessage(answer));
  };
}

async function run(db: ThreadDb, msg: RunMessage): Promise<RunAnswer> {
  let next = 0;
  let answered = 0;
  let failed = 0;
  const latencies: number[] = [];
  const t0 = performance.now();
  const one = (req: RetrieveRequest) => (msg.mode === 'local' ? db.retrieve(req) : db.forward('retrieve', [req]));
  await Promise.all(
    Array.from({ length: msg.concurrency }, async () => {
      while (next < msg.queries.length) {
        const req = msg.queries[next++]!;
        const s = performance.now();
        try {
          await one(req);
          answered++;
        } catch {
          failed++;
        }
        latencies.push(performance.now() - s);
      }
    }),
  );
  return { op: 'done', id: msg.id, threadId, answered, failed, ms: performance.now() - t0, latencies };
}

export function stop(): void {
  channel?.close();
}
