// A worker thread of shared-memory.test.ts: a chain over the shared state, hammered with admit and
// release; it counts into `probe` while it holds a ticket ([all, retrieve, max all, max retrieve]).
import { parentPort, workerData } from 'node:worker_threads';

const { options, state, probe, chainUrl, seed, rounds } = workerData;
const { createAdmissionChain } = await import(chainUrl);
const chain = createAdmissionChain(options, Date.now, { shared: state });
const p = new Int32Array(probe);
let x = seed >>> 0;
const rnd = () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32;
const max = (i, v) => {
  for (;;) {
    const m = Atomics.load(p, i);
    if (v <= m || Atomics.compareExchange(p, i, m, v) === m) return;
  }
};
const held = [];
let admitted = 0;
let refused = 0;
const drop = (h) => {
  Atomics.sub(p, 0, 1);
  if (h.retrieve) Atomics.sub(p, 1, 1);
  h.ticket.release({ latencyMs: 1, ok: true });
  // Released twice: the second must do nothing.
  h.ticket.release({ latencyMs: 1, ok: true });
};
for (let i = 0; i < rounds; i++) {
  const retrieve = rnd() < 0.5;
  const r = chain.admit({ route: retrieve ? 'retrieve' : 'signals', tenant: 'anonymous', tier: 'free' }, Date.now());
  if (r.admitted) {
    admitted++;
    max(2, Atomics.add(p, 0, 1) + 1);
    if (retrieve) max(3, Atomics.add(p, 1, 1) + 1);
    held.push({ ticket: r, retrieve });
  } else refused++;
  while (held.length > 0 && rnd() < 0.5) drop(held.splice(Math.floor(rnd() * held.length), 1)[0]);
}
for (const h of held) drop(h);
parentPort.postMessage({ admitted, refused });
