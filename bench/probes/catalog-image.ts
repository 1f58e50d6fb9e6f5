/**
 * What a catalog image costs (packages/tidal-query/src/shared/catalog-image.ts): a worker-style
 * catalog read from the items table of a database directory (`--dir`, loaded by
 * `npm run bench:open -- --items N --dir DIR --load-only`), then `--rounds` times: the image
 * written from it (what a thread pays when it posts one), read into a new catalog (what a thread
 * that takes one at its first sync pays) and rebased onto (what a thread that moves to a newer one
 * pays); the median of each, the image's size and the table read's time. Then the text top-k of
 * `--queries` queries (1 to 3 of the 200 commonest terms) over the catalog's own index against the
 * same index read from an image, the two taking turns `--rounds` × 3 times: whether reading postings
 * from shared memory costs anything.
 */
import path from 'node:path';
import Database from 'better-sqlite3';
import { Catalog, readCatalogImage, searchTopK, writeCatalogImage } from 'tidal-query';
import { tidalSchema } from '../src/corpus.js';
import { Report, fmtInt, fmtMs, nowMs, parseOptions } from '../src/harness/index.js';

const opts = parseOptions('catalog-image', {
  dir: { type: 'string', default: '', description: "a database directory of the bench corpus (bench:open's --dir)" },
  rounds: { type: 'int', default: 5, min: 1, description: 'images written, read and rebased onto' },
  queries: { type: 'int', default: 400, min: 1, description: 'text queries per timed pass' },
});

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function main(): void {
  if (!opts.dir) throw new Error('--dir is required (a directory loaded by bench:open --load-only)');
  const report = new Report('catalog-image', opts);
  const schema = { kinds: [], metadata: tidalSchema(128).metadata, embeddingDims: 128 };
  const db = new Database(path.join(opts.dir, 'tidal.db'), { readonly: true });
  const catalog = new Catalog(db, schema);
  let t = nowMs();
  catalog.refresh(undefined, Number.POSITIVE_INFINITY);
  const readMs = nowMs() - t;
  const write: number[] = [];
  const take: number[] = [];
  const rebase: number[] = [];
  let bytes = 0;
  for (let r = 0; r < opts.rounds; r++) {
    t = nowMs();
    const image = writeCatalogImage(schema, catalog);
    write.push(nowMs() - t);
    bytes = image.byteLength;
    t = nowMs();
    new Catalog(db, schema).importState(readCatalogImage(image));
    take.push(nowMs() - t);
    t = nowMs();
    catalog.rebase(readCatalogImage(image));
    rebase.push(nowMs() - t);
  }
  report.line(
    `${fmtInt(catalog.presentCount)} items read from the table in ${fmtMs(readMs)} ms; image ${(bytes / 2 ** 20).toFixed(1)} MiB`,
  );
  report.line(
    `median of ${opts.rounds}: write ${fmtMs(median(write))} ms, read into a new catalog ${fmtMs(median(take))} ms, rebase ${fmtMs(median(rebase))} ms`,
  );
  report.set('image', { items: catalog.presentCount, readMs, bytes, writeMs: write, takeMs: take, rebaseMs: rebase });

  // The text top-k: a catalog that read the rows against one that reads them from an image.
  const own = new Catalog(db, schema);
  own.refresh(undefined, Number.POSITIVE_INFINITY);
  own.text.summarizeAll();
  const shared = new Catalog(db, schema);
  shared.importState(readCatalogImage(writeCatalogImage(schema, own)));
  shared.text.summarizeAll();
  const terms = own.text.commonestTerms(200);
  let seed = 7;
  const rand = (): number => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  const queries = Array.from({ length: opts.queries }, () =>
    Array.from({ length: 1 + Math.floor(rand() * 3) }, () => terms[Math.floor(rand() * terms.length)]!),
  );
  const pass = (c: Catalog): { ms: number; hits: number } => {
    const t0 = nowMs();
    let hits = 0;
    for (const q of queries) hits += searchTopK(c.text, q, 20).ordinals.length;
    return { ms: nowMs() - t0, hits };
  };
  for (let w = 0; w < 3; w++) (pass(own), pass(shared));
  const ownMs: number[] = [];
  const sharedMs: number[] = [];
  for (let r = 0; r < opts.rounds * 3; r++) {
    const a = pass(own);
    const b = pass(shared);
    if (a.hits !== b.hits) throw new Error('the two indexes answered differently');
    ownMs.push(a.ms);
    sharedMs.push(b.ms);
  }
  report.line(
    `text top-k, ${fmtInt(opts.queries)} queries a pass, median of ${opts.rounds * 3}: own arrays ${fmtMs(median(ownMs))} ms, ` +
      `the image's ${fmtMs(median(sharedMs))} ms (${(median(sharedMs) / median(ownMs)).toFixed(2)}×)`,
  );
  report.set('text', { ownMs, sharedMs });
  report.finish();
  db.close();
}

main();
