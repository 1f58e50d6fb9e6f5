/*
 * What replication writes to Redis and reads back: the stream's entries (one batch each, see
 * redis-stream.ts) and the reports of the `<stream>:replicas` hash.
 */
import type { ReplicatedBatch, ReplicatedEvent } from 'tidal-load';

/** What a replica reports in the `<stream>:replicas` hash (JSON), and what this one keeps of another's report. */
export interface Report {
  /** The reporter's count of its reports: every report differs from the one before. */
  readonly n: number;
  /** The reporter's link clock when it reported, ms. */
  readonly at: number;
  /** Its latest own batch number (−1: none). */
  readonly head: number;
  /** The lowest own batch number its outbox holds. */
  readonly from: number;
  /** Its first batch number ever (absent from versions before it was reported: taken as 0). */
  readonly first?: number;
  /** What it applied of every origin. */
  readonly applied: Record<string, number>;
}

export function parseReport(text: string): Report | null {
  try {
    const r = JSON.parse(text) as Partial<Report>;
    if (
      typeof r.n !== 'number' ||
      typeof r.at !== 'number' ||
      typeof r.head !== 'number' ||
      typeof r.from !== 'number' ||
      typeof r.applied !== 'object' ||
      r.applied === null
    )
      return null;
    return r as Report;
  } catch {
    return null;
  }
}

/** One batch from an entry's fields, or null when the entry is not one. */
export function parseEntry(fields: readonly unknown[]): ReplicatedBatch | null {
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) f.set(String(fields[i]), String(fields[i + 1]));
  const origin = f.get('o');
  const seq = Number(f.get('s'));
  // An entry of a version that did not number batches one by one has no `p`: nothing to wait for.
  const prev = f.has('p') ? Number(f.get('p')) : -1;
  const at = Number(f.get('t'));
  const body = f.get('b');
  if (origin === undefined || body === undefined || !Number.isSafeInteger(seq) || !Number.isSafeInteger(prev) || !Number.isFinite(at))
    return null;
  let events: unknown;
  try {
    events = JSON.parse(body);
  } catch {
    return null;
  }
  return Array.isArray(events) ? { origin, seq, prev, at, events: events as ReplicatedEvent[] } : null;
}

/** The entries of an `XREAD` reply (RESP2: `[[key, [[id, [field, value, …]], …]]]`, or null). */
export function entriesOf(reply: unknown): [string, unknown[]][] {
  if (!Array.isArray(reply) || reply.length === 0) return [];
  const stream = reply[0] as unknown[];
  const entries = Array.isArray(stream) ? stream[1] : undefined;
  if (!Array.isArray(entries)) return [];
  return entries.filter((e): e is [string, unknown[]] => Array.isArray(e) && typeof e[0] === 'string' && Array.isArray(e[1]));
}
