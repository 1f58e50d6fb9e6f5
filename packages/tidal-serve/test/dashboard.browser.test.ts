/**
 * The dashboard in a real headless Chromium (Debian's, driven by playwright-core; never a
 * downloaded browser), served by a real `tidal serve` server (routes, admission chain, recorder)
 * over a real TidalDb that the test loads with HTTP queries, so what the page draws is real work.
 * Every wait is on a condition in the page, with a bound.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { TidalDb } from 'tidal-core';
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
  ): { drawImage(source: ProbeCanvas, x: number, y: number): void; getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray } } | null;
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

// Series strokes in dashboard.js: goodput #16a34a; the first refusal reason #dc2626.
const GOODPUT_GREEN = { rgb: [0x16, 0xa3, 0x4a] as [number, number, number], tolerance: 40 };
const FIRST_REASON_RED = { rgb: [0xdc, 0x26, 0x26] as [number, number, number], tolerance: 40 };

describe.skipIf(SKIP)('the dashboard in headless Chromium', () => {
  let db: TidalDb;
  let dashboard: Dashboard | undefined;
  let server: TidalServer;
  let origin: string;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];
  let driving = false;
  let loops: Promise<void>[] = [];

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(
        `chromium is not installed at ${CHROMIUM}: run \`node scripts/ensure-chromium.mjs\` (as root it installs ` +
          "Debian's chromium with apt), or set TIDAL_SKIP_BROWSER=1 to skip this test",
      );
    }
    db = await TidalDb.builder()
      .ephemeral()
      .workers(1)
      .schema({ signals: [{ name: 'view', halfLifeMs: 3_600_000 }], metadata: { category: 'string' } })
      .open();
    await db.upsertItems(
      Array.from({ length: 200 }, (_, i) => ({ id: `item-${i}`, metadata: { category: CATEGORIES[i % 4]! } })),
    );
    await db.signals(Array.from({ length: 400 }, (_, i) => ({ item: `item-${(i * 7) % 200}`, kind: 'view' })));
    // The chain is the in-flight cap alone, at 3: four query loops get refusals, so the refusals
    // chart has a reason to draw.
    server = await startServer({
      db,
      port: 0,
      admission: { inFlightCap: 3, adaptive: false, tenants: false, permits: {}, period: false },
      dashboard: (deps) => (dashboard = createDashboard({ ...deps, intervalMs: 250, historySeconds: 60 })),
    });
    origin = server.url!;
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
      timeout: 30_000,
    });
    page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
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
  });

  afterAll(async () => {
    driving = false;
    await Promise.all(loops);
    await browser?.close();
    if (dashboard !== undefined) {
      // The browser is gone: its event stream must be too.
      const deadline = Date.now() + 5000;
      while (dashboard.stats().clients > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect(dashboard.stats().clients).toBe(0);
    }
    await server?.close({ drainMs: 1000 });
    await db?.close();
  });

  function drive(concurrency: number): void {
    driving = true;
    loops = Array.from({ length: concurrency }, async (_, worker) => {
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
  }

  const shown = (id: string) => page.locator(`#${id}`).textContent();

  it('loads offline, draws its charts, and its numbers move with the load', async () => {
    const response = await page.goto(`${origin}/dashboard`, { waitUntil: 'load' });
    expect(response?.status()).toBe(200);
    expect(response?.headers()['content-security-policy']).toContain("default-src 'self'");

    // Idle: samples arrive over the stream, and they say nothing is happening.
    await page.waitForFunction(samplesAtLeast, 2, WAIT).catch((err: unknown) => {
      throw new Error(`no samples reached the page (${String(err)}); page problems: ${JSON.stringify(problems)}`);
    });
    expect(await shown('status')).toBe('live');
    expect(await shown('goodput')).toBe('0');
    expect(await shown('inflight')).toBe('0');
    expect(await shown('refused')).toBe('0');
    expect(await page.locator('#refusals-none').isVisible()).toBe(true);
    const idle = await page.evaluate(pageSamples);

    // Under load the numbers rise, sample after sample.
    drive(4);
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
    expect(charts.map((c) => c.id).sort()).toEqual(['chart-inflight', 'chart-latency', 'chart-refusals', 'chart-throughput']);
    for (const c of charts) expect(c.painted, c.id).toBeGreaterThan(100);

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
    driving = false;
    await Promise.all(loops);
    await page.waitForFunction(figure, { id: 'goodput', equals: 0 }, WAIT);
    expect((await page.evaluate(pageSamples)).lastT).toBeGreaterThan(loaded.lastT);

    expect(problems).toEqual([]);
  });
});
