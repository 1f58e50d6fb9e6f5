import { closeSync, constants, mkdirSync, openSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { InvalidInputError } from 'tidal-load';
import { checkWellFormed } from './validate.js';

const EXPECTED = 'a directory that exists or can be created, and in which tidal can create its files';

/**
 * Validates a `.path()` value before anything touches the file system: a non-empty string without
 * NUL (the OS would truncate or refuse it) and well-formed UTF-16 (a lone surrogate would be
 * written as U+FFFD, so two distinct paths would name one directory).
 */
export function checkPath(dir: unknown): string {
  if (typeof dir !== 'string' || dir.length === 0) throw new InvalidInputError('path', 'a non-empty directory path', dir);
  if (dir.includes('\u0000')) throw new InvalidInputError('path', 'a directory path without NUL characters', dir);
  return checkWellFormed('path', dir);
}

/**
 * Creates the database directory if needed and proves that the database file can be created or
 * opened in it, so every way a path can be unusable (it is a file, it is under a file, the
 * directory is read-only, the file system refuses) is one {@link InvalidInputError} for `path`
 * that names the path and the OS's reason, instead of a raw `EEXIST`, `ENOTDIR` or a SQLite
 * "unable to open database file".
 *
 * The probe opens `tidal.db` itself (creating it empty if absent; SQLite treats an empty file as a
 * new database), which is exactly what opening the database does next. Permission bits alone would
 * not do: they do not stop root, while a read-only mount or a pseudo file system such as /proc
 * refuses root too.
 */
export function prepareDirectory(dir: string): void {
  checkPath(dir);
  try {
    makeDirectory(dir);
    if (!statSync(dir).isDirectory()) throw notADirectory(dir);
    closeSync(openSync(join(dir, 'tidal.db'), constants.O_RDWR | constants.O_CREAT, 0o644));
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const message = String(e?.message ?? err);
    // Node's messages start with the code ("ENOTDIR: not a directory, mkdir '…'"); ours may not.
    const reason = e?.code && !message.startsWith(e.code) ? `${e.code}: ${message}` : message;
    throw new InvalidInputError('path', `${EXPECTED} (${reason})`, dir);
  }
}

function notADirectory(path: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`ENOTDIR: not a directory, '${path}'`), { code: 'ENOTDIR' });
}

/**
 * `mkdir -p`, one level at a time. Not `mkdirSync(dir, { recursive: true })`: on a file system that
 * answers ENOENT for a child of an existing directory (/proc does), Node 20's recursive mkdir
 * retries for ever instead of failing.
 */
function makeDirectory(dir: string): void {
  const missing: string[] = [];
  for (let at = resolve(dir); ;) {
    try {
      if (!statSync(at).isDirectory()) throw notADirectory(at);
      break;
    } catch (err) {
      const parent = dirname(at);
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || parent === at) throw err;
      missing.push(at);
      at = parent;
    }
  }
  for (let i = missing.length - 1; i >= 0; i--) {
    try {
      mkdirSync(missing[i]!);
    } catch (err) {
      // Created meanwhile by someone else: fine if it is a directory, which the next step checks.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
}
