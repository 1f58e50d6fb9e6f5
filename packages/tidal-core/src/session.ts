/** One agent session as the registry holds it in memory, and its row in the `sessions` table. */
import type { SessionHandle, SessionSummary } from './sessions.js';

export interface SessionRow {
  key: number;
  id: string;
  agent: string;
  opened_at: number;
  ttl_ms: number;
  last_active_at: number;
  signals_written: number;
  rejections: number;
}

export const OPEN = 0;
export const CLOSING = 1;
export const CLOSED = 2;

export class Session {
  readonly handle: SessionHandle;
  readonly key: number;
  readonly openedAt: number;
  readonly ttlMs: number;
  lastActiveAt: number;
  signalsWritten: number;
  rejections: number;
  /** Ordinals of the items it signalled (committed signals only); created on the first. */
  seen: Set<number> | null = null;
  /** `seen` as the retrieve task wants it, rebuilt only after `seen` changes. */
  exclude: Int32Array | null = null;
  state = OPEN;
  /** Signals enqueued and not yet committed or failed. */
  pending = 0;
  drained: (() => void) | null = null;
  closedAt = 0;
  autoClosed = false;
  summary: SessionSummary | null = null;

  constructor(
    handle: SessionHandle,
    key: number,
    openedAt: number,
    ttlMs: number,
    lastActiveAt: number,
    signalsWritten: number,
    rejections: number,
  ) {
    this.handle = handle;
    this.key = key;
    this.openedAt = openedAt;
    this.ttlMs = ttlMs;
    this.lastActiveAt = lastActiveAt;
    this.signalsWritten = signalsWritten;
    this.rejections = rejections;
  }

  get expiresAt(): number {
    return this.lastActiveAt + this.ttlMs;
  }
}
