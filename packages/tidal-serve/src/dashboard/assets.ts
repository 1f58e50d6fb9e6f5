import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

/** One file the dashboard serves, read once at startup. */
export interface Asset {
  readonly body: Buffer;
  readonly contentType: string;
  /** A strong validator from the content, so a reload costs a 304. */
  readonly etag: string;
}

/** Where each asset is served, under `/dashboard`. */
export const PAGE_PATH = '/dashboard';
export const ASSETS_PREFIX = '/dashboard/assets/';
export const EVENTS_PATH = '/dashboard/events';

// `src/dashboard/` and `dist/dashboard/` both sit two levels below the package root.
const OWN_ASSETS = new URL('../../assets/', import.meta.url);

const TYPES = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
  svg: 'image/svg+xml',
} as const;

function asset(path: string, type: keyof typeof TYPES): Asset {
  let body: Buffer;
  try {
    body = readFileSync(path);
  } catch (err) {
    throw new Error(`the dashboard cannot read ${path}: is the package installed with its assets?`, { cause: err });
  }
  const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
  return { body, contentType: TYPES[type], etag };
}

let cached: ReadonlyMap<string, Asset> | undefined;

/**
 * The page, its script and style, and the chart library, keyed by the path they are served at.
 * The chart library is resolved from node_modules like any dependency, so the page needs nothing
 * from the network beyond this server. Read once per process: the files do not change under a
 * running server.
 */
export function loadAssets(): ReadonlyMap<string, Asset> {
  if (cached !== undefined) return cached;
  const require = createRequire(import.meta.url);
  const own = (name: string) => fileURLToPath(new URL(name, OWN_ASSETS));
  cached = new Map<string, Asset>([
    [PAGE_PATH, asset(own('dashboard.html'), 'html')],
    [`${ASSETS_PREFIX}dashboard.js`, asset(own('dashboard.js'), 'js')],
    [`${ASSETS_PREFIX}dashboard.css`, asset(own('dashboard.css'), 'css')],
    [`${ASSETS_PREFIX}favicon.svg`, asset(own('favicon.svg'), 'svg')],
    [`${ASSETS_PREFIX}uPlot.iife.min.js`, asset(require.resolve('uplot/dist/uPlot.iife.min.js'), 'js')],
    [`${ASSETS_PREFIX}uPlot.min.css`, asset(require.resolve('uplot/dist/uPlot.min.css'), 'css')],
  ]);
  return cached;
}
