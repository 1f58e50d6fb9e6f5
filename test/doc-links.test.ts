/**
 * The docs point only at files that exist: every relative link in README.md and docs/*.md, and
 * every repository path they name (`bench/…`, `packages/…`, `scripts/…`, `docs/…`, `test/…`, in
 * backticks or not), must be a file or directory of the repository, and a link's `#anchor` into a
 * markdown page one of its headings. A file that went and is worth
 * mentioning is described in words ("a one-off probe, in git history"), not by its path.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

const DOCS = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** Build output and run results: made by a command the doc names, absent from a fresh checkout. */
const GENERATED = /(^|\/)(dist|node_modules)(\/|$)/;

export interface DocRef {
  /** 1-based line in the doc. */
  line: number;
  /** As written. */
  text: string;
  /** Relative to the repository root. */
  path: string;
  /** The `#anchor` of a link, without the `#`. */
  anchor?: string;
}

/** The anchors a markdown page's headings get, as GitHub makes them (a repeated heading gets `-1`, `-2`, ...). */
export function headingAnchors(source: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of source.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const m = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const slug = m[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N}_\- ]/gu, '')
      .replaceAll(' ', '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return anchors;
}

/** The relative links (`[x](path#anchor)`) and repository paths a markdown page names. */
export function docRefs(doc: string, source: string): DocRef[] {
  const refs: DocRef[] = [];
  const dir = dirname(doc);
  let fenced = false;
  source.split('\n').forEach((text, i) => {
    if (/^\s*```/.test(text)) fenced = !fenced;
    // A link in a code span (`[NAME=](PRESET|FLAGS)`) is syntax being described, not a link.
    for (const m of text.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)\)/g)) {
      const [target, anchor] = m[1]!.split('#') as [string, string | undefined];
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // a URL
      const path = target ? relative(ROOT, join(ROOT, dir, decodeURI(target))) : doc;
      refs.push({ line: i + 1, text: m[1]!, path, ...(anchor ? { anchor } : {}) });
    }
    if (fenced) return; // a code block's paths are commands' arguments (`--json out.json`), not references
    for (const m of text.matchAll(/(?<![\w./-])((?:bench|packages|scripts|docs|test)\/[\w.@+-]+(?:\/[\w.@+-]+)*)/g)) {
      const path = m[1]!.replace(/[.]+$/, ''); // a sentence's full stop
      if (path.includes('*') || /\b[A-Z]{3,}\b/.test(path)) continue; // a pattern: packages/*/src, NAME.js
      refs.push({ line: i + 1, text: m[1]!, path });
    }
  });
  return refs.filter((r) => !GENERATED.test(r.path));
}

const anchorCache = new Map<string, Set<string>>();
/** The heading anchors of a markdown file (an anchor into any other file, `#L12`, is not checked). */
function anchorsOf(path: string): Set<string> {
  let anchors = anchorCache.get(path);
  if (!anchors) anchorCache.set(path, (anchors = headingAnchors(readFileSync(join(ROOT, path), 'utf8'))));
  return anchors;
}

describe('docs link only files and headings that exist', () => {
  for (const doc of DOCS) {
    it(doc, () => {
      const missing = docRefs(doc, readFileSync(join(ROOT, doc), 'utf8'))
        .filter(
          (r) => !existsSync(join(ROOT, r.path)) || (r.anchor !== undefined && r.path.endsWith('.md') && !anchorsOf(r.path).has(r.anchor)),
        )
        .map((r) => `${doc}:${r.line}: ${r.text}`);
      expect(missing).toEqual([]);
    });
  }

  it('finds a link, a backticked path and a bare one, and skips URLs, anchors, patterns and code blocks', () => {
    const page = [
      'See [the API](api.md#search), [the site](https://example.com), [above](#top), `[A](B|C)`',
      'and `bench/src/harness`, packages/tidal-load/src/limiter.ts, `packages/*/src`, NAME: bench/probes/NAME.ts.',
      '```sh',
      'node bench/src/not-a-reference.js',
      '```',
    ].join('\n');
    expect(docRefs('docs/x.md', page).map((r) => [r.line, r.path, r.anchor])).toEqual([
      [1, 'docs/api.md', 'search'],
      [1, 'docs/x.md', 'top'],
      [2, 'bench/src/harness', undefined],
      [2, 'packages/tidal-load/src/limiter.ts', undefined],
    ]);
  });

  it("makes a heading's anchor as GitHub does, and skips headings in code blocks", () => {
    const page = ['# Benchmarks', '## The corpus and the hand-written SQL', '## `search(request)`: 1× or 3×?', '## write', '## write'];
    const anchors = [...headingAnchors([...page, '```sh', '# not a heading', '```'].join('\n'))];
    expect(anchors).toEqual(['benchmarks', 'the-corpus-and-the-hand-written-sql', 'searchrequest-1-or-3', 'write', 'write-1']);
  });
});
