/** Fixtures of the user and personalization tests. */
import type { SchemaDefinition } from 'tidal-core';
import { HOUR } from './helpers.js';

/** `like` moves preferences toward an item (rate 0.5), `skip` away (0.25); creators are `creator`. */
export const USER_SCHEMA: SchemaDefinition = {
  signals: [
    { name: 'view', halfLifeMs: HOUR, velocity: true },
    { name: 'like', halfLifeMs: 24 * HOUR, windows: ['24h', 'all'], preference: 0.5 },
    { name: 'skip', halfLifeMs: HOUR, windows: ['all'], preference: -0.25 },
  ],
  metadata: { category: 'string', creator: 'string' },
  embeddingDims: 3,
  creatorField: 'creator',
};
