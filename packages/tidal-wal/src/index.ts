export { GroupCommit, GROUP_COMMIT_DEFAULTS, resolveGroupCommitOptions } from './group-commit.js';
export type { GroupCommitOptions, GroupCommitHooks } from './group-commit.js';
export { SignalLog } from './signal-log.js';
export type { LogRecord } from './signal-log.js';
export { openWriterConnection, assertDurability, DURABILITIES } from './connection.js';
export type { Durability } from './connection.js';
