import { InvalidInputError } from 'tidal-load';
import {
  FOR_YOU_EXPLORE,
  FOR_YOU_WEIGHTS,
  RISING_BASELINE,
  type FollowingOrder,
  type ForYouOptions,
  type ForYouWeights,
  type Profile,
  type QuerySchema,
  type VelocityWindow,
} from 'tidal-query';
import type { RetrieveRequest } from './types.js';
import { isPlainObject } from './validate.js';

/** `hide` / `unhide`: a user and an item id. */
export interface UserItemInput {
  user: string;
  item: string;
}

/** `block` / `unblock` / `follow` / `unfollow`: a user and a creator (a value of the schema's `creatorField`). */
export interface UserCreatorInput {
  user: string;
  creator: string;
}

/**
 * Filters on a user's state, for any retrieve profile and for search (each needs `user`).
 * Hidden items and blocked creators' items are left out of every query naming a user whatever
 * these say.
 */
export interface UserFilter {
  /** Leave out the items in the user's seen set. @default false */
  unseen?: boolean;
  /** Leave out hidden items and blocked creators' items: always on when the query names a user. @default true */
  unblocked?: boolean;
  /** Keep only items of creators the user follows (needs `schema.creatorField`). @default false */
  following?: boolean;
}

/** A hide or unhide call's (user, item); the ids are checked when the write is admitted. */
export function itemEdge(op: 'hide' | 'unhide', edge: UserItemInput): [user: unknown, item: unknown] {
  if (typeof edge !== 'object' || edge === null) throw new InvalidInputError(op, 'an object { user, item }', edge);
  return [edge.user, edge.item];
}

/** A block, unblock, follow or unfollow call's (user, creator); checked like {@link itemEdge}. */
export function creatorEdge(op: 'block' | 'unblock' | 'follow' | 'unfollow', edge: UserCreatorInput): [user: unknown, creator: unknown] {
  if (typeof edge !== 'object' || edge === null) throw new InvalidInputError(op, 'an object { user, creator }', edge);
  return [edge.user, edge.creator];
}

const USER_FILTER_KEYS = ['unseen', 'unblocked', 'following'];
const WEIGHT_KEYS = ['similarity', 'velocity', 'recency', 'affinity'] as const;

/** A validated user filter; `unseen` and `following` off when absent. */
export function checkUserFilter(value: unknown, hasUser: boolean, schema: QuerySchema): { unseen: boolean; following: boolean } {
  if (value === undefined) return { unseen: false, following: false };
  if (!hasUser) throw new InvalidInputError('userFilter', 'absent without a user (it filters on the user state of `user`)', value);
  if (!isPlainObject(value)) throw new InvalidInputError('userFilter', '{ unseen?, unblocked?, following? } of booleans', value);
  for (const k of Object.keys(value)) {
    if (!USER_FILTER_KEYS.includes(k))
      throw new InvalidInputError(`userFilter.${k}`, `absent: userFilter takes ${USER_FILTER_KEYS.join(', ')}`, value[k]);
    if (typeof value[k] !== 'boolean') throw new InvalidInputError(`userFilter.${k}`, 'a boolean', value[k]);
  }
  if (value.unblocked === false) {
    throw new InvalidInputError(
      'userFilter.unblocked',
      'true or absent: hidden items and blocked creators never come back to their user',
      false,
    );
  }
  const following = value.following === true;
  if (following && schema.creatorField === undefined) {
    throw new InvalidInputError('userFilter.following', 'absent: the schema names no creatorField', true);
  }
  return { unseen: value.unseen === true, following };
}

/** The `for_you` options of a retrieve request (defaults filled in), or null for another profile. */
export function checkForYou(req: RetrieveRequest, schema: QuerySchema): ForYouOptions | null {
  if (req.profile !== 'for_you') {
    for (const k of ['weights', 'explore', 'seed'] as const) {
      if (req[k] !== undefined) throw new InvalidInputError(k, "absent: it is an option of profile 'for_you'", req[k]);
    }
    return null;
  }
  if (req.user === undefined) throw new InvalidInputError('user', "a user id: profile 'for_you' ranks for a user", undefined);
  if (schema.embeddingDims === 0)
    throw new InvalidInputError('profile', "a profile the schema supports ('for_you' needs embeddingDims)", req.profile);
  const weights: ForYouWeights = { ...FOR_YOU_WEIGHTS };
  if (req.weights !== undefined) {
    const given: unknown = req.weights;
    if (!isPlainObject(given)) throw new InvalidInputError('weights', `an object of ${WEIGHT_KEYS.join(', ')}`, given);
    for (const k of Object.keys(given)) {
      if (!(WEIGHT_KEYS as readonly string[]).includes(k))
        throw new InvalidInputError(`weights.${k}`, `absent: weights takes ${WEIGHT_KEYS.join(', ')}`, given[k]);
      const w = given[k];
      if (typeof w !== 'number' || !Number.isFinite(w) || w < 0 || w > 1000)
        throw new InvalidInputError(`weights.${k}`, 'a finite number from 0 to 1000', w);
      weights[k as keyof ForYouWeights] = w;
    }
  }
  const explore = req.explore ?? FOR_YOU_EXPLORE;
  if (typeof explore !== 'number' || !(explore >= 0 && explore <= 0.5))
    throw new InvalidInputError('explore', 'a number from 0 to 0.5', explore);
  const seed = req.seed ?? 0;
  if (typeof seed !== 'number' || !Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
    throw new InvalidInputError('seed', 'a whole number from 0 to 4294967295', seed);
  }
  return { weights, explore, seed };
}

/** Profiles that rank the whole corpus by their own score: a context vector is refused. */
const NO_CONTEXT: readonly Profile[] = ['for_you', 'following', 'hot', 'rising', 'top', 'related'];

/** The options of the feed profiles (`order` of `following`, `item` of `related`), each refused on another profile. */
export function checkFeedOptions(req: RetrieveRequest, window: VelocityWindow): { order: FollowingOrder | null; item: string | null } {
  const profile = req.profile;
  if (req.context !== undefined && NO_CONTEXT.includes(profile)) {
    throw new InvalidInputError('context', `absent for profile '${profile}' (it ranks by its own score, not around a vector)`, req.context);
  }
  if (req.order !== undefined && profile !== 'following')
    throw new InvalidInputError('order', "absent: it is an option of profile 'following'", req.order);
  if (req.item !== undefined && profile !== 'related')
    throw new InvalidInputError('item', "absent: it is an option of profile 'related'", req.item);
  let order: FollowingOrder | null = null;
  if (profile === 'following') {
    if (req.user === undefined)
      throw new InvalidInputError('user', "a user id: profile 'following' ranks the creators a user follows", undefined);
    const o: unknown = req.order ?? 'newest';
    if (o !== 'newest' && o !== 'popular') throw new InvalidInputError('order', "'newest' or 'popular'", o);
    order = o;
  }
  if (profile === 'rising' && RISING_BASELINE[window] === undefined) {
    throw new InvalidInputError('window', "'1h' or '24h' for profile 'rising' (it compares the window with the next longer one)", window);
  }
  let item: string | null = null;
  if (profile === 'related') {
    if (typeof req.item !== 'string' || req.item.length === 0 || req.item.length > 512) {
      throw new InvalidInputError('item', "an item id: profile 'related' ranks the items co-engaged with it", req.item);
    }
    item = req.item;
  }
  return { order, item };
}
