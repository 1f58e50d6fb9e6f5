/**
 * `/readyz` and `/stats` say whether vector searches are exact (the ANN index being built on a thread
 * of its own), and with `readyRequiresAnn` (`tidal serve --wait-for-ann`) `/readyz` reports ready only
 * once the index is in use. The build is held at its start (a test hook), so what is seen during it
 * does not depend on timing; through the CLI (where nothing holds it) every probe is checked
 * against what it says.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { TidalDb } from 'tidal-core';
import { internalsOf } from 'tidal-core/internal';
import { startServer, type TidalServer } from 'tidal-serve';
import { parseServeArgs } from 'tidal-serve/internal';

const DIMS = 4;

async function get(base: string, path: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe('/readyz and /stats during an ANN build', () => {
  let dir: string;
  let db: TidalDb;
  let waiting: TidalServer;
  let plain: TidalServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tidal-ready-ann-'));
    db = await TidalDb.builder()
      .path(dir)
      .schema({ signals: [{ name: 'view', halfLifeMs: 3_600_000 }], embeddingDims: DIMS })
      .workers(1)
      .ann({ backgroundRows: 0 })
      .onWarning(() => {})
      .open();
    internalsOf(db).annBuild.hold();
    await db.upsertItems(Array.from({ length: 40 }, (_, i) => ({ id: `v${i}`, embedding: [1, i / 40, (i % 3) / 3, 0.5] })));
    await db.warm();
    waiting = await startServer({ db, port: 0, host: '127.0.0.1', readyRequiresAnn: true });
    plain = await startServer({ db, port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await waiting?.close({ drainMs: 0 });
    await plain?.close({ drainMs: 0 });
    await db?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('says exact while the index is built, and with readyRequiresAnn is not ready until it is in use', async () => {
    expect(db.stats().annBuild.state).toBe('building');
    const notYet = await get(waiting.url!, '/readyz');
    expect(notYet.status).toBe(503);
    expect(notYet.body).toMatchObject({ code: 'TIDAL_SERVE_ANN_BUILDING', vectorSearch: 'exact' });
    expect(await get(plain.url!, '/readyz')).toEqual({ status: 200, body: { ready: true, vectorSearch: 'exact' } });
    const during = await get(waiting.url!, '/stats');
    expect(during.body['db']).toMatchObject({ vectorSearch: 'exact', annBuild: { state: 'building' } });

    internalsOf(db).annBuild.release();
    await db.warm({ waitForAnn: true });
    expect(await get(waiting.url!, '/readyz')).toEqual({ status: 200, body: { ready: true, vectorSearch: 'ann' } });
    expect((await get(plain.url!, '/stats')).body['db']).toMatchObject({ vectorSearch: 'ann', annBuild: { state: 'done' } });
    expect((await db.search({ vector: [1, 0.5, 0, 0.5], limit: 2 })).explain.vectorSearch).toBe('ann');
  });

  it('tidal serve takes --wait-for-ann', () => {
    expect(parseServeArgs(['--demo']).waitForAnn).toBe(false);
    expect(parseServeArgs(['--demo', '--wait-for-ann']).waitForAnn).toBe(true);
  });
});

describe('tidal serve --wait-for-ann', () => {
  it('answers /readyz 503 while vector searches are exact, and 200 only once the index is in use', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tidal-ready-ann-cli-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const schema = { signals: [{ name: 'view', halfLifeMs: 3_600_000 }], embeddingDims: DIMS };
    const schemaFile = join(dir, 'schema.json');
    writeFileSync(schemaFile, JSON.stringify(schema));
    const data = join(dir, 'data');
    // One row more than a warm builds itself (ann.backgroundRows' default), and no saved index: the
    // server's open leaves the build to a thread of its own.
    const seed = await TidalDb.builder().path(data).schema(schema).workers(1).open();
    for (let from = 0; from < 20_001; from += 5_000) {
      const n = Math.min(5_000, 20_001 - from);
      await seed.upsertItems(
        Array.from({ length: n }, (_, i) => ({ id: `v${from + i}`, embedding: [1, ((from + i) % 97) / 97, ((from + i) % 13) / 13, 0.5] })),
      );
    }
    await seed.close();

    const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
    const child = spawn(
      process.execPath,
      [cli, 'serve', '--path', data, '--schema', schemaFile, '--port', '0', '--workers', '1', '--wait-for-ann'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    onTestFinished(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const first = await new Promise<string>((resolve) => createInterface({ input: child.stdout }).once('line', resolve));
    const url = first.slice('tidal serve listening on '.length);

    // Probed as a load balancer would until ready: every answer must agree with what it says (a 200
    // never while searches are exact). Whether a probe lands during the build depends on the machine;
    // what each one says does not.
    const answers: { status: number; body: Record<string, unknown> }[] = [];
    for (;;) {
      const r = await get(url, '/readyz');
      answers.push(r);
      if (r.status === 200) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    for (const r of answers.slice(0, -1))
      expect(r).toMatchObject({ status: 503, body: { code: 'TIDAL_SERVE_ANN_BUILDING', vectorSearch: 'exact' } });
    expect(answers.at(-1)).toEqual({ status: 200, body: { ready: true, vectorSearch: 'ann' } });
    const stats = (await get(url, '/stats')).body['db'] as { vectorSearch: string; annBuild: { builds: number; state: string } };
    expect(stats.vectorSearch).toBe('ann');
    expect(stats.annBuild).toMatchObject({ builds: 1, state: 'done' });
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
