/**
 * Replication through one Redis Stream (docs/scale-out.md#replication). Every replica appends its
 * committed batches to the stream and reads everyone's from its own stored position; there is no
 * consumer group, because every replica needs every entry.
 *
 * An entry is one batch: fields `o` (origin replica id), `s` (the origin's batch number, one
 * above its previous batch's), `p` (the number of that previous batch, −1: none to wait for), `t`
 * (the origin's commit time, ms) and `b` (the events, JSON). Delivery is at least once (an origin
 * appends again what it holds after a restart, or what a follower misses), and followers drop
 * every `(origin, seq)` not above what they applied of that origin.
 *
 * An origin keeps a batch in its outbox until every live replica applied it, not until the stream
 * has it: a stream that loses entries (Redis restarted without its data, or with the last second
 * of its append-only file missing) is filled again from the outboxes. Every `ackIntervalMs` each
 * replica writes to the hash `<stream>:replicas`, under its id, what it applied of every origin and
 * its own latest batch number, and reads the others'. An origin then releases the batches every
 * live replica applied, and appends again those after the position of a live replica whose
 * position of it has not moved for `resendAfterMs` while it had more to read (a follower holds
 * back a batch whose previous one it misses; the batches appended again fill the gap, in order).
 * A replica silent for `peerTimeoutMs` while this one reached Redis is no longer waited for; one
 * that never reported (a replica starting) is not waited for until its first report.
 *
 * Two connections: the follower's `XREAD BLOCK` holds its connection for up to `blockMs`, so the
 * appends (and the hash) go through another one. Neither queues commands while disconnected; both reconnect in
 * the background, and the loops wait `retryMs` between attempts while Redis is away.
 */
import {
  BackpressureError,
  InvalidInputError,
  TidalError,
  emitProcessWarning,
  type ForeignBatch,
  type ReplicaHost,
  type ReplicationLink,
  type ReplicationLinkStats,
  type WarningSink,
} from 'tidal-load';
import { DEFAULTS, checkWhole, type RedisStreamReplicationOptions } from './options.js';
import { openClient, firstConnect, type Client } from './client.js';
import { entriesOf, parseEntry, parseReport, type Report } from './wire.js';

export type { RedisStreamReplicationOptions } from './options.js';
export { parseEntry } from './wire.js';

interface Peer {
  report: Report;
  /** This replica's clock when the peer's report last changed. */
  seenAt: number;
  /** When the peer's position of this origin last changed. */
  movedAt: number;
  /** The number of this replica's stream reads begun when the report's head or outbox start last changed. */
  readsBefore: number;
}

/**
 * A {@link ReplicationLink} over a Redis Stream: publishes the host's outbox in order and follows
 * the other replicas' entries. Give it to `builder.replication(link)`; the database starts it once
 * open and closes it first when it closes.
 */
export class RedisStreamReplication implements ReplicationLink {
  readonly #o: Required<Omit<RedisStreamReplicationOptions, 'onWarning' | 'clock'>>;
  readonly #now: () => number;
  readonly #sink: WarningSink | null;
  readonly #url: string;
  #writer: Client | null = null;
  #reader: Client | null = null;
  #host: ReplicaHost | null = null;
  #loops: Promise<void>[] = [];
  #closed: Promise<void> | null = null;
  #wake: (() => void) | null = null;
  #away = false;
  /** Other replicas as their reports were last read. */
  readonly #peers = new Map<string, Peer>();
  /** This replica's clock when the writer last (re)connected; null while away. */
  #connectedAt: number | null = null;
  /** Reports written (an absent one after the first means Redis lost the hash). */
  #reports = 0;
  /** Redis lost the hash since the last republish: every live replica's missing batches go again at once. */
  #lostHash = false;
  #publishedThrough = -1;
  /** When the writer was found away (this clock); the time away is added to every peer's last sign of life. */
  #awaySince: number | null = null;
  /** The last republish: from which batch, when, and the wait before the same one again (doubling). */
  #resend = { from: -1, at: -Infinity, waitMs: 0 };
  readonly #sleepers = new Set<() => void>();
  readonly #gapsWarned = new Set<string>();
  #published = 0;
  /** Stream reads begun, and the number of the last one that found nothing after the cursor (0: none). */
  #reads = 0;
  #emptyRead = 0;
  #read = 0;
  #applied = 0;

  private constructor(url: string, options: RedisStreamReplicationOptions) {
    this.#url = url;
    this.#sink = options.onWarning ?? null;
    this.#now = options.clock ?? Date.now;
    if (typeof this.#now !== 'function') throw new InvalidInputError('options.clock', 'a function returning milliseconds', options.clock);
    this.#o = {
      stream: options.stream ?? DEFAULTS.stream,
      blockMs: checkWhole('blockMs', options.blockMs ?? DEFAULTS.blockMs, 1, 60_000),
      readCount: checkWhole('readCount', options.readCount ?? DEFAULTS.readCount, 1, 10_000),
      publishCount: checkWhole('publishCount', options.publishCount ?? DEFAULTS.publishCount, 1, 10_000),
      maxLen: checkWhole('maxLen', options.maxLen ?? DEFAULTS.maxLen, 1, 2 ** 40),
      retryMs: checkWhole('retryMs', options.retryMs ?? DEFAULTS.retryMs, 1, 60_000),
      ackIntervalMs: checkWhole('ackIntervalMs', options.ackIntervalMs ?? DEFAULTS.ackIntervalMs, 1, 60_000),
      resendAfterMs: checkWhole('resendAfterMs', options.resendAfterMs ?? DEFAULTS.resendAfterMs, 1, 3_600_000),
      peerTimeoutMs: checkWhole('peerTimeoutMs', options.peerTimeoutMs ?? DEFAULTS.peerTimeoutMs, 1, 2 ** 40),
    };
    if (typeof this.#o.stream !== 'string' || this.#o.stream === '') {
      throw new InvalidInputError('options.stream', 'a non-empty key name', options.stream);
    }
  }

  /**
   * A link to the stream on `url` (`redis://host:port`). Connects when the database starts it; a
   * Redis that cannot be reached then delays publishing, never a write.
   * @throws {@link InvalidInputError} for a bad URL or option.
   */
  static connect(url: string, options: RedisStreamReplicationOptions = {}): RedisStreamReplication {
    if (typeof url !== 'string' || !/^rediss?:\/\//.test(url)) throw new InvalidInputError('url', 'a redis:// or rediss:// URL', url);
    return new RedisStreamReplication(url, options);
  }

  start(host: ReplicaHost): void {
    if (this.#host !== null) throw new InvalidInputError('replication', 'a link started once (give each database its own)', host.replicaId);
    if (this.#closed !== null) return;
    this.#host = host;
    this.#writer = openClient(this.#url);
    this.#reader = openClient(this.#url);
    host.onOutbox(() => this.#wakeUp());
    this.#loops = [this.#publishLoop(host, this.#writer), this.#followLoop(host, this.#reader), this.#reportLoop(host, this.#writer)];
  }

  stats(): ReplicationLinkStats {
    return {
      connected: (this.#writer?.isReady ?? false) && (this.#reader?.isReady ?? false) && !this.#away,
      published: this.#published,
      read: this.#read,
      applied: this.#applied,
    };
  }

  // ---- publishing -----------------------------------------------------------------------------

  /** Appends the outbox, oldest first, one `MULTI` of up to `publishCount` batches at a time. */
  async #publishLoop(host: ReplicaHost, client: Client): Promise<void> {
    const o = this.#o;
    await firstConnect(client);
    while (this.#closed === null) {
      if (host.unpublishedCount() === 0) {
        await this.#sleep(o.retryMs * 4, true);
        continue;
      }
      if (!client.isReady) {
        this.#wentAway(host, 'not connected');
        await this.#sleep(o.retryMs);
        continue;
      }
      const batches = host.unpublished(o.publishCount);
      try {
        const multi = client.multi();
        for (const b of batches) {
          multi.addCommand([
            'XADD',
            o.stream,
            'MAXLEN',
            '~',
            String(o.maxLen),
            '*',
            'o',
            b.origin,
            's',
            String(b.seq),
            'p',
            String(b.prev),
            't',
            String(b.at),
            'b',
            JSON.stringify(b.events),
          ]);
        }
        await multi.exec();
      } catch (err) {
        // Appended or not, the rows stay: appended twice is dropped by the followers, never lost.
        if (this.#closed !== null) return;
        this.#wentAway(host, (err as Error).message);
        await this.#sleep(o.retryMs);
        continue;
      }
      const last = batches[batches.length - 1]!.seq;
      host.published(last);
      if (last > this.#publishedThrough) this.#publishedThrough = last;
      this.#published += batches.length;
      this.#cameBack(host);
    }
  }

  // ---- following ------------------------------------------------------------------------------

  /** Reads every entry after the stored position and applies the other replicas' batches. */
  async #followLoop(host: ReplicaHost, client: Client): Promise<void> {
    const o = this.#o;
    await firstConnect(client);
    let cursor = host.position() ?? '0';
    while (this.#closed === null) {
      if (!client.isReady) {
        this.#wentAway(host, 'not connected');
        await this.#sleep(o.retryMs);
        continue;
      }
      let reply: unknown;
      const readNo = ++this.#reads;
      try {
        reply = await client.sendCommand(['XREAD', 'COUNT', String(o.readCount), 'BLOCK', String(o.blockMs), 'STREAMS', o.stream, cursor]);
      } catch (err) {
        if (this.#closed !== null) return;
        this.#wentAway(host, (err as Error).message);
        await this.#sleep(o.retryMs);
        continue;
      }
      this.#cameBack(host);
      const entries = entriesOf(reply);
      if (entries.length === 0) {
        // Nothing after the cursor: what this replica had not applied when the read began is in no entry of the stream.
        this.#emptyRead = readNo;
        continue;
      }
      this.#read += entries.length;
      const foreign: ForeignBatch[] = [];
      for (const [id, fields] of entries) {
        const batch = parseEntry(fields);
        if (batch === null) {
          this.#warn(host, 'TIDAL_REPLICATION_STALLED', `replication entry ${id} of ${o.stream} is not a batch; it was skipped`);
          continue;
        }
        if (batch.origin !== host.replicaId) foreign.push({ batch, position: id });
      }
      try {
        this.#applied += await host.applyForeign(foreign);
        cursor = entries[entries.length - 1]![0];
      } catch (err) {
        if (this.#closed !== null) return;
        // Read again from what is durable: the batches that did commit are dropped as duplicates.
        cursor = host.position() ?? '0';
        if (err instanceof BackpressureError) {
          await this.#sleep(Math.max(err.retryAfterMs, 1));
          continue;
        }
        const code = TidalError.is(err) ? err.code : 'unknown';
        this.#warn(
          host,
          'TIDAL_REPLICATION_STALLED',
          `foreign batches could not be applied (${code}: ${(err as Error).message}); retrying in ${o.retryMs} ms`,
        );
        await this.#sleep(o.retryMs);
      }
    }
  }

  // ---- reports: what every replica applied -------------------------------------------------------

  /** Every `ackIntervalMs`: reports this replica's positions, reads the others', releases and republishes. */
  async #reportLoop(host: ReplicaHost, client: Client): Promise<void> {
    const o = this.#o;
    await firstConnect(client);
    while (this.#closed === null) {
      if (client.isReady) {
        try {
          await this.#exchange(host, client);
        } catch {
          // Redis went away between two commands: the publisher and the follower say so.
          this.#disconnected();
        }
      } else {
        this.#disconnected();
      }
      await this.#sleep(o.ackIntervalMs);
    }
  }

  #disconnected(): void {
    this.#connectedAt = null;
    this.#awaySince ??= this.#now();
  }

  async #exchange(host: ReplicaHost, client: Client): Promise<void> {
    const o = this.#o;
    const key = `${o.stream}:replicas`;
    const self = host.replicaId;
    const now = this.#now();
    if (this.#connectedAt === null) {
      // Back after an outage (or starting): the time away does not count against anyone.
      const away = this.#awaySince === null ? 0 : now - this.#awaySince;
      this.#connectedAt = now;
      this.#awaySince = null;
      // What went again before the outage may be lost with Redis: the next republish does not wait for a doubled wait.
      this.#resend = { from: -1, at: -Infinity, waitMs: 0 };
      for (const p of this.#peers.values()) {
        p.seenAt += away;
        p.movedAt = now;
      }
    }
    const head = host.head();
    const applied: Record<string, number> = {};
    for (const p of host.origins()) applied[p.origin] = p.seq;
    const mine: Report = { n: ++this.#reports, at: now, head: head.seq, from: head.from, first: head.first, applied };
    const replies = await client
      .multi()
      .addCommand(['HEXISTS', key, self])
      .addCommand(['HSET', key, self, JSON.stringify(mine)])
      .addCommand(['HGETALL', key])
      .exec();
    // Written before, absent now: Redis lost its data (restarted without it), and with it entries of the stream.
    if (this.#reports > 1 && Number(replies[0]) === 0) this.#lostHash = true;
    const all = replies[2];
    const fields: unknown[] = Array.isArray(all) ? all : all !== null && typeof all === 'object' ? Object.entries(all).flat() : [];
    for (let i = 0; i + 1 < fields.length; i += 2) {
      const id = String(fields[i]);
      if (id === self) continue;
      const report = parseReport(String(fields[i + 1]));
      if (report === null) continue;
      const known = this.#peers.get(id);
      if (known === undefined) {
        // First read: alive when it reported (its clock; skew is small next to peerTimeoutMs), so the
        // report a replica gone for good left behind is not waited for.
        this.#peers.set(id, { report, seenAt: Math.min(now, report.at), movedAt: now, readsBefore: this.#reads });
      } else if (report.n !== known.report.n || report.at !== known.report.at) {
        if ((report.applied[self] ?? -1) !== (known.report.applied[self] ?? -1)) known.movedAt = now;
        if (report.head !== known.report.head || report.from !== known.report.from) known.readsBefore = this.#reads;
        known.report = report;
        known.seenAt = now;
      }
      host.learnHead(id, report.head);
    }
    this.#giveUpGaps(host);
    const live = [...this.#peers.values()].filter((p) => now - p.seenAt <= o.peerTimeoutMs);
    // Until every live replica reported once since this link connected, an absent one is unknown, not gone.
    if (now - this.#connectedAt >= 2 * o.ackIntervalMs) {
      let low = this.#publishedThrough;
      for (const p of live) low = Math.min(low, p.report.applied[self] ?? -1);
      if (low >= 0) host.release(low);
    }
    // Republish after the lowest position that is stuck below what was published (or at once when Redis lost the hash).
    const lostHash = this.#lostHash;
    let from = Infinity;
    for (const p of live) {
      const at = p.report.applied[self] ?? -1;
      if (at < this.#publishedThrough && (lostHash || now - p.movedAt >= o.resendAfterMs)) from = Math.min(from, at + 1);
    }
    if (from === Infinity) {
      this.#lostHash = false;
      return;
    }
    from = Math.max(from, head.from);
    // The same batches again only after twice the wait before (a replica that cannot apply them is
    // not sent the outbox every resendAfterMs), up to a minute.
    const r = this.#resend;
    const waitMs = from === r.from ? Math.min(2 * r.waitMs, 60_000) : o.resendAfterMs;
    if (!lostHash && now - r.at < (from === r.from ? r.waitMs : 0)) return;
    this.#resend = { from, at: now, waitMs };
    this.#lostHash = false;
    for (const p of live) p.movedAt = now;
    host.republish(from);
    this.#wakeUp();
  }

  /**
   * A gap whose first batch its origin no longer holds cannot be filled: warn, and let the
   * follower go on with the origin's next batch.
   */
  #giveUpGaps(host: ReplicaHost): void {
    const gapped = new Set<string>();
    for (const gap of host.gaps()) {
      gapped.add(gap.origin);
      const peer = this.#peers.get(gap.origin);
      // Numbers below the origin's first batch never existed: a gap from there holds nothing lost.
      const from = Math.max(gap.from, peer?.report.first ?? 0);
      if (peer === undefined || peer.report.from <= from) continue;
      this.#lose(host, gap.origin, from, Math.min(gap.to, peer.report.from - 1), peer.report.from);
    }
    // Batches no later entry revealed (the origin went quiet): missing when a read begun after the
    // origin's report found nothing more in the stream, and the report says its outbox starts past them.
    const applied = new Map(host.origins().map((p) => [p.origin, p.seq]));
    for (const [id, peer] of this.#peers) {
      if (gapped.has(id) || this.#emptyRead <= peer.readsBefore) continue;
      const from = Math.max((applied.get(id) ?? -1) + 1, peer.report.first ?? 0);
      if (peer.report.head < from || peer.report.from <= from) continue;
      this.#lose(host, id, from, Math.min(peer.report.head, peer.report.from - 1), peer.report.from);
    }
  }

  /** Records batches `from`–`to` of `origin` as lost here (once), and warns. */
  #lose(host: ReplicaHost, origin: string, from: number, to: number, keeps: number): void {
    const key = `${origin}/${from}`;
    if (this.#gapsWarned.has(key)) return;
    this.#gapsWarned.add(key);
    host.skipGap(origin, { from, to });
    this.#warn(
      host,
      'TIDAL_REPLICATION_GAP',
      `batches ${from}–${to} of replica ${origin} were not applied here, the stream no longer holds them and its outbox keeps ` +
        `from ${keeps}: they are missing here; bootstrap the replica from a peer (TidalDb.bootstrapReplica)`,
    );
  }

  // ---- state ----------------------------------------------------------------------------------

  #wentAway(host: ReplicaHost, why: string): void {
    if (this.#away) return;
    this.#away = true;
    this.#warn(
      host,
      'TIDAL_REPLICATION_AWAY',
      `the replication stream's Redis (${this.#url}) cannot be reached (${why}); writes are acknowledged and served locally, ` +
        `${host.unpublishedCount()} batches wait in the outbox, published when it returns`,
    );
  }

  #cameBack(host: ReplicaHost): void {
    if (!this.#away) return;
    this.#away = false;
    this.#warn(
      host,
      'TIDAL_REPLICATION_RESTORED',
      `the replication stream's Redis (${this.#url}) answers again; publishing and following resume`,
    );
  }

  #warn(
    host: ReplicaHost,
    code: 'TIDAL_REPLICATION_AWAY' | 'TIDAL_REPLICATION_RESTORED' | 'TIDAL_REPLICATION_STALLED' | 'TIDAL_REPLICATION_GAP',
    message: string,
  ): void {
    try {
      (this.#sink ?? host.onWarning ?? emitProcessWarning)({ code, message });
    } catch {
      // A failing sink must not stop replication.
    }
  }

  #wakeUp(): void {
    const w = this.#wake;
    this.#wake = null;
    w?.();
  }

  /** Waits `ms`, or until the link closes; a `wakeable` wait (the publisher's) also ends when the outbox grows. */
  #sleep(ms: number, wakeable = false): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.#sleepers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#sleepers.add(done);
      if (wakeable) this.#wake = done;
    });
  }

  /** Stops both loops and closes the connections; idempotent. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      this.#wakeUp();
      for (const wake of [...this.#sleepers]) wake();
      // The reader may be blocked in XREAD: destroying its socket ends the call at once.
      try {
        this.#reader?.destroy();
      } catch {
        // Already closed.
      }
      try {
        this.#writer?.destroy();
      } catch {
        // Already closed.
      }
      await Promise.allSettled(this.#loops);
    })();
    return this.#closed;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
