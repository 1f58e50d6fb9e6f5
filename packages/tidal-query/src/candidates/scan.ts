import type { Predicate } from '../filter.js';
import { popularity, velocityOf, type QueryContext, type WorkCounter } from '../context.js';
import { TopK } from '../topk.js';
import type { Explain, RetrieveTask, VelocityWindow } from '../types.js';
import { WINDOW_MS } from '../windows.js';

/** The reference: every slot of the arena, scored. */
export function scan(
  ctx: QueryContext,
  profile: RetrieveTask['profile'],
  want: number,
  pass: Predicate,
  window: VelocityWindow,
  nowMs: number,
  explain: Pick<Explain, 'candidates' | 'afterFilter'>,
  work: WorkCounter,
): { ranked: number[]; scores: number[] } {
  const { store, schema } = ctx;
  const kinds = schema.kinds;
  const trending = profile === 'trending';
  const top = new TopK(want);
  const used = store.slotsUsed();
  explain.candidates = 0;
  explain.afterFilter = 0;
  // One kind (the common case) needs no per-item accumulation: each slot is one item.
  const considered = trending ? kinds.filter((k) => k.velocity).length : kinds.length;
  if (considered === 1) {
    const only = trending ? kinds.findIndex((k) => k.velocity) : 0;
    const horizon = nowMs - WINDOW_MS[window];
    for (let s = 0; s < used; s++) {
      work.slots++;
      if (store.slotKind(s) !== only) continue;
      if (!store.hasEvents(s)) continue;
      explain.candidates++;
      const o = store.slotOrdinal(s);
      if (!pass(o)) continue;
      explain.afterFilter++;
      const decayed = store.decayedScore(s, nowMs);
      if (!trending) top.push(o, decayed, 0);
      else top.push(o, store.newestAt(s) < horizon ? 0 : store.velocity(s, window, nowMs, false), decayed);
    }
  } else {
    const seen = new Set<number>();
    for (let s = 0; s < used; s++) {
      work.slots++;
      const k = store.slotKind(s);
      if (!store.hasEvents(s)) continue;
      if (trending && !kinds[k]!.velocity) continue;
      const o = store.slotOrdinal(s);
      if (seen.has(o)) continue;
      seen.add(o);
      explain.candidates++;
      if (!pass(o)) continue;
      explain.afterFilter++;
      const [p, sec] = score(ctx, profile, o, window, nowMs, work);
      top.push(o, p, sec);
    }
  }
  const { ordinals, primary } = top.sorted();
  return { ranked: ordinals, scores: primary };
}

/** The profile's score of `o`: (primary, secondary). */
export function score(
  ctx: QueryContext,
  profile: RetrieveTask['profile'],
  o: number,
  window: VelocityWindow,
  nowMs: number,
  work: WorkCounter,
): [number, number] {
  if (profile === 'new' || profile === 'for_you') return [ctx.catalog.createdAt[o]!, 0];
  const pop = popularity(ctx, o, nowMs, work);
  if (profile === 'popular') return [pop, 0];
  return [velocityOf(ctx, o, window, nowMs, false, work), pop];
}
