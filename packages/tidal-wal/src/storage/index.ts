// The file format of a tidal database (subpath `tidal-wal/storage`): its tables, their migrations,
// and the typed keys of `tidal_meta`.
export { STORAGE_VERSION } from './ddl.js';
export { openStorage } from './open.js';
export { META, Meta } from './meta.js';
export type { MetaKey } from './meta.js';
