import { DegradationLevel } from 'tidal-load';
import type { QueryContext } from './context.js';
import { blobToVector } from './items-table.js';
import type { RetrieveMessage, SearchMessage } from './protocol.js';
import type { Profile, RetrieveTask, SearchTask, TaskEnvelope, UserQueryState } from './types.js';

/**
 * The keys of a retrieve task and of a search task, in the order the database's thread writes
 * them (tidal-core's read-requests.ts; a test holds the two together): the warm's tasks have the
 * same, so a deserialized warm task has the shape of a deserialized real one.
 */
export const RETRIEVE_TASK_KEYS = Object.freeze([
  'profile',
  'context',
  'filter',
  'diversity',
  'limit',
  'window',
  'exclude',
  'user',
  'forYou',
  'order',
  'related',
] as const);
export const SEARCH_TASK_KEYS = Object.freeze(['text', 'vector', 'filter', 'diversity', 'limit', 'boost', 'user'] as const);

/** Terms the warm's text searches draw from: the commonest this many, the first and the last of them. */
const WARM_TERMS = 64;

/**
 * Runs each profile's query path once at Full (with and without diversity, in each window it
 * reads), and the three searches, on this worker's items, and throws the answers away: the
 * worker's warm, so that V8 has compiled a profile's code before its first real query does.
 * Measured by bench/probes/first-query.ts (2 cores, Node 20.20, load average ≈ 3.5): with the
 * worker's structures built but without this, the first trending, for_you and popular-around-a-
 * vector query after warm took 12–16× the next ones' worker time at 5 000 items. These queries
 * cost a reopen's warm 0.52–0.66 s per worker at 1 000 000 items (the workers run them at once).
 *
 * Each query goes to `run` as a real one arrives: a message of the protocol, structured-cloned
 * (its task with every key a query's task has, in the order the database's thread writes them),
 * so the code V8 optimizes here sees what a posted query brings: the deserializer's object
 * shapes, strings that are not internalized. Tasks built here and run as they are left the first
 * real queries to deoptimize that code (`--trace-deopt`: "wrong map", "wrong instance type") and
 * run it again unoptimized: at 1 000 000 items the first `rising` took 42.6–48.9 ms of worker
 * time after a warm of such tasks, 29.9–39.4 ms after this one (the next ones 10 ms;
 * bench/probes/README.md). Reads only; what it leaves behind is what a query leaves (the trending
 * cache at this clock). Returns the queries that ran.
 */
export function exercisePaths(run: (msg: RetrieveMessage | SearchMessage) => unknown, ctx: QueryContext, env: TaskEnvelope): number {
  const nowMs = env.nowMs;
  const queryEnv: TaskEnvelope = { ...env, level: DegradationLevel.Full };
  const catalog = ctx.catalog;
  const byCreated = catalog.byCreatedDesc();
  if (byCreated.length === 0) return 0;
  const field = ctx.schema.creatorField;
  const creator = field === undefined ? undefined : catalog.fieldValue(field, byCreated[0]!);
  const creators = typeof creator === 'string' ? [creator] : [];
  const vector = ctx.ann ? someVector(ctx) : null;
  const user = (preference: Float32Array | null, following: readonly string[] | null): UserQueryState => ({
    hidden: new Int32Array(0),
    blocked: [],
    seen: null,
    following,
    preference,
    affinityCreators: creators,
    affinityScores: Float64Array.from(creators.map(() => 1)),
    idHash: 0,
  });
  const base = (profile: Profile): RetrieveTask => ({
    profile,
    context: null,
    filter: null,
    diversity: creators.length > 0 ? { maxPer: { [field!]: 2 } } : null,
    limit: 10,
    window: '24h',
    exclude: null,
    user: null,
    forYou: null,
    order: null,
    related: null,
  });
  const tasks: RetrieveTask[] = (['trending', 'popular', 'new', 'hot', 'rising', 'top'] as const).map(base);
  // The same without diversity (the tail takes another path), in each velocity window for the
  // profiles that read one.
  for (let i = 0, n = tasks.length; i < n; i++) tasks.push({ ...tasks[i]!, diversity: null });
  for (const window of ['1h', '7d'] as const) {
    for (const profile of ['trending', 'top'] as const) tasks.push({ ...base(profile), diversity: null, window });
  }
  tasks.push({ ...base('rising'), diversity: null, window: '1h' });
  tasks.push({ ...base('following'), user: user(null, creators), order: 'newest' });
  // A co-engagement list of the newest few items (the main thread's lists have this shape).
  const partners = byCreated.subarray(1, 9);
  const scores = Float32Array.from(partners, (_, i) => partners.length - i);
  tasks.push({
    ...base('related'),
    related: { item: byCreated[0]!, n: partners.length, at: nowMs, partners: Int32Array.from(partners), scores, lambda: 0 },
  });
  if (vector) tasks.push({ ...base('popular'), context: vector });
  // for_you with a preference where items have vectors, and without one always (a catalogue
  // without embeddings still ranks for_you by its other features).
  const forYou = { weights: { similarity: 1, velocity: 1, recency: 1, affinity: 1 }, explore: 0.1, seed: 0 };
  for (const window of ['1h', '24h', '7d'] as const) {
    if (vector) tasks.push({ ...base('for_you'), window, user: user(vector, null), forYou });
    tasks.push({ ...base('for_you'), window, user: user(null, null), forYou });
  }
  let ran = 0;
  for (const task of tasks) if (attempt(() => run(structuredClone({ op: 'retrieve', env: queryEnv, task, cell: -1 })))) ran++;
  const searches: SearchTask[] = [];
  // One term and several: a text search of several terms takes another loop (MaxScore), and
  // which of its branches run depends on how the terms' bounds differ. At 300 000 demo items the
  // first three-term search after a warm of one term alone took 8.0 ms (median of 8 processes,
  // load average 12), 2.7 ms after a warm of two terms; the next ones 0.8–1.3 ms. The two
  // commonest terms alone never skip a list's blocks: at 1 000 000 items the first real search
  // then deoptimized the skip (`seek`, `--trace-deopt`). So the warm also pairs the commonest term
  // with a rarer one and searches three.
  const terms = catalog.text.commonestTerms(WARM_TERMS);
  const texts = terms.length < 2 ? terms : [terms[0]!, terms.slice(0, 2).join(' '), `${terms[0]!} ${terms.at(-1)!}`];
  if (terms.length >= 3) texts.push(`${terms[0]!} ${terms[terms.length >> 1]!} ${terms.at(-1)!}`);
  const query = (text: string | null, v: Float32Array | null): SearchTask => ({
    text,
    vector: v,
    filter: null,
    diversity: null,
    limit: 10,
    boost: 0.1,
    user: null,
  });
  for (const text of texts) searches.push(query(text, null));
  if (vector) searches.push(query(null, vector));
  if (vector) for (const text of texts) searches.push(query(text, vector));
  for (const task of searches) if (attempt(() => run(structuredClone({ op: 'search', env: queryEnv, task, cell: -1 })))) ran++;
  return ran;
}

/**
 * Runs `query`; false when it throws. A query this schema refuses (a window no kind keeps, say) is
 * one the database never sends, so there is nothing to compile, and a warm must not fail for it.
 */
function attempt(query: () => unknown): boolean {
  try {
    query();
    return true;
  } catch {
    return false;
  }
}

/** The embedding of one present item (any), or null when none has one. */
function someVector(ctx: QueryContext): Float32Array | null {
  const dims = ctx.schema.embeddingDims;
  const blob = ctx.db.prepare('SELECT embedding FROM items WHERE present = 1 AND embedding IS NOT NULL LIMIT 1').pluck().get() as
    Buffer | undefined;
  return blob && blob.byteLength === dims * 4 ? blobToVector(blob) : null;
}
