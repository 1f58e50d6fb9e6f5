// Makes sure the servers the fleet tests start for themselves are installed: redis-server and
// PostgreSQL (initdb, postgres). Missing ones are installed from Debian's packages when this runs as
// root on a system with apt-get; otherwise it says what is missing and exits non-zero, unless
// TIDAL_SKIP_SERVICES=1 (the fleet tests then skip themselves).
import { execFileSync, execSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { delimiter, join } from 'node:path';

function onPath(name) {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && existsSync(join(dir, name)));
}

/** Debian keeps initdb and postgres out of PATH, under /usr/lib/postgresql/<major>/bin. */
function postgresBin() {
  if (onPath('initdb') && onPath('postgres')) return 'PATH';
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return null;
  const majors = readdirSync(base)
    .filter((d) => existsSync(join(base, d, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return majors.length > 0 ? join(base, majors[0], 'bin') : null;
}

const missing = [];
if (!onPath('redis-server')) missing.push('redis-server');
if (postgresBin() === null) missing.push('postgresql');

if (missing.length === 0) {
  process.exit(0);
}
if (process.env.TIDAL_SKIP_SERVICES === '1') {
  process.stderr.write(`ensure-services: ${missing.join(', ')} missing; TIDAL_SKIP_SERVICES=1, the fleet tests will skip\n`);
  process.exit(0);
}
const root = typeof process.getuid === 'function' && process.getuid() === 0;
if (!root || !onPath('apt-get')) {
  process.stderr.write(
    `ensure-services: ${missing.join(', ')} missing and cannot be installed here (needs root and apt-get); ` +
      'install them (Debian: apt-get install redis-server postgresql) or set TIDAL_SKIP_SERVICES=1\n',
  );
  process.exit(1);
}
process.stderr.write(`ensure-services: installing ${missing.join(', ')} from Debian's packages...\n`);
const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
execSync('apt-get update', { stdio: 'inherit', env });
execFileSync('apt-get', ['install', '-y', '--no-install-recommends', 'redis-server', 'postgresql'], { stdio: 'inherit', env });
