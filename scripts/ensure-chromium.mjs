// Makes sure the browser the dashboard's browser test drives is installed: Debian's chromium at
// /usr/bin/chromium (playwright-core never downloads one). Installs it with apt when it is missing
// and this runs as root; otherwise says how. TIDAL_SKIP_BROWSER=1 skips the check (and the test).
import { execFileSync, execSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const path = process.env.TIDAL_CHROMIUM ?? '/usr/bin/chromium';
const install = 'apt-get update && apt-get install -y --no-install-recommends chromium';

function works() {
  if (!existsSync(path)) return false;
  try {
    execFileSync(path, ['--version'], { stdio: 'ignore', timeout: 30_000 });
    return true;
  } catch {
    return false;
  }
}

if (process.env.TIDAL_SKIP_BROWSER === '1') {
  process.exit(0);
}
if (works()) {
  process.exit(0);
}
if (process.env.TIDAL_CHROMIUM !== undefined) {
  // A chosen browser is the caller's to install; apt would put one somewhere else.
  process.stderr.write(`TIDAL_CHROMIUM=${path} does not run; install it there or unset TIDAL_CHROMIUM\n`);
  process.exit(1);
}
const root = typeof process.getuid === 'function' && process.getuid() === 0;
const apt = existsSync('/usr/bin/apt-get');
if (!root || !apt) {
  // Not ours to install: the test run goes on, and the browser test fails with this same advice.
  process.stderr.write(
    `chromium is not installed at ${path}; the dashboard's browser test needs it.\n` +
      (apt ? `  install it as root:  sudo sh -c '${install}'\n` : `  install Chromium so that ${path} exists (on Debian: ${install})\n`) +
      '  or skip that test:   TIDAL_SKIP_BROWSER=1 npm test\n',
  );
  process.exit(0);
}
process.stderr.write(`installing chromium for the dashboard's browser test (${install})...\n`);
try {
  execSync(install, { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
} catch {
  process.stderr.write('installing chromium failed (see above); set TIDAL_SKIP_BROWSER=1 to run the tests without it\n');
  process.exit(1);
}
if (!works()) {
  process.stderr.write(`chromium was installed but ${path} does not run\n`);
  process.exit(1);
}
