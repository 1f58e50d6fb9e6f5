/**
 * The personalization suite's users, drawn the same way by its own run and by `--baseline`
 * (personalization-trees.ts): each user's history, mostly from one favourite category (a like in
 * three), then 5 follows of creators of that category. One random stream, histories first.
 */
import type { SignalInput } from 'tidal-core';
import type { Corpus } from './corpus.js';

const DAY = 86_400_000;
export const FOLLOWS_PER_USER = 5;

/** User `u`'s favourite category's item indexes (categories in the order `byCategory` holds them). */
export function favouriteOf(byCategory: ReadonlyMap<string, readonly number[]>, u: number): readonly number[] {
  const categories = [...byCategory.keys()];
  return byCategory.get(categories[u % categories.length]!)!;
}

/** `history` signals naming `user` over the 7 days before `now`: the item indexes and the events. */
export function drawHistory(
  rand: () => number,
  corpus: Corpus,
  fav: readonly number[],
  user: string,
  history: number,
  now: number,
): { items: number[]; events: SignalInput[] } {
  const items: number[] = [];
  const events: SignalInput[] = [];
  for (let k = 0; k < history; k++) {
    const i = rand() < 0.8 ? fav[Math.floor(rand() ** 2 * fav.length)]! : Math.floor(rand() * corpus.size);
    items.push(i);
    events.push({
      item: corpus.id(i),
      kind: rand() < 0.33 ? 'like' : 'view',
      user,
      at: now - DAY * 7 + Math.floor(((k + rand()) / history) * 7 * DAY),
    });
  }
  return { items, events };
}

/** The creators `user` follows: {@link FOLLOWS_PER_USER} drawn from its favourite category's items. */
export function drawFollows(rand: () => number, fav: readonly number[], creatorOf: readonly string[]): string[] {
  return Array.from({ length: FOLLOWS_PER_USER }, () => creatorOf[fav[Math.floor(rand() * fav.length)]!]!);
}
