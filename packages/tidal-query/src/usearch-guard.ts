/**
 * Imported by ann.ts just before 'usearch'. usearch 2.25's ESM build looks for its native addon
 * from a global `__dirname` when one exists, and `node -e` / `node -p` define one ('.'): its search
 * then climbs '..' without end (RangeError: Maximum call stack size exceeded). The global is
 * hidden while usearch evaluates (it then finds itself from its own file, as in any other process)
 * and put back by {@link restoreDirname} right after.
 */
const hidden = Object.getOwnPropertyDescriptor(globalThis, '__dirname');
if (hidden?.configurable === true) delete (globalThis as { __dirname?: unknown }).__dirname;

/** Puts the global `__dirname` back as it was before usearch loaded. Idempotent. */
export function restoreDirname(): void {
  if (hidden?.configurable === true && !Object.hasOwn(globalThis, '__dirname')) Object.defineProperty(globalThis, '__dirname', hidden);
}
