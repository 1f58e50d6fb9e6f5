/**
 * Builds the users of `bench:serve --mix personal` through the server's public routes, before any
 * phase: `POST /users` (each with its embedding), `POST /signals` (each user's history, naming the
 * user: its seen set and the co-engagement `related` reads), `POST /users/:id/follow`; or the same
 * through a TidalDb's public API ({@link writeUsers}, for the probes that compare with it in process).
 */
import type { TidalDb } from 'tidal-core';
import type { Corpus } from '../corpus.js';
import { personalUser, type PersonalMixSpec } from './personal-mix.js';

export interface BuiltUsers {
  readonly users: number;
  readonly signals: number;
  readonly follows: number;
  readonly ms: number;
}

const USERS_PER_CALL = 100;
const SIGNALS_PER_CALL = 1000;
const CONCURRENCY = 16;

async function post(url: string, body: unknown): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const r = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body, (_k, v: unknown) => (v instanceof Float32Array ? Array.from(v) : v)),
    });
    const text = await r.text();
    if (r.ok) return;
    // Backpressure while the writer catches up: wait as the answer says, then again.
    if (r.status === 503 && attempt < 20) {
      const ms = Number(r.headers.get('x-retry-after-ms') ?? 100);
      await new Promise((res) => setTimeout(res, Math.min(2000, Math.max(10, ms))));
      continue;
    }
    throw new Error(`POST ${new URL(url).pathname} answered ${r.status}: ${text.slice(0, 300)}`);
  }
}

/** Runs `jobs` with at most `CONCURRENCY` at a time. */
async function pool(jobs: readonly (() => Promise<void>)[]): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(CONCURRENCY, jobs.length) }, async () => {
      while (next < jobs.length) await jobs[next++]!();
    }),
  );
}

/** Writes `spec.users` users, their histories and `follows` follows each into the server at `url`. */
export async function buildUsers(url: string, corpus: Corpus, spec: PersonalMixSpec, follows: number): Promise<BuiltUsers> {
  const t0 = performance.now();
  const users = Array.from({ length: spec.users }, (_, u) => personalUser(corpus, spec, u, follows));
  const jobs: (() => Promise<void>)[] = [];
  for (let i = 0; i < users.length; i += USERS_PER_CALL) {
    const batch = users.slice(i, i + USERS_PER_CALL).map((u) => ({ id: u.id, embedding: u.embedding }));
    jobs.push(() => post(`${url}/users`, batch));
  }
  await pool(jobs);
  const signals = users.flatMap((u) => u.history.map((i) => ({ item: corpus.id(i), kind: 'view', user: u.id })));
  jobs.length = 0;
  for (let i = 0; i < signals.length; i += SIGNALS_PER_CALL) {
    const batch = signals.slice(i, i + SIGNALS_PER_CALL);
    jobs.push(() => post(`${url}/signals`, batch));
  }
  await pool(jobs);
  jobs.length = 0;
  for (const u of users) for (const creator of u.follows) jobs.push(() => post(`${url}/users/${u.id}/follow`, { creator }));
  await pool(jobs);
  return { users: users.length, signals: signals.length, follows: jobs.length, ms: performance.now() - t0 };
}

/** The same users, histories and follows as {@link buildUsers}, written through `db`'s public API. */
export async function writeUsers(db: TidalDb, corpus: Corpus, spec: PersonalMixSpec, follows: number): Promise<void> {
  const users = Array.from({ length: spec.users }, (_, u) => personalUser(corpus, spec, u, follows));
  for (let i = 0; i < users.length; i += USERS_PER_CALL)
    await db.upsertUsers(users.slice(i, i + USERS_PER_CALL).map((u) => ({ id: u.id, embedding: u.embedding })));
  const signals = users.flatMap((u) => u.history.map((i) => ({ item: corpus.id(i), kind: 'view', user: u.id })));
  for (let i = 0; i < signals.length; i += SIGNALS_PER_CALL) await db.signals(signals.slice(i, i + SIGNALS_PER_CALL));
  for (const u of users) for (const creator of u.follows) await db.follow({ user: u.id, creator });
}
