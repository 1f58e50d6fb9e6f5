/**
 * `--baseline DIR`: another checkout of the repository, with its packages built, measured in the
 * same run as this one. A suite that measures a package in-process imports it from both trees
 * (each tree's copy resolves its own dependencies through that tree's node_modules, so the two
 * never share a module) and interleaves their rounds; the report gives after (this tree) ÷ before
 * (DIR).
 */

import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { gitCommit } from './machine.js';

export interface Baseline {
  /** The other tree's root, absolute. */
  readonly dir: string;
  /** Its commit, as the header gives this tree's. */
  readonly commit: string;
  /** Imports a workspace package (`tidal-core`, `tidal-query`, ...) from the other tree's build. */
  load<T>(pkg: string): Promise<T>;
}

/**
 * Checks that `dir` holds a built copy of each of `packages` and returns the loader; on a tree
 * that cannot be used prints why (naming the missing file) and exits 2, before anything is built.
 */
export function loadBaseline(dir: string | undefined, packages: readonly string[]): Baseline | undefined {
  if (dir === undefined) return undefined;
  const root = path.resolve(dir);
  for (const pkg of packages) {
    const entry = path.join(root, 'packages', pkg, 'dist', 'index.js');
    const link = path.join(root, 'node_modules', pkg);
    const missing = !fs.existsSync(entry) ? entry : !fs.existsSync(link) ? link : undefined;
    if (missing !== undefined) {
      process.stderr.write(
        `--baseline ${dir}: ${missing} does not exist (the tree needs its node_modules and a build: npx tsc -b packages/${pkg})\n`,
      );
      process.exit(2);
    }
  }
  return {
    dir: root,
    commit: gitCommit(root),
    load: async <T>(pkg: string) => (await import(pathToFileURL(path.join(root, 'packages', pkg, 'dist', 'index.js')).href)) as T,
  };
}
