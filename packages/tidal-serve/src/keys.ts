import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { InvalidInputError } from 'tidal-core';
import type { Tier } from './admission/types.js';

/** Who a bearer token speaks for. */
export interface KeyGrant {
  readonly tenant: string;
  readonly tier: Tier;
}

/** Shortest key accepted: 16 characters of a random token is ≥ 96 bits, beyond guessing. */
export const MIN_KEY_LENGTH = 16;
const TIERS: readonly Tier[] = ['free', 'pro'];

function digest(key: string): string {
  return createHash('sha256').update(key).digest('base64');
}

/**
 * API keys: bearer token → tenant and tier. Looked up by the token's SHA-256, so the map never
 * compares secrets character by character (no timing signal about how much of a guess was right)
 * and the process holds no plain key after loading.
 */
export class KeyRing {
  readonly #grants = new Map<string, KeyGrant>();

  /**
   * @param entries key → grant, as the keys file holds them.
   * @throws InvalidInputError naming `keys["…"]…` (the key shown by its first 4 characters) for a
   * short key, a missing tenant or an unknown tier.
   */
  constructor(entries: Readonly<Record<string, unknown>>) {
    for (const [key, grant] of Object.entries(entries)) {
      const shown = `keys["${key.slice(0, 4)}…"]`;
      if (key.length < MIN_KEY_LENGTH)
        throw new InvalidInputError(shown, `a key of at least ${MIN_KEY_LENGTH} characters`, `${key.length} characters`);
      if (typeof grant !== 'object' || grant === null) throw new InvalidInputError(shown, 'an object { tenant, tier }', grant);
      const { tenant, tier } = grant as Record<string, unknown>;
      if (typeof tenant !== 'string' || tenant.length === 0 || tenant.length > 512) {
        throw new InvalidInputError(`${shown}.tenant`, 'a string of 1 to 512 characters', tenant);
      }
      if (!TIERS.includes(tier as Tier)) throw new InvalidInputError(`${shown}.tier`, `one of ${TIERS.join(', ')}`, tier);
      this.#grants.set(digest(key), Object.freeze({ tenant, tier: tier as Tier }));
    }
    if (this.#grants.size === 0) throw new InvalidInputError('keys', 'at least one key', 'an empty set');
  }

  get size(): number {
    return this.#grants.size;
  }

  /** The grant of an `Authorization` header value (`Bearer <key>`), or `undefined` when it has none. */
  authorize(header: string | undefined): KeyGrant | undefined {
    if (header === undefined || header.length < 7 || header.slice(0, 7).toLowerCase() !== 'bearer ') return undefined;
    const key = header.slice(7).trim();
    if (key.length < MIN_KEY_LENGTH) return undefined;
    return this.#grants.get(digest(key));
  }

  /**
   * Reads a keys file: a JSON object `{ "<key>": { "tenant": "acme", "tier": "pro" }, … }`.
   * @throws InvalidInputError naming `--keys` when the file cannot be read or parsed.
   */
  static fromFile(path: string): KeyRing {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new InvalidInputError('--keys', `a readable file (${(err as Error).message})`, path);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw new InvalidInputError('--keys', `a JSON file (${(err as Error).message})`, path);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new InvalidInputError('--keys', 'a JSON object mapping each key to { tenant, tier }', path);
    }
    return new KeyRing(parsed as Record<string, unknown>);
  }
}
