#!/usr/bin/env node
// npm run test:repeat [-- --runs N] [--busy K] [--no-build] [vitest arguments: files, --project fleet, -t ...]
//
// Runs the suite (or the files and options given) N times in a row while K busy loops hold the
// cores, and prints how often each test passed and failed: a test that fails once in ten runs on a
// loaded machine is a defect, and this is how it is found. Not part of CI (it takes N suites' time).
// Builds once first, as `npm test` does (`npm run pretest`), unless --no-build.
//
// Exit code: 0 when every run passed every test, 1 otherwise.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const USAGE = 'usage: npm run test:repeat -- [--runs N] [--busy K] [--no-build] [vitest arguments]';

function parse(argv) {
  const options = { runs: 10, busy: 2, build: true, vitest: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const count = (name) => {
      const v = Number(argv[++i]);
      if (!Number.isInteger(v) || v < 0) throw new Error(`${name} must be a whole number, got ${argv[i]}\n${USAGE}`);
      return v;
    };
    if (a === '--runs') options.runs = count('--runs');
    else if (a === '--busy') options.busy = count('--busy');
    else if (a === '--no-build') options.build = false;
    else if (a === '--help' || a === '-h') {
      console.log(USAGE);
      process.exit(0);
    } else options.vitest.push(a);
  }
  if (options.runs < 1) throw new Error(`--runs must be at least 1\n${USAGE}`);
  return options;
}

let options;
try {
  options = parse(process.argv.slice(2));
} catch (err) {
  console.error(err.message);
  process.exit(2);
}

if (options.build) {
  const built = spawnSync('npm', ['run', 'pretest'], { cwd: root, stdio: 'inherit' });
  if (built.status !== 0) process.exit(built.status ?? 1);
}

// The busy loops: plain spinning processes, started once and killed on every way out.
const loops = Array.from({ length: options.busy }, () => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
const stopLoops = () => {
  for (const loop of loops) if (loop.exitCode === null && loop.signalCode === null) loop.kill('SIGKILL');
};
process.on('exit', stopLoops);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    stopLoops();
    process.exit(130);
  });
}

const dir = mkdtempSync(join(tmpdir(), 'tidal-repeat-'));
/** `file > full name` → { passed, failed, skipped, why: first line of each failure }. */
const tests = new Map();
const runs = [];

function runOnce(i) {
  const report = join(dir, `run-${i}.json`);
  const load = loadavg()[0];
  const began = Date.now();
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [
        join(root, 'node_modules', 'vitest', 'vitest.mjs'),
        'run',
        '--reporter=dot',
        '--reporter=json',
        `--outputFile=${report}`,
        ...options.vitest,
      ],
      { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] },
    );
    child.once('exit', (code) => resolve({ report, code, load, seconds: (Date.now() - began) / 1000 }));
  });
}

for (let i = 1; i <= options.runs; i++) {
  console.log(`\ntest:repeat: run ${i} of ${options.runs}, ${options.busy} busy loops, load average ${loadavg()[0].toFixed(2)}`);
  const { report, code, load, seconds } = await runOnce(i);
  const run = { i, code, seconds, loadStart: load, loadEnd: loadavg()[0], passed: 0, failed: 0, skipped: 0, report: true };
  let r;
  try {
    r = JSON.parse(readFileSync(report, 'utf8'));
  } catch {
    run.report = false;
    runs.push(run);
    console.log(`test:repeat: run ${i} left no report (exit code ${code})`);
    continue;
  }
  for (const file of r.testResults ?? []) {
    const name = relative(root, file.name);
    if ((file.assertionResults ?? []).length === 0 && file.status === 'failed') {
      // A file that failed before any test ran (an import, a hook): counted as one entry.
      const key = `${name} (the file)`;
      const t = tests.get(key) ?? { passed: 0, failed: 0, skipped: 0, why: [] };
      t.failed++;
      t.why.push(
        `run ${i}: ${String(file.message ?? '')
          .split('\n')[0]
          .slice(0, 200)}`,
      );
      tests.set(key, t);
      run.failed++;
    }
    for (const a of file.assertionResults ?? []) {
      const key = `${name} > ${a.fullName}`;
      const t = tests.get(key) ?? { passed: 0, failed: 0, skipped: 0, why: [] };
      if (a.status === 'passed') (t.passed++, run.passed++);
      else if (a.status === 'failed') {
        t.failed++;
        run.failed++;
        t.why.push(
          `run ${i}: ${String((a.failureMessages ?? [])[0] ?? '')
            .split('\n')[0]
            .slice(0, 200)}`,
        );
      } else (t.skipped++, run.skipped++);
      tests.set(key, t);
    }
  }
  runs.push(run);
}
stopLoops();
rmSync(dir, { recursive: true, force: true });

console.log(`\ntest:repeat: ${options.runs} runs of \`vitest run ${options.vitest.join(' ')}\` with ${options.busy} busy loops`);
for (const run of runs) {
  const counts = run.report ? `${run.passed} passed, ${run.failed} failed${run.skipped ? `, ${run.skipped} skipped` : ''}` : 'no report';
  console.log(
    `  run ${run.i}: ${counts}, ${run.seconds.toFixed(0)} s, load average ${run.loadStart.toFixed(2)} → ${run.loadEnd.toFixed(2)} (exit code ${run.code})`,
  );
}
const flaky = [...tests].filter(([, t]) => t.failed > 0).sort(([a], [b]) => a.localeCompare(b));
const clean = tests.size - flaky.length;
for (const [key, t] of flaky) {
  console.log(`  ${t.passed} passed, ${t.failed} failed: ${key}`);
  for (const why of t.why) console.log(`      ${why}`);
}
const cleanRuns = runs.filter((r) => r.report && r.failed === 0).length;
console.log(`${clean} of ${tests.size} tests passed in every run that reached them; ${cleanRuns} of ${runs.length} runs clean`);
process.exitCode = cleanRuns === runs.length ? 0 : 1;
