/**
 * The personalized queries through `tidal serve` against the same queries in process plus the HTTP
 * cost, on one database: the demo corpus and the personal mix's users (histories and follows)
 * written once into `--dir` through the public API, then, in turns (`--rounds`), opened in process
 * (`db.retrieve`, `--workers` workers) and served by `tidal serve --path` (its default acceptors),
 * each answering the same `--requests` requests per type one at a time (latency, no queueing),
 * drawn from the mix's generator (personal-mix.ts) with one seed per type and round. The HTTP cost
 * is `GET /healthz` through the same server and client (a keep-alive connection). Per type: p50
 * and p90 in process, over HTTP, and whether HTTP's p50 ≤ in process p50 + the HTTP cost's p50;
 * and the query thread's own time (`explain.serviceMs`; over HTTP from the request sent again with
 * `explain`), p50.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TidalDb, type RetrieveRequest, type SearchRequest } from 'tidal-core';
import { loadDemo, tidalSchema } from 'tidal-serve/demo';
import { Corpus } from '../src/corpus.js';
import { Report, fmtInt, loadAverage, nowMs, parseOptions } from '../src/harness/index.js';
import { mulberry32 } from '../src/random.js';
import { PERSONAL_DEFAULTS, personalDrawer, personalSpec, type PersonalMixSpec, type ReadType } from '../src/serve/personal-mix.js';
import { writeUsers } from '../src/serve/personal-users.js';

const opts = parseOptions('serve-vs-process', {
  dir: { type: 'string', default: '/tmp/tidal-serve-vs-process', description: 'the database (written on the first run, reused after)' },
  items: { type: 'int', default: 100_000, description: 'items of the demo corpus' },
  users: { type: 'int', default: 10_000, description: 'users of the personal mix' },
  workers: { type: 'int', default: 2, description: 'query workers, in process and in the server' },
  requests: { type: 'int', default: 400, description: 'requests per type and round, after 100 not counted' },
  rounds: { type: 'int', default: 2, description: 'turns of in process then over HTTP' },
});

const TYPES: readonly ReadType[] = ['for_you', 'for_you+unseen', 'following', 'related'];
const WARMUP = 100;
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
const CLI = join(ROOT, 'packages', 'tidal-serve', 'dist', 'cli.js');

const schema = () => ({ ...tidalSchema(128), creatorField: 'creator' });

function spec(): PersonalMixSpec {
  return personalSpec(new Corpus({ items: opts.items, dims: 128, seed: 42 }), opts.users, 0);
}

async function build(s: PersonalMixSpec): Promise<void> {
  mkdirSync(opts.dir, { recursive: true });
  const db = await TidalDb.builder().path(opts.dir).schema(schema()).workers(opts.workers).open();
  try {
    const corpus = await loadDemo(db, { items: opts.items });
    await writeUsers(db, corpus as unknown as Corpus, s, PERSONAL_DEFAULTS.follows);
    await db.warm({ waitForAnn: true });
  } finally {
    await db.close();
  }
}

/** The requests of one type and round: the same in process and over HTTP. */
function draws(s: PersonalMixSpec, type: ReadType, round: number): { path: string; body: string }[] {
  const next = personalDrawer({ ...s, only: type }, mulberry32(4_000 + round * 100 + TYPES.indexOf(type)));
  return Array.from({ length: WARMUP + opts.requests }, () => {
    const r = next();
    return { path: r.path, body: r.body as string };
  });
}

async function inProcess(s: PersonalMixSpec, round: number): Promise<Map<string, number[]>> {
  const db = await TidalDb.builder().path(opts.dir).workers(opts.workers).open();
  const out = new Map<string, number[]>();
  try {
    await db.warm({ waitForAnn: true });
    for (const type of TYPES) {
      const ms: number[] = [];
      const service: number[] = [];
      for (const [i, r] of draws(s, type, round).entries()) {
        const body = JSON.parse(r.body) as Record<string, unknown>;
        const t = nowMs();
        const res =
          r.path === '/search' ? await db.search(body as unknown as SearchRequest) : await db.retrieve(body as unknown as RetrieveRequest);
        if (i < WARMUP) continue;
        ms.push(nowMs() - t);
        service.push(res.explain.serviceMs ?? NaN);
      }
      out.set(type, ms);
      out.set(`${type} service`, service);
    }
  } finally {
    await db.close();
  }
  return out;
}

/** Sends a request on the agent's connection; resolves with the answer's body. */
function send(agent: Agent, url: URL, method: string, path: string, body: string | null): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(
      { agent, host: url.hostname, port: url.port, method, path, headers: body === null ? {} : { 'content-type': 'application/json' } },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
        res.on('end', () => (res.statusCode === 200 ? resolve(text) : reject(new Error(`${method} ${path}: ${res.statusCode}`))));
      },
    );
    req.on('error', reject);
    req.end(body ?? undefined);
  });
}

async function overHttp(s: PersonalMixSpec, round: number): Promise<Map<string, number[]>> {
  const child = spawn(process.execPath, [CLI, 'serve', '--path', opts.dir, '--port', '0', '--workers', String(opts.workers)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const out = new Map<string, number[]>();
  try {
    const url = await new Promise<URL>((resolve, reject) => {
      let text = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
        text += chunk;
        const m = /listening on (http:\/\/\S+)/.exec(text);
        if (m) resolve(new URL(m[1]!));
      });
      void exited.then(() => reject(new Error('tidal serve exited before listening')));
    });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    // Ready once the saved ANN index is in use by every thread.
    for (;;) {
      const ok = await send(agent, url, 'GET', '/readyz', null).then(
        () => true,
        () => false,
      );
      if (ok) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const health: number[] = [];
    for (let i = 0; i < WARMUP + opts.requests; i++) {
      const t = nowMs();
      await send(agent, url, 'GET', '/healthz', null);
      if (i >= WARMUP) health.push(nowMs() - t);
    }
    out.set('GET /healthz', health);
    for (const type of TYPES) {
      const ms: number[] = [];
      const service: number[] = [];
      for (const [i, r] of draws(s, type, round).entries()) {
        const t = nowMs();
        await send(agent, url, 'POST', r.path, r.body);
        if (i < WARMUP) continue;
        ms.push(nowMs() - t);
        // The query thread's own time, from the same request again with `explain` (not timed: its
        // answer is larger, so it would add HTTP cost the in-process call does not pay).
        const text = await send(agent, url, 'POST', r.path, `${r.body.slice(0, -1)},"explain":true}`);
        service.push((JSON.parse(text) as { explain?: { serviceMs?: number } }).explain?.serviceMs ?? NaN);
      }
      out.set(type, ms);
      out.set(`${type} service`, service);
    }
    agent.destroy();
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
  return out;
}

const quantile = (xs: readonly number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
};

async function main(): Promise<void> {
  const report = new Report('serve-vs-process', opts);
  const s = spec();
  if (!existsSync(join(opts.dir, 'tidal.db'))) {
    const t0 = nowMs();
    await build(s);
    report.line(`built ${opts.dir}: ${fmtInt(opts.items)} items, ${fmtInt(opts.users)} users in ${((nowMs() - t0) / 1000).toFixed(0)} s`);
  }
  const inProc = new Map<string, number[]>();
  const http = new Map<string, number[]>();
  const add = (into: Map<string, number[]>, from: Map<string, number[]>) => {
    for (const [k, v] of from) into.set(k, [...(into.get(k) ?? []), ...v]);
  };
  for (let round = 0; round < opts.rounds; round++) {
    process.stderr.write(`round ${round + 1}: in process (load average ${loadAverage()})\n`);
    add(inProc, await inProcess(s, round));
    process.stderr.write(`round ${round + 1}: over HTTP (load average ${loadAverage()})\n`);
    add(http, await overHttp(s, round));
  }
  const healthP50 = quantile(http.get('GET /healthz')!, 0.5);
  const ms = (x: number) => x.toFixed(3);
  report.table(
    '',
    [
      'type',
      'in process p50 (p90), ms',
      'tidal serve p50 (p90), ms',
      'serve − in process, p50',
      'serve ≤ in process + HTTP cost',
      'query thread p50, in process / serve',
    ],
    TYPES.map((t) => {
      const a = inProc.get(t)!;
      const b = http.get(t)!;
      const d = quantile(b, 0.5) - quantile(a, 0.5);
      return [
        t,
        `${ms(quantile(a, 0.5))} (${ms(quantile(a, 0.9))})`,
        `${ms(quantile(b, 0.5))} (${ms(quantile(b, 0.9))})`,
        ms(d),
        d <= healthP50 ? 'yes' : 'no',
        `${ms(quantile(inProc.get(`${t} service`)!, 0.5))} / ${ms(quantile(http.get(`${t} service`)!, 0.5))}`,
      ];
    }),
  );
  report.line(
    `HTTP cost (GET /healthz, same server and client): p50 ${ms(healthP50)} ms (p90 ${ms(quantile(http.get('GET /healthz')!, 0.9))}); ${fmtInt(opts.requests)} requests per type and round, ${opts.rounds} rounds; load average ${loadAverage()}`,
  );
  report.finish();
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exitCode = 1;
});
