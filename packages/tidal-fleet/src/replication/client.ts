import { createClient } from 'redis';

export type Client = ReturnType<typeof createClient>;

/** A loopback or LAN connection is made in well under a millisecond; a second is far past any healthy one. */
const CONNECT_TIMEOUT_MS = 1_000;

export function openClient(url: string): Client {
  const client = createClient({
    url,
    disableOfflineQueue: true,
    socket: {
      connectTimeout: CONNECT_TIMEOUT_MS,
      // Quickly at first, then every second: a returning Redis is picked up within ≈ 1 s.
      reconnectStrategy: (retries: number) => Math.min(50 * 2 ** Math.min(retries, 5), 1_000),
    },
  });
  // Failures surface on the commands that meet them; the event must be listened to or it would throw.
  client.on('error', () => {});
  client.connect().catch(() => {});
  return client;
}

/**
 * Resolves once `client` is ready, or after its connect timeout: a link that starts is not "away"
 * for the round trip its first connection takes.
 */
export function firstConnect(client: Client): Promise<void> {
  if (client.isReady) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, CONNECT_TIMEOUT_MS);
    client.once('ready', done);
    function done(): void {
      clearTimeout(timer);
      client.off('ready', done);
      resolve();
    }
  });
}
