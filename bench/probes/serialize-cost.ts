// Probe: JSON.stringify against fast-json-stringify and a hand-written serializer on real answers (docs/serve.md).
/**
 * `node bench/probes/dist/probes/serialize-cost.js` (after `npm run probes`): what turning a query's HTTP answer into JSON costs,
 * three ways, on real answers (the retrieve and search requests of the query mix against the demo
 * corpus, in this process): `JSON.stringify` (what fastify does for a route without a response
 * schema), fast-json-stringify compiled from a response schema (what fastify does with one; the
 * copy fastify depends on), and a serializer written by hand for the two shapes.
 *
 * The answers are mostly numbers (scores, signal values, velocities), and each is printed as the
 * shortest string that reads back as the same double whichever way the structure around it is
 * walked, so the three end up close: the figures decide whether a schema pays.
 *
 *     node bench/probes/dist/probes/serialize-cost.js [--items 20000] [--answers 400] [--rounds 7]
 */
import { createRequire } from 'node:module';
import { TidalDb, levelName } from 'tidal-core';
import { loadDemo } from 'tidal-serve';
import { Corpus, tidalSchema } from '../src/corpus.js';
import { prepareRequests } from '../src/query-mix.js';
import { mulberry32 } from '../src/random.js';
import { Report, parseOptions } from '../src/harness/index.js';

type Serializer = (answer: Record<string, unknown>) => string;

// fastify's own dependency, resolved from where fastify resolves it.
const fromFastify = createRequire(createRequire(import.meta.url).resolve('fastify'));
const fastJson = fromFastify('fast-json-stringify') as (schema: object) => Serializer;

const num = { type: 'number' };
const numbers = { type: 'object', additionalProperties: num };
const signals = { type: 'object', additionalProperties: { type: 'object', properties: { score: num, count: num, windows: numbers, velocity: numbers } } };
const common = {
  nextCursor: { type: ['string', 'null'] },
  degradationLevel: { type: 'string' },
  levelReason: { type: 'string' },
  ageMs: num,
  warnings: { type: 'array', items: { type: 'string' } },
  explain: { type: 'object', additionalProperties: true },
  tookMs: num,
};
const RETRIEVE_SCHEMA = {
  type: 'object',
  properties: { items: { type: 'array', items: { type: 'object', properties: { id: { type: 'string' }, score: num, rank: num, signals, similarity: num, createdAt: num } } }, ...common },
};
const SEARCH_SCHEMA = {
  type: 'object',
  properties: {
    hits: { type: 'array', items: { type: 'object', properties: { id: { type: 'string' }, score: num, rank: num, signals, bm25: num, semantic: num } } },
    mode: { type: 'string' },
    semanticFallback: { type: ['string', 'null'] },
    ...common,
  },
};

const str = JSON.stringify;
const n = (x: unknown): string => (typeof x === 'number' && Number.isFinite(x) ? String(x) : 'null');

function numberMap(o: Record<string, number | undefined>): string {
  let s = '';
  for (const k in o) if (o[k] !== undefined) s += `${s === '' ? '' : ','}${str(k)}:${n(o[k])}`;
  return `{${s}}`;
}

function signalMap(o: Record<string, { score: number; count: number; windows: Record<string, number>; velocity?: Record<string, number> }>): string {
  let s = '';
  for (const k in o) {
    const v = o[k]!;
    s += `${s === '' ? '' : ','}${str(k)}:{"score":${n(v.score)},"count":${n(v.count)},"windows":${numberMap(v.windows)}${v.velocity === undefined ? '' : `,"velocity":${numberMap(v.velocity)}`}}`;
  }
  return `{${s}}`;
}

type Row = { id: string; score: number; rank: number; signals: Parameters<typeof signalMap>[0]; similarity?: number; createdAt?: number; bm25?: number; semantic?: number };

function tail(a: Record<string, unknown>): string {
  return (
    `"nextCursor":${a.nextCursor === null ? 'null' : str(a.nextCursor)},"degradationLevel":${str(a.degradationLevel)},"levelReason":${str(a.levelReason)},` +
    `"ageMs":${n(a.ageMs)},"warnings":${str(a.warnings)}${a.explain === undefined ? '' : `,"explain":${str(a.explain)}`},"tookMs":${n(a.tookMs)}}`
  );
}

const byHand: Record<'retrieve' | 'search', Serializer> = {
  retrieve(a) {
    let s = '{"items":[';
    const items = a.items as Row[];
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      s += `${i === 0 ? '' : ','}{"id":${str(it.id)},"score":${n(it.score)},"rank":${it.rank},"signals":${signalMap(it.signals)}${it.similarity === undefined ? '' : `,"similarity":${n(it.similarity)}`},"createdAt":${n(it.createdAt)}}`;
    }
    return `${s}],${tail(a)}`;
  },
  search(a) {
    let s = '{"hits":[';
    const hits = a.hits as Row[];
    for (let i = 0; i < hits.length; i++) {
      const h = hits[i]!;
      s += `${i === 0 ? '' : ','}{"id":${str(h.id)},"score":${n(h.score)},"rank":${h.rank},"signals":${signalMap(h.signals)}${h.bm25 === undefined ? '' : `,"bm25":${n(h.bm25)}`}${h.semantic === undefined ? '' : `,"semantic":${n(h.semantic)}`}}`;
    }
    return `${s}],"mode":${str(a.mode)},${a.semanticFallback === undefined ? '' : `"semanticFallback":${a.semanticFallback === null ? 'null' : str(a.semanticFallback)},`}${tail(a)}`;
  },
};

/** JSON with every object's keys sorted. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (typeof v === 'object' && v !== null) {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o).sort().map((k) => `${str(k)}:${canonical(o[k])}`).join(',')}}`;
  }
  return str(v);
}

function timePerCall(fn: Serializer, answers: readonly Record<string, unknown>[], reps: number): number {
  let bytes = 0;
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < reps; r++) for (const a of answers) bytes += fn(a).length;
  const us = Number(process.hrtime.bigint() - t0) / 1000 / (reps * answers.length);
  if (bytes === 0) throw new Error('nothing serialized');
  return us;
}

async function main(): Promise<void> {
  const opts = parseOptions('serialize-cost', {
    items: { type: 'int', default: 20_000, description: 'demo corpus size' },
    answers: { type: 'int', default: 400, description: 'requests of the query mix whose answers are serialized' },
    rounds: { type: 'int', default: 7, description: 'interleaved rounds; the median is reported' },
  });
  const { items, rounds } = opts;
  const count = opts.answers;
  const db = await TidalDb.builder().ephemeral().schema(tidalSchema(128)).open();
  try {
    await loadDemo(db, { items });
    const mix = prepareRequests(new Corpus({ items, dims: 128, seed: 42 }), mulberry32(7), count);
    const answers = { retrieve: [] as Record<string, unknown>[], search: [] as Record<string, unknown>[] };
    for (const q of mix) {
      const r = q.kind === 'retrieve' ? await db.retrieve(q.body) : await db.search(q.body);
      // The answer as the route sends it: the level by name, explain left out unless asked for.
      answers[q.kind].push({ ...r, degradationLevel: levelName(r.degradationLevel), explain: undefined });
    }
    const ways: [string, Record<'retrieve' | 'search', Serializer>][] = [
      ['JSON.stringify', { retrieve: JSON.stringify, search: JSON.stringify }],
      ['fast-json-stringify (schema)', { retrieve: fastJson(RETRIEVE_SCHEMA), search: fastJson(SEARCH_SCHEMA) }],
      ['by hand', byHand],
    ];
    // Every way must say the same thing (a schema drops what it does not name); key order aside.
    for (const kind of ['retrieve', 'search'] as const) {
      for (const a of answers[kind]) {
        const want = canonical(JSON.parse(JSON.stringify(a)));
        for (const [name, w] of ways) if (canonical(JSON.parse(w[kind](a))) !== want) throw new Error(`${name} changes a ${kind} answer`);
      }
    }
    const times = new Map<string, number[]>();
    for (let r = 0; r <= rounds; r++) {
      for (const kind of ['retrieve', 'search'] as const) {
        for (let k = 0; k < ways.length; k++) {
          const [name, w] = ways[(k + r) % ways.length]!;
          const us = timePerCall(w[kind], answers[kind], 20);
          if (r > 0) times.set(`${kind} ${name}`, [...(times.get(`${kind} ${name}`) ?? []), us]);
        }
      }
    }
    const report = new Report('serialize-cost', opts);
    report.line(`${answers.retrieve.length} retrieve and ${answers.search.length} search answers, median of ${rounds} rounds.`);
    report.line();
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const rows: string[][] = [];
    for (const kind of ['retrieve', 'search'] as const) {
      const base = median(times.get(`${kind} JSON.stringify`)!);
      const bytes = answers[kind].reduce((s, a) => s + JSON.stringify(a).length, 0) / answers[kind].length;
      for (const [name] of ways) {
        const t = median(times.get(`${kind} ${name}`)!);
        rows.push([kind, name, t.toFixed(2), `${(t / base).toFixed(2)}×`, bytes.toFixed(0)]);
      }
    }
    report.table('', ['answer', 'serializer', 'µs / answer', '× JSON.stringify', 'bytes'], rows);
    report.finish();
  } finally {
    await db.close();
  }
}

await main();
