/**
 * `npm run bench -- --suite NAME [flags]`: runs one named suite (`--list` lists them; without
 * `--suite` the query suite runs). The suite runs in a process of its own and parses the rest of
 * the flags itself (`--suite NAME --help` lists them); the exit code is the suite's.
 */

import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ROOT } from './harness/machine.js';
import { SUITES, findSuite } from './harness/suites.js';

const here = path.dirname(fileURLToPath(import.meta.url));

function main(argv: readonly string[]): number {
  let name = 'query';
  const rest: string[] = [];
  let list = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--list') list = true;
    else if (a === '--suite') {
      const v = argv[++i];
      if (v === undefined || v.startsWith('--')) return usage('--suite needs a name');
      name = v;
    } else if (a.startsWith('--suite=')) name = a.slice('--suite='.length);
    else rest.push(a);
  }
  if (list) {
    const width = Math.max(...SUITES.map((s) => s.name.length));
    for (const s of SUITES) process.stdout.write(`${s.name.padEnd(width)}  ${s.description}\n`);
    return 0;
  }
  const suite = findSuite(name);
  if (suite === undefined) return usage(`--suite must be one of ${SUITES.map((s) => s.name).join(', ')}, got ${JSON.stringify(name)}`);
  for (const script of suite.before ?? []) {
    const r = spawnSync(process.execPath, [path.join(ROOT, script)], { stdio: 'inherit' });
    if (r.status !== 0) return r.status ?? 1;
  }
  const args = [...(suite.gc ? ['--expose-gc'] : []), path.join(here, suite.script), ...rest];
  const r = spawnSync(process.execPath, args, { stdio: 'inherit' });
  if (r.signal) process.kill(process.pid, r.signal);
  return r.status ?? 1;
}

function usage(message: string): number {
  process.stderr.write(`bench: ${message}\nusage: npm run bench -- [--suite NAME] [suite flags]   (--list: the suites)\n`);
  return 2;
}

process.exitCode = main(process.argv.slice(2));
