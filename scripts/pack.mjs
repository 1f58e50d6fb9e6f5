// `npm run pack [-- DIR]`: builds the packages and writes one tarball per package into DIR (default
// dist-pack/), replacing older ones, then prints their paths. Install them together: each
// package depends on its siblings at the same version, which are not on the registry.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = resolve(process.argv[2] ?? join(root, 'dist-pack'));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

mkdirSync(out, { recursive: true });
for (const f of readdirSync(out)) if (f.endsWith('.tgz')) rmSync(join(out, f));
execFileSync(
  process.execPath,
  [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-b', 'packages/tidal-core', 'packages/tidal-serve', 'packages/tidal-fleet'],
  {
    cwd: root,
    stdio: 'inherit',
  },
);
// The published packages only: the bench is a private workspace beside them.
const packages = readdirSync(join(root, 'packages')).map((p) => `--workspace=packages/${p}`);
execFileSync(npm, ['pack', ...packages, '--pack-destination', out, '--silent'], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
for (const f of readdirSync(out).sort()) if (f.endsWith('.tgz')) process.stdout.write(`${join(out, f)}\n`);
