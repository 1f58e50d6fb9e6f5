/**
 * docs/api.md cannot drift from the code: its examples are type-checked against the published
 * declarations of tidal-core and run against a real database, and its headings are tied to the
 * public members of TidalDb and TidalDbBuilder both ways.
 *
 * The ```ts block right after a `<!-- setup -->` line opens the database (it must define `NOW`,
 * `HOUR`, `schema` and `db`); each block right after a `<!-- run -->` line is then run, in page
 * order, with those and `assert` (node:assert/strict) in scope. Every block imports what it uses of
 * tidal-core itself, as an application would: it is type-checked with nothing else of tidal-core in
 * scope, so a missing import fails. A block may import other modules with `await import(...)`,
 * which the transpiled code turns into `require`.
 */
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as tidal from 'tidal-core';

const DOC = fileURLToPath(new URL('../docs/api.md', import.meta.url));
const HERE = dirname(fileURLToPath(import.meta.url));
const doc = readFileSync(DOC, 'utf8');
const lines = doc.split('\n');

interface Block {
  kind: 'setup' | 'run';
  /** 1-based line of the block's first code line in docs/api.md. */
  line: number;
  code: string;
  /** The heading the block is under, for the test name. */
  heading: string;
}

function extractBlocks(): Block[] {
  const blocks: Block[] = [];
  let heading = '';
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i]!;
    if (/^#{1,4} /.test(l)) heading = l.replace(/^#+ /, '').replaceAll('`', '');
    const marker = /^<!-- (setup|run) -->$/.exec(l);
    if (!marker) continue;
    if (lines[i + 1] !== '```ts')
      throw new Error(`docs/api.md:${i + 1}: a <!-- ${marker[1]} --> marker must be right above a \`\`\`ts block`);
    const start = i + 2;
    let end = start;
    while (end < lines.length && lines[end] !== '```') end++;
    blocks.push({ kind: marker[1] as Block['kind'], line: start + 1, code: lines.slice(start, end).join('\n'), heading });
    i = end;
  }
  return blocks;
}

const blocks = extractBlocks();
const setup = blocks.filter((b) => b.kind === 'setup');
const runs = blocks.filter((b) => b.kind === 'run');
/** What the setup block defines for the others. */
const SETUP_NAMES = ['NOW', 'HOUR', 'schema', 'db'] as const;

// ---- type-checking --------------------------------------------------------------------------

interface VirtualFile {
  path: string;
  text: string;
  /** Lines before the block's code, to map a diagnostic back to docs/api.md. */
  prelude: number;
  block: Block;
}

function virtualFiles(): VirtualFile[] {
  const importAssert = `import assert from 'node:assert/strict';\n`;
  const files: VirtualFile[] = [];
  const setupPath = join(HERE, '__api_docs__', 'setup.ts');
  files.push({
    path: setupPath,
    text: `${importAssert}${setup[0]!.code}\nexport { ${SETUP_NAMES.join(', ')} };\n`,
    prelude: 1,
    block: setup[0]!,
  });
  runs.forEach((b, i) => {
    const prelude = `${importAssert}import { ${SETUP_NAMES.join(', ')} } from './setup.js';\nexport {};\n`;
    files.push({ path: join(HERE, '__api_docs__', `block-${i}.ts`), text: prelude + b.code + '\n', prelude: 3, block: b });
  });
  return files;
}

function typeErrors(): string[] {
  const files = virtualFiles();
  const byPath = new Map(files.map((f) => [f.path, f]));
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(HERE, '..', 'tsconfig.test.json'),
    {},
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
  );
  const options: ts.CompilerOptions = { ...parsed!.options, noEmit: true, allowJs: false };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, language, ...rest) => {
    const f = byPath.get(name);
    return f ? ts.createSourceFile(name, f.text, language) : getSourceFile(name, language, ...rest);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => byPath.has(name) || fileExists(name);
  const directoryExists = host.directoryExists?.bind(host);
  const virtualDir = join(HERE, '__api_docs__');
  host.directoryExists = (name) => name === virtualDir || (directoryExists?.(name) ?? true);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => byPath.get(name)?.text ?? readFile(name);
  const program = ts.createProgram(
    files.map((f) => f.path),
    options,
    host,
  );
  const errors: string[] = [];
  for (const f of files) {
    const sf = program.getSourceFile(f.path)!;
    for (const d of [...program.getSyntacticDiagnostics(sf), ...program.getSemanticDiagnostics(sf)]) {
      const { line } = sf.getLineAndCharacterOfPosition(d.start ?? 0);
      const where = line < f.prelude ? `block at docs/api.md:${f.block.line}` : `docs/api.md:${f.block.line + line - f.prelude}`;
      errors.push(`${where}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
    }
  }
  return errors;
}

// ---- running --------------------------------------------------------------------------------

type AsyncFn = (...args: unknown[]) => Promise<unknown>;
const AsyncFunction = (async () => {}).constructor as new (...args: string[]) => AsyncFn;
const requireFromTests = createRequire(import.meta.url);
const valueNames = Object.keys(tidal);

/** A block's own import of tidal-core, whose names the function below takes as parameters instead. */
const TIDAL_IMPORT = /^import (type )?\{[^}]*\} from 'tidal-core';$/gm;

/** The block as the body of an async function, TypeScript removed, `import()` turned into `require`. */
function compile(block: Block, trailer = ''): AsyncFn {
  const js = ts.transpileModule(block.code.replace(TIDAL_IMPORT, ''), {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.CommonJS, esModuleInterop: true },
    fileName: `api-md-line-${block.line}.ts`,
  }).outputText;
  return new AsyncFunction(
    'require',
    'exports',
    ...valueNames,
    'assert',
    ...(block.kind === 'run' ? SETUP_NAMES : []),
    `${js}\n${trailer}`,
  );
}

function args(): unknown[] {
  return [requireFromTests, {}, ...valueNames.map((n) => (tidal as Record<string, unknown>)[n]), assert];
}

// ---- headings -------------------------------------------------------------------------------

/** GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped, spaces to `-`. */
function slug(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

const headings = lines.filter((l) => /^#{1,6} /.test(l)).map((l) => l.replace(/^#+ /, ''));

function publicMembers(proto: object): string[] {
  return Reflect.ownKeys(proto)
    .filter((k) => k !== 'constructor')
    .map((k) => (k === Symbol.asyncDispose ? '[Symbol.asyncDispose]' : String(k)));
}

/** The member each `### \`db.x…\`` (or `builder.x`, `TidalDb.x`) heading documents. */
function documented(prefix: string): string[] {
  const re = new RegExp(`^### \`${prefix.replace('.', '\\.')}(\\[Symbol\\.\\w+\\]|\\.\\w+)`);
  return headings.flatMap((h) => {
    const m = re.exec(`### ${h}`);
    return m ? [m[1]!.startsWith('.') ? m[1]!.slice(1) : m[1]!] : [];
  });
}

describe('docs/api.md', () => {
  it('has one setup block and examples to run', () => {
    expect(setup).toHaveLength(1);
    expect(runs.length).toBeGreaterThan(30);
  });

  it('documents every public method and getter of TidalDb and TidalDbBuilder, and nothing else', () => {
    expect(documented('db').sort()).toEqual(publicMembers(tidal.TidalDb.prototype).sort());
    expect(documented('builder').sort()).toEqual(publicMembers(tidal.TidalDbBuilder.prototype).sort());
    const statics = Object.getOwnPropertyNames(tidal.TidalDb).filter(
      (k) => typeof (tidal.TidalDb as unknown as Record<string, unknown>)[k] === 'function',
    );
    expect(documented('TidalDb').sort()).toEqual(statics.sort());
  });

  it('links only to headings that exist', () => {
    const anchors = new Set(headings.map(slug));
    const links = [...doc.matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1]!);
    expect(links.length).toBeGreaterThan(40);
    expect(links.filter((l) => !anchors.has(l))).toEqual([]);
  });

  it('every example type-checks against the published declarations', () => {
    expect(typeErrors()).toEqual([]);
  });

  describe('every example runs', () => {
    const scope: unknown[] = [];
    beforeAll(async () => {
      const opened = (await compile(setup[0]!, `return [${SETUP_NAMES.join(', ')}];`)(...args())) as unknown[];
      scope.push(...opened);
    });
    afterAll(async () => {
      await (scope[SETUP_NAMES.indexOf('db')] as tidal.TidalDb | undefined)?.close();
    });

    for (const block of runs) {
      it(`docs/api.md:${block.line} (${block.heading})`, async () => {
        await compile(block)(...args(), ...scope);
      });
    }
  });
});
