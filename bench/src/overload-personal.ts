/**
 * `bench:overload --mix personal`: the product's personalized reads in process, as `bench:serve
 * --mix personal` offers them over HTTP (serve/personal-mix.ts): the demo corpus with `--users`
 * users built through the public API (embeddings, viewing histories, follows), reads drawn afresh
 * per arrival (35 % `for_you`, 10 % `for_you` + `unseen`, 10 % `following`, 10 % `related`, 15 %
 * trending, 10 % text, 10 % hybrid), and writes that name users (signals, hides, follows).
 */
import type { DegradationLevel, RetrieveRequest, SearchRequest, TidalDb } from 'tidal-core';
import { tidalSchema } from './corpus.js';
import { PERSONAL_READS, personalRequests, type PersonalMixSpec, type PersonalRequest, type ReadType } from './serve/personal-mix.js';

/** The demo's schema with `creator` as the creator field (`following`, blocks, affinities). */
export function personalSchema() {
  return { ...tidalSchema(128), creatorField: 'creator' };
}

/** Runs one read of the mix on `db`: its answer's ids, level and worker service time. */
export async function runRead(
  db: TidalDb,
  r: PersonalRequest,
  level?: DegradationLevel,
): Promise<{ ids: string[]; level: DegradationLevel; serviceMs: number | null }> {
  const body = level === undefined ? r.body : { ...r.body, level };
  if (r.path === '/search') {
    const a = await db.search(body as unknown as SearchRequest);
    return { ids: a.hits.map((h) => h.id), level: a.degradationLevel, serviceMs: a.explain.serviceMs ?? null };
  }
  const a = await db.retrieve(body as unknown as RetrieveRequest);
  return { ids: a.items.map((i) => i.id), level: a.degradationLevel, serviceMs: a.explain.serviceMs ?? null };
}

/** Reads of the mix, each drawn when it is asked for (never a loop over a prepared list). */
export function personalQueries(spec: PersonalMixSpec, rand: () => number): () => (db: TidalDb) => Promise<DegradationLevel> {
  const next = personalRequests(spec, rand);
  return () => {
    const r = next();
    return async (db) => (await runRead(db, r)).level;
  };
}

/** `perType` reads of each type, for the per-level table (each run at every level). */
export function personalTypedReads(
  spec: PersonalMixSpec,
  rand: () => number,
  perType: number,
): { type: ReadType; request: PersonalRequest }[] {
  const out: { type: ReadType; request: PersonalRequest }[] = [];
  for (const type of Object.keys(PERSONAL_READS) as ReadType[]) {
    const next = personalRequests({ ...spec, only: type }, rand);
    for (let i = 0; i < perType; i++) out.push({ type, request: next() });
  }
  return out;
}

/**
 * The mix's writes, `n` at a time at `at`: signals naming users (80 %: one `db.signals` batch),
 * hides and follows (10 % each, one call each). Resolves with the calls refused.
 */
export function personalWriter(spec: PersonalMixSpec, rand: () => number): (db: TidalDb, n: number, at: number) => Promise<number> {
  const next = personalRequests({ ...spec, writeShare: 1 }, rand);
  return async (db, n, at) => {
    const signals: { item: string; kind: string; user: string; at: number }[] = [];
    const calls: Promise<unknown>[] = [];
    for (let i = 0; i < n; i++) {
      const w = next();
      const b = w.body as { item?: string; kind?: string; user?: string; creator?: string };
      if (w.type === 'write:signal') signals.push({ item: b.item!, kind: b.kind!, user: b.user!, at });
      else {
        const user = decodeURIComponent(w.path.split('/')[2]!);
        calls.push(w.type === 'write:hide' ? db.hide({ user, item: b.item! }) : db.follow({ user, creator: b.creator! }));
      }
    }
    if (signals.length > 0) calls.push(db.signals(signals));
    const settled = await Promise.allSettled(calls);
    return settled.filter((s) => s.status === 'rejected').length;
  };
}
