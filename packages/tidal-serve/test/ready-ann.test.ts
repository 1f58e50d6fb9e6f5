/**
 * `/readyz` and `/stats` say whether vector searches are exact (the ANN index being built on a thread
 * of its own), and with `readyRequiresAnn` (`tidal serve --wait-for-ann`) `/readyz` reports ready only
 * once the index is in use. The build is held at its start (a test hook), so what is seen during it
 * does not depend on timing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
