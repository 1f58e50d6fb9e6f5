/**
 * The dashboard in a real headless Chromium (Debian's, driven by playwright-core; never a
 * downloaded browser), served by a real `tidal serve` server (routes, admission chain, recorder)
 * over a real TidalDb that the test loads with HTTP queries, so what the page draws is real work:
 * one with tiny load thresholds, so a few concurrent queries drive it to NoDiversity and the
 * level-mix chart must show the step down and the return. What a chart draws is read back from the
 * chart (`window.__tidalDashboard`), never from pixels or timing, except where pixels are the
 * point (a series is painted at all). Every wait is on a condition in the page, with a bound.
 */
import { existsSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { TidalDb, type DegradationLevelName } from 'tidal-core';
import type { ServeSample } from '../src/admission/types.js';
import { createDashboard, type Dashboard } from '../src/dashboard/dashboard.js';
import { startServer, type TidalServer } from '../src/server.js';

const CHROMIUM = process.env.TIDAL_CHROMIUM ?? '/usr/bin/chromium';
const SKIP = process.env.TIDAL_SKIP_BROWSER === '1';
const WAIT = { timeout: 20_000 } as const;

const CATEGORIES = ['jazz', 'rock', 'pop', 'classical'];

// The in-page probes below run in the browser (playwright serializes them); the tests are
// type-checked without the DOM library, so they name the little of the DOM they touch here.
interface ProbeCanvas {
  readonly width: number;
  readonly height: number;
  closest(selector: string): { id: string } | null;
}
interface ProbeCopy {
  getContext(
    kind: '2d',
    options: { willReadFrequently: boolean },
  ): {
    drawImage(source: ProbeCanvas, x: number, y: number): void;
    getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray };
  } | null;
}
interface ProbeDocument {
  readonly body: { dataset: Record<string, string | undefined> };
  getElementById(id: string): { textContent: string | null } | null;
  querySelectorAll(selector: string): Iterable<ProbeCanvas>;
}

// Each probe is self-contained: playwright sends its source to the page, not its closure.

/** Whether the figure `id` shows a number above `above`, or equal to `equals`. */
function figure(arg: { id: string; above?: number; equals?: number }): boolean {
  const doc = (globalThis as unknown as { document: ProbeDocument }).document;
  const v = Number(doc.getElementById(arg.id)?.textContent);
  return arg.above !== undefined ? v > arg.above : v === arg.equals;
}

/** How many samples the page holds, and the time of the last one. */
function pageSamples(): { samples: number; lastT: number } {
  const doc = (globalThis as unknown as { document: ProbeDocument }).document;
  return { samples: Number(doc.body.dataset.samples ?? 0), lastT: Number(doc.body.dataset.lastT ?? 0) };
}

function samplesAtLeast(n: number): boolean {
  const doc = (globalThis as unknown as { document: ProbeDocument }).document;
  return Number(doc.body.dataset.samples ?? 0) >= n;
}

/**
 * Per chart canvas under `main`: pixels painted at all, and pixels within `tolerance` of `rgb`
 * (a series' stroke colour, so they are that series' line and not the axes or grid).
 */
function paintedPixels(arg: { rgb: [number, number, number]; tolerance: number }): { id: string; painted: number; matching: number }[] {
  const page = globalThis as unknown as { document: ProbeDocument; OffscreenCanvas: new (w: number, h: number) => ProbeCopy };
  const out: { id: string; painted: number; matching: number }[] = [];
  for (const canvas of page.document.querySelectorAll('main canvas')) {
    if (canvas.width === 0 || canvas.height === 0) continue;
    // Read a copy made for reading, so the probe leaves the chart's own canvas (and the console) alone.
    const ctx = new page.OffscreenCanvas(canvas.width, canvas.height).getContext('2d', { willReadFrequently: true });
    if (ctx === null) continue;
    ctx.drawImage(canvas, 0, 0);
    const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let painted = 0;
    let matching = 0;
    for (let i = 0; i < px.length; i += 4) {
      if (px[i + 3]! === 0) continue;
      painted++;
      const near =
        Math.abs(px[i]! - arg.rgb[0]) < arg.tolerance &&
        Math.abs(px[i + 1]! - arg.rgb[1]) < arg.tolerance &&
        Math.abs(px[i + 2]! - arg.rgb[2]) < arg.tolerance;
      if (near && px[i + 3]! > 200) matching++;
    }
    out.push({ id: canvas.closest('.chart > div')?.id ?? '?', painted, matching });
  }
  return out;
}

type LevelMix = { t: number[] } & Record<DegradationLevelName, number[]>;
interface ProbeDashboard {
  levelMix(): LevelMix;
  chart(name: string): ChartData | null;
}
/** A chart's series labels and its data: the times, then one array per series. */
interface ChartData {
  labels: string[];
  data: (number | null)[][];
}

/** The level-mix chart's data, as the chart holds it (its bands, unstacked). */
function levelMix(): LevelMix {
  return (globalThis as unknown as { __tidalDashboard: ProbeDashboard }).__tidalDashboard.levelMix();
}

/** Whether some point of the level-mix chart has answers at `level`. */
function mixHas(level: DegradationLevelName): boolean {
  const mix = (globalThis as unknown as { __tidalDashboard: ProbeDashboard }).__tidalDashboard.levelMix();
  return mix[level].some((v) => v > 0);
}

/** Whether the chart's last point has answers, all of them at Full. */
function mixEndsAllFull(): boolean {
  const mix = (globalThis as unknown as { __tidalDashboard: ProbeDashboard }).__tidalDashboard.levelMix();
  const last = mix.t.length - 1;
  return (
    last >= 0 && mix.Full[last]! > 0 && mix.ReducedCandidates[last] === 0 && mix.CoarseAggregates[last] === 0 && mix.NoDiversity[last] === 0
  );
}

function chartData(name: string): ChartData | null {
  return (globalThis as unknown as { __tidalDashboard: ProbeDashboard }).__tidalDashboard.chart(name);
}

// Series strokes in dashboard.js: goodput #16a34a; the first refusal reason #dc2626.
const GOODPUT_GREEN = { rgb: [0x16, 0xa3, 0x4a] as [number, number, number], tolerance: 40 };
const FIRST_REASON_RED = { rgb: [0xdc, 0x26, 0x26] as [number, number, number], tolerance: 40 };

/** Issues `/retrieve` queries from `concurrency` loops until `stop()`; refusals back off a little. */
function drive(origin: string, concurrency: number): { stop(): Promise<void> } {
  let driving = true;
  const loops = Array.from({ length: concurrency }, async (_, worker) => {
    for (let i = 0; driving; i++) {
      const res = await fetch(`${origin}/retrieve`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ profile: 'popular', filter: { category: CATEGORIES[(worker + i) % 4]! }, limit: 5 + (i % 10) }),
      });
      await res.arrayBuffer();
      if (res.status !== 200) {
        // Refused: back off a little, as a client honouring Retry-After would (this paces the
        // load; no assertion depends on it).
        expect(res.status).toBe(503);
        await new Promise((r) => setTimeout(r, 10));
      }
    }
  });
  return {
    async stop() {
      driving = false;
      await Promise.all(loops);
    },
  };
}

async function seededDb(
  configure: (b: ReturnType<typeof TidalDb.builder>) => ReturnType<typeof TidalDb.builder> = (b) => b,
): Promise<TidalDb> {
  const db = await configure(
    TidalDb.builder()
      .ephemeral()
      .workers(1)
      .schema({ signals: [{ name: 'view', halfLifeMs: 3_600_000 }], metadata: { category: 'string' } }),
  ).open();
  await db.upsertItems(Array.from({ length: 200 }, (_, i) => ({ id: `item-${i}`, metadata: { category: CATEGORIES[i % 4]! } })));
  await db.signals(Array.from({ length: 400 }, (_, i) => ({ item: `item-${(i * 7) % 200}`, kind: 'view' })));
  return db;
}

describe.skipIf(SKIP)('the dashboard in headless Chromium', () => {
  let browser: Browser;
  const problems: string[] = [];
  const dbs: TidalDb[] = [];
  const servers: TidalServer[] = [];
  const dashboards: Dashboard[] = [];
  const loads: { stop(): Promise<void> }[] = [];

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(
        `chromium is not installed at ${CHROMIUM}: run \`node scripts/ensure-chromium.mjs\` (as root it installs ` +
          "Debian's chromium with apt), or set TIDAL_SKIP_BROWSER=1 to skip this test",
      );
    }
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
      timeout: 30_000,
    });
  });

  afterAll(async () => {
    await Promise.all(loads.map((l) => l.stop()));
    await browser?.close();
    // The browser is gone: its event streams must be too.
    const deadline = Date.now() + 5000;
    while (dashboards.some((d) => d.stats().clients > 0) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    for (const d of dashboards) expect(d.stats().clients).toBe(0);
    for (const server of servers) await server.close({ drainMs: 1000 });
    for (const db of dbs) await db.close();
  });

  /** A real server over `db`, its dashboard sampling every 250 ms. */
  async function serve(db: TidalDb, admission: Parameters<typeof startServer>[0]['admission']): Promise<string> {
    dbs.push(db);
    const server = await startServer({
      db,
      port: 0,
      admission,
      dashboard: (deps) => {
        const d = createDashboard({ ...deps, intervalMs: 250, historySeconds: 60 });
        dashboards.push(d);
        return d;
      },
    });
    servers.push(server);
    return server.url!;
  }

  /** A page that reports every console complaint, failed request and request off `origin`. */
  async function openPage(origin: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1200, height: 1000 } });
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText ?? ''}`));
    page.on('response', (r) => {
      if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`);
    });
    page.on('request', (r) => {
      if (!r.url().startsWith(`${origin}/`)) problems.push(`request off the server: ${r.url()}`);
    });
    const response = await page.goto(`${origin}/dashboard`, { waitUntil: 'load' });
    expect(response?.status()).toBe(200);
    expect(response?.headers()['content-security-policy']).toContain("default-src 'self'");
    await page.waitForFunction(samplesAtLeast, 2, WAIT).catch((err: unknown) => {
      throw new Error(`no samples reached the page (${String(err)}); page problems: ${JSON.stringify(problems)}`);
    });
    return page;
  }

  it('loads offline, draws its charts, and its numbers move with the load', async () => {
    // The chain is the in-flight cap alone, at 3: four query loops get refusals, so the refusals
    // chart has a reason to draw.
    const origin = await serve(await seededDb(), { inFlightCap: 3, adaptive: false, tenants: false, permits: {}, period: false });
    const page = await openPage(origin);
    const shown = (id: string) => page.locator(`#${id}`).textContent();

    // Idle: samples arrive over the stream, and they say nothing is happening.
    expect(await shown('status')).toBe('live');
    expect(await shown('goodput')).toBe('0');
    expect(await shown('inflight')).toBe('0');
    expect(await shown('refused')).toBe('0');
    expect(await page.locator('#refusals-none').isVisible()).toBe(true);
    const idle = await page.evaluate(pageSamples);

    // Under load the numbers rise, sample after sample.
    const load = drive(origin, 4);
    loads.push(load);
    await page.waitForFunction(figure, { id: 'goodput', above: 0 }, WAIT);
    await page.waitForFunction(figure, { id: 'inflight', above: 0 }, WAIT);
    const loaded = await page.evaluate(pageSamples);
    expect(loaded.lastT).toBeGreaterThan(idle.lastT);
    expect(await shown('level')).toBe('Full');
    expect(Number(await shown('p99'))).toBeGreaterThan(0);

    // The charts draw: the goodput line (its own green) appears on the throughput chart, which
    // happens only once the stream's data reached uPlot; every chart's canvas has painted pixels.
    await expect
      .poll(async () => (await page.evaluate(paintedPixels, GOODPUT_GREEN)).find((c) => c.id === 'chart-throughput')?.matching ?? 0, {
        timeout: WAIT.timeout,
        interval: 50,
      })
      .toBeGreaterThan(50);
    const charts = await page.evaluate(paintedPixels, GOODPUT_GREEN);
    // One server acceptor: no per-acceptor chart.
    expect(charts.map((c) => c.id).sort()).toEqual([
      'chart-inflight',
      'chart-latency',
      'chart-levels',
      'chart-refusals',
      'chart-throughput',
    ]);
    for (const c of charts) expect(c.painted, c.id).toBeGreaterThan(100);
    expect(await page.evaluate(chartData, 'acceptors')).toBeNull();
    expect(await page.locator('#acceptors').isHidden()).toBe(true);

    // Four loops against a cap of three: refusals by reason get their own series, drawn.
    await page.waitForFunction(figure, { id: 'refused', above: 0 }, WAIT);
    await expect
      .poll(async () => (await page.evaluate(paintedPixels, FIRST_REASON_RED)).find((c) => c.id === 'chart-refusals')?.matching ?? 0, {
        timeout: WAIT.timeout,
        interval: 50,
      })
      .toBeGreaterThan(50);
    expect(await page.locator('#chart-refusals .u-legend').textContent()).toContain('inflight');
    expect(await page.locator('#refusals-none').isHidden()).toBe(true);

    // Load stops: within a second of samples the goodput falls back to zero.
    await load.stop();
    await page.waitForFunction(figure, { id: 'goodput', equals: 0 }, WAIT);
    expect((await page.evaluate(pageSamples)).lastT).toBeGreaterThan(loaded.lastT);

    await page.close();
    expect(problems).toEqual([]);
  });

  it('draws the level mix: answers step down to NoDiversity under load, and come back to Full', async () => {
    // Tiny thresholds: two queries in flight already degrade, four reach NoDiversity. No HTTP
    // chain, and room in the database's own admission, so eight loops put eight in flight.
    const db = await seededDb((b) => b.loadThresholds({ reducedCandidates: 2, coarseAggregates: 3, noDiversity: 4 }).admissionLimit(64));
    const origin = await serve(db, false);
    const page = await openPage(origin);
    const idle = await page.evaluate(levelMix);
    expect(idle.t.length).toBeGreaterThanOrEqual(2);
    for (const name of ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const)
      expect(
        idle[name].every((v) => v === 0),
        name,
      ).toBe(true);
    // The legend names the four levels, top of the stack first.
    const legend = (await page.locator('#chart-levels .u-legend').textContent()) ?? '';
    const order = ['NoDiversity', 'CoarseAggregates', 'ReducedCandidates', 'Full'].map((name) => legend.indexOf(name));
    expect(order.every((at) => at >= 0)).toBe(true);
    expect([...order].sort((a, b) => a - b)).toEqual(order);

    const load = drive(origin, 8);
    loads.push(load);
    await page.waitForFunction(mixHas, 'NoDiversity' as DegradationLevelName, WAIT);
    await load.stop();
    const loaded = await page.evaluate(levelMix);
    expect(loaded.NoDiversity.some((v) => v > 0)).toBe(true);

    // One query at a time: each runs alone, at Full, until a whole second of answers is all Full.
    const calm = drive(origin, 1);
    loads.push(calm);
    await page.waitForFunction(mixEndsAllFull, undefined, WAIT);
    await calm.stop();
    const after = await page.evaluate(levelMix);
    const last = after.t.length - 1;
    // The stack adds up to the goodput, point by point: on this server only queries succeed.
    const throughput = (await page.evaluate(chartData, 'throughput'))!;
    expect(throughput.labels).toEqual(['offered', 'goodput']);
    const goodput = throughput.data[2]!;
    expect(throughput.data[0]).toEqual(after.t);
    expect(
      after.t.map((_, i) => after.Full[i]! + after.ReducedCandidates[i]! + after.CoarseAggregates[i]! + after.NoDiversity[i]!),
    ).toEqual(goodput);
    for (const name of ['Full', 'ReducedCandidates', 'CoarseAggregates', 'NoDiversity'] as const)
      expect(
        after[name].every((v) => v >= 0),
        name,
      ).toBe(true);
    expect(
      after.Full[last]! / (after.Full[last]! + after.ReducedCandidates[last]! + after.CoarseAggregates[last]! + after.NoDiversity[last]!),
    ).toBe(1);
    // The step down is still in the history the page holds, before the return.
    const downAt = after.NoDiversity.findIndex((v) => v > 0);
    expect(downAt).toBeGreaterThanOrEqual(0);
    expect(downAt).toBeLessThan(last);

    await page.close();
    expect(problems).toEqual([]);
  });

  it('draws one series per acceptor when a sample names several, and nothing for one', async () => {
    // A dashboard alone, fed samples as a server would give them with no acceptor list, with one
    // acceptor, then with three acceptor threads.
    let phase: 'none' | 'one' | 'three' = 'none';
    let taken = 0;
    const acceptors = (): ServeSample['acceptors'] =>
      phase === 'none'
        ? undefined
        : phase === 'one'
          ? [{ id: 0, offeredPerSec: 9, goodputPerSec: 9, refusedPerSec: 0, inFlight: 1 }]
          : [0, 1, 2].map((id) => ({ id, offeredPerSec: 10 * (id + 1), goodputPerSec: 9 * (id + 1), refusedPerSec: id, inFlight: id }));
    const dashboard = createDashboard({
      intervalMs: 100,
      sample: () => {
        taken++;
        const list = acceptors();
        return {
          t: Date.now(),
          inFlight: 0,
          level: 'Full',
          offeredPerSec: 60,
          goodputPerSec: 54,
          refusedPerSec: {},
          levelsPerSec: { Full: 54, ReducedCandidates: 0, CoarseAggregates: 0, NoDiversity: 0 },
          p50Ms: 1,
          p99Ms: 2,
          windowSeconds: 60,
          ...(list === undefined ? {} : { acceptors: list }),
        };
      },
    });
    dashboards.push(dashboard);
    const http: Server = createHttpServer((req, res) => {
      if (!dashboard.handle(req, res)) {
        res.writeHead(404);
        res.end();
      }
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    try {
      const origin = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
      const page = await openPage(origin);
      phase = 'one';
      await page.waitForFunction(samplesAtLeast, taken + 2, WAIT);
      expect(await page.evaluate(chartData, 'acceptors')).toBeNull();
      expect(await page.locator('#acceptors').isHidden()).toBe(true);

      phase = 'three';
      await page.waitForFunction(samplesAtLeast, taken + 2, WAIT);
      await expect.poll(() => page.evaluate(chartData, 'acceptors'), { timeout: WAIT.timeout, interval: 50 }).not.toBeNull();
      const series = (await page.evaluate(chartData, 'acceptors'))!;
      expect(series.labels).toEqual(['acceptor 0', 'acceptor 1', 'acceptor 2']);
      // Each acceptor's offered rate; a gap where a sample did not name it.
      const [, a0, a1, a2] = series.data as [unknown, (number | null)[], (number | null)[], (number | null)[]];
      expect(a0[0]).toBeNull();
      expect(new Set(a0.filter((v) => v !== null))).toEqual(new Set([9, 10]));
      expect(a1.indexOf(20)).toBeGreaterThan(a0.indexOf(9));
      expect(new Set(a1.filter((v) => v !== null))).toEqual(new Set([20]));
      expect(new Set(a2.filter((v) => v !== null))).toEqual(new Set([30]));
      expect(a1.lastIndexOf(null)).toBeLessThan(a1.indexOf(20));
      expect(await page.locator('#acceptors').isVisible()).toBe(true);
      expect(await page.locator('#chart-acceptors .u-legend').textContent()).toContain('acceptor 2');
      await page.close();
    } finally {
      dashboard.close();
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
    }
    expect(problems).toEqual([]);
  });
});
