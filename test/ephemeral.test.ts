/**
 * An ephemeral database's directory goes when the process exits without `close()`: by
 * `process.exit`, and by an uncaught exception. Each case is a child process that opens one,
 * prints its directory, and exits without closing it.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function runChild(ending: string): { dir: string; status: number | null } {
  const script = `import { TidalDb } from 'tidal-core';
const db = await TidalDb.builder().ephemeral().schema({ signals: [{ name: 'view', halfLifeMs: 1000 }] }).open();
await db.upsertItems([{ id: 'a', text: 'one' }]);
console.log(db.path);
${ending}`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
  const dir = r.stdout.trim();
  expect(dir, r.stderr).toMatch(/tidal-/);
  return { dir, status: r.status };
}

describe('an ephemeral database the process never closed', () => {
  it('has its directory removed when the process calls process.exit', () => {
    const { dir, status } = runChild('process.exit(0);');
    expect(status).toBe(0);
    expect(existsSync(dir)).toBe(false);
  });

  it('has its directory removed when the process dies of an uncaught exception', () => {
    const { dir, status } = runChild("throw new Error('the app failed');");
    expect(status).toBe(1);
    expect(existsSync(dir)).toBe(false);
  });
});
