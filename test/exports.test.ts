import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import ts from 'typescript';
import * as tidal from 'tidal-core';

const root = fileURLToPath(new URL('..', import.meta.url));
const packages = readdirSync(join(root, 'packages'));

interface Manifest {
  name: string;
  exports: Record<string, unknown>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}
const manifest = (pkg: string) => JSON.parse(readFileSync(join(root, 'packages', pkg, 'package.json'), 'utf8')) as Manifest;

/** Whether a package carries its own declarations (otherwise they come from `@types/<name>`). */
function shipsTypes(name: string): boolean {
  const dir = join(root, 'node_modules', name);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { types?: string; typings?: string };
  return Boolean(pkg.types ?? pkg.typings) || existsSync(join(dir, 'index.d.ts'));
}

function declarations(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.d.ts'))
    .map((f) => join(dir, f));
}

describe('tidal-core exports', () => {
  it('the public API, and nothing else', () => {
    expect(Object.keys(tidal).sort()).toEqual(
      [
        'BackpressureError',
        'CapacityError',
        'ClosedError',
        'DEFAULTS',
        'AbortedError',
        'DEFAULT_THRESHOLDS',
        'DegradationLevel',
        'ERROR_CODES',
        'InternalError',
        'InvalidInputError',
        'MAX_BATCH',
        'MAX_ID_LENGTH',
        'MAX_LIMIT',
        'MAX_METADATA_BYTES',
        'MAX_TEXT_LENGTH',
        'MemoryPressureError',
        'OverloadedError',
        'RATE_LIMITER_DEFAULTS',
        'RETRY_AFTER_MAX_MS',
        'RETRY_AFTER_MIN_MS',
        'RateLimitedError',
        'RateLimiterConfig',
        'SESSION_DEFAULTS',
        'SessionClosedError',
        'DirectoryLockedError',
        'CURSOR_DEFAULTS',
        'CursorExpiredError',
        'MissingPackageError',
        'SchemaChangeError',
        'COMPATIBLE_SCHEMA_CHANGES',
        'INCOMPATIBLE_SCHEMA_CHANGES',
        'TidalDb',
        'TidalDbBuilder',
        'TidalError',
        'TimeoutError',
        'USER_DEFAULTS',
        'WARNING_CODES',
        'WriterFailedError',
        'autoAdmissionLimit',
        'levelName',
        'querySlots',
      ].sort(),
    );
  });
});

const entryOf = (pkg: string) => join(root, 'packages', pkg, 'dist', 'index.d.ts');
let program: ts.Program | undefined;

/** Every name (values and types) the main entry of `pkg` exports, as its published declarations say. */
function mainExports(pkg: string): string[] {
  const options = { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, noEmit: true };
  program ??= ts.createProgram(packages.map(entryOf), options);
  const checker = program.getTypeChecker();
  const module = checker.getSymbolAtLocation(program.getSourceFile(entryOf(pkg))!)!;
  return checker
    .getExportsOfModule(module)
    .map((s) => s.name)
    .sort();
}

/**
 * Each package's main export, names sorted: adding or removing one is a decision made here. What only
 * the sibling packages, the bench and the tests use lives in a subpath (`tidal-core/internal`,
 * `tidal-serve/internal`, `tidal-serve/demo`), or is imported from its own module by the package's tests.
 */
const MAIN_EXPORTS: Record<string, string[]> = {
  'tidal-core': [
    'AbortedError',
    'MemoryStats',
    'NativeHeapStats',
    'ThreadMemory',
    'AnnBuildStats',
    'AnnOptions',
    'WarmOptions',
    'AnnSource',
    'AnnWarning',
    'BackpressureError',
    'CapacityError',
    'CapacityOptions',
    'CURSOR_DEFAULTS',
    'ClosedError',
    'Criticality',
    'CursorExpiredError',
    'CursorGoneReason',
    'CursorOptions',
    'MissingPackageError',
    'SchemaChangeError',
    'SchemaChange',
    'SchemaChangeKind',
    'CompatibleSchemaChange',
    'IncompatibleSchemaChange',
    'COMPATIBLE_SCHEMA_CHANGES',
    'INCOMPATIBLE_SCHEMA_CHANGES',
    'MigrateOptions',
    'DiversityOf',
    'FieldsOf',
    'FieldValue',
    'FilterOf',
    'KindOf',
    'MetadataOf',
    'DEFAULTS',
    'DEFAULT_THRESHOLDS',
    'DegradationLevel',
    'DegradationLevelName',
    'DirectoryLockedError',
    'Diversity',
    'Durability',
    'ERROR_CODES',
    'EmbedAnswer',
    'EmbedCallOptions',
    'ErrorCode',
    'Explain',
    'FieldCondition',
    'Filter',
    'ForYouWeights',
    'GroupCommitOptions',
    'InternalError',
    'InvalidInputError',
    'Item',
    'ItemInput',
    'LatencySummary',
    'LevelReason',
    'LimitedOptions',
    'LoadView',
    'MAX_BATCH',
    'MAX_ID_LENGTH',
    'MAX_LIMIT',
    'MAX_METADATA_BYTES',
    'MAX_TEXT_LENGTH',
    'MemoryGuardOptions',
    'MemoryPressureError',
    'MetricsRegistry',
    'OpenSessionOptions',
    'OriginPosition',
    'OriginStats',
    'OverloadedError',
    'PinnedRankingStats',
    'Profile',
    'QueryControl',
    'QueryStats',
    'VectorSearchMode',
    'RATE_LIMITER_DEFAULTS',
    'RETRY_AFTER_MAX_MS',
    'RETRY_AFTER_MIN_MS',
    'RangeCondition',
    'RateLimitedError',
    'RateLimiterConfig',
    'ReplicaStats',
    'ReplicationGap',
    'ReplicationLink',
    'ReplicationLinkStats',
    'RetrieveRequest',
    'RetrieveFields',
    'SearchFields',
    'RetrieveResults',
    'RetrievedItem',
    'SESSION_DEFAULTS',
    'SchemaDefinition',
    'SearchHit',
    'SearchRequest',
    'SearchResults',
    'SemanticFallback',
    'SessionClosedError',
    'SessionHandle',
    'SessionInfo',
    'SessionOptions',
    'SessionSummary',
    'SignalInput',
    'SignalKindDefinition',
    'SignalValues',
    'TextEmbedder',
    'ThreadDb',
    'DbCalls',
    'Thresholds',
    'TidalDb',
    'TidalDbBuilder',
    'TidalError',
    'TidalOptions',
    'TidalWarning',
    'TimeoutError',
    'USER_DEFAULTS',
    'User',
    'UserCreatorInput',
    'UserFilter',
    'UserInput',
    'UserItemInput',
    'VelocityWindow',
    'WARNING_CODES',
    'WarmResult',
    'WarningCode',
    'WarningSink',
    'WindowName',
    'WorkSharingOptions',
    'WorkerModule',
    'WorkerModuleExports',
    'WriterFailedError',
    'autoAdmissionLimit',
    'levelName',
    'querySlots',
  ],
  'tidal-fleet': [
    'DEFAULT_MAX_IN_FLIGHT',
    'DependencyUnavailableError',
    'EMBEDDER_BREAKER_DEFAULTS',
    'EmbedOptions',
    'EmbedderBreakerOptions',
    'EmbedderClient',
    'EmbedderOptions',
    'EmbedderStats',
    'FleetRedis',
    'FleetRedisOptions',
    'PooledSessionError',
    'PostgresSlots',
    'PostgresSlotsOptions',
    'RateGrant',
    'RedisPeriodOptions',
    'RedisPeriodSource',
    'RedisPeriodStats',
    'RedisRateOptions',
    'RedisRateSource',
    'RedisRateStats',
    'RedisStreamReplication',
    'RedisStreamReplicationOptions',
    'SLOT_CEILING',
    'SharedSlots',
    'SharedSlotsOptions',
    'SharedSlotsStats',
    'SlotTimeoutError',
    'UnexpectedReplyError',
    'openSlotSource',
  ],
  'tidal-load': [
    'MissingPackageError',
    'SchemaChangeError',
    'SchemaChange',
    'SchemaChangeKind',
    'CompatibleSchemaChange',
    'IncompatibleSchemaChange',
    'COMPATIBLE_SCHEMA_CHANGES',
    'INCOMPATIBLE_SCHEMA_CHANGES',
    'describeSchemaChange',
    'AbortedError',
    'AcquireOptions',
    'BackpressureError',
    'CapacityError',
    'ClosedError',
    'Criticality',
    'CursorExpiredError',
    'CursorGoneReason',
    'DEFAULT_THRESHOLDS',
    'DegradationLevel',
    'DegradationLevelName',
    'DependencyUnavailableError',
    'DirectoryLockedError',
    'ERROR_CODES',
    'ErrorCode',
    'ForeignBatch',
    'InFlightGuard',
    'InternalError',
    'InvalidInputError',
    'LimitedOptions',
    'LoadDetector',
    'LoadView',
    'LocalRateSource',
    'LocalSlotSource',
    'MILLITOKENS_PER_TOKEN',
    'MemoryPressureError',
    'OriginPosition',
    'OverloadedError',
    'PeriodBackend',
    'PeriodDecision',
    'PeriodOutcome',
    'PeriodSource',
    'PooledSessionError',
    'RATE_LIMITER_DEFAULTS',
    'RateBackend',
    'RateDecision',
    'RateLimit',
    'RateLimitedError',
    'RateLimiter',
    'RateLimiterConfig',
    'RateSource',
    'ReplicaHead',
    'ReplicaHost',
    'ReplicatedBatch',
    'ReplicatedEvent',
    'ReplicatedItem',
    'ReplicationGap',
    'ReplicationLink',
    'ReplicationLinkStats',
    'SLOT_CEILING',
    'SessionClosedError',
    'SlotLease',
    'SlotSource',
    'SlotTimeoutError',
    'Thresholds',
    'TidalError',
    'TidalWarning',
    'TimeoutError',
    'TokenBucket',
    'UnexpectedReplyError',
    'WARNING_CODES',
    'WarningCode',
    'WarningSink',
    'WriterFailedError',
    'addMillitokens',
    'checkBurst',
    'checkCriticality',
    'checkLevel',
    'checkLimitKey',
    'checkRate',
    'checkSlotLimit',
    'emitProcessWarning',
    'levelName',
    'periodOutcome',
    'resolveAdmissionLimit',
    'resolveRateLimiterConfig',
    'resolveThresholds',
    'takeWaitMs',
    'STAGES',
    'STAGE',
    'STAGE_CLOCK',
    'STAGE_TIMES_ON',
    'Stage',
    'stageStart',
    'stageEnd',
    'stageAdd',
    'stageTotal',
    'stageTotals',
    'reviveError',
  ],
  'tidal-query': [
    'ANN_BUILDER_FILENAME',
    'createMemoryBoard',
    'readMemoryBoard',
    'SignalArena',
    'ThreadMemory',
    'AnnGate',
    'nativeGateCells',
    'processNativeGate',
    'AnnBuilderInit',
    'AnnBuilderMessage',
    'ExactVectors',
    'VectorSearcher',
    'WarmMessage',
    'AnnIndex',
    'AnnSource',
    'AnnWarning',
    'BatchEntryResult',
    'CANCEL_CELLS',
    'CELL_CANCELLED',
    'Catalog',
    'cosine',
    'exactNearestOnScale',
    'exactNearestWithSimilarity',
    'toCommonScale',
    'toInt8',
    'Diversity',
    'Explain',
    'FEED_CANDIDATE_BUDGET',
    'FOR_YOU_BUDGETS',
    'FOR_YOU_EXPLORE',
    'FOR_YOU_WEIGHTS',
    'FieldCondition',
    'FieldType',
    'Filter',
    'FollowingOrder',
    'ForYouBudget',
    'ForYouOptions',
    'ForYouWeights',
    'HOT_GRAVITY',
    'ItemsWriter',
    'LevelPlan',
    'MAX_EVENT_MS',
    'PlanOverrides',
    'Profile',
    'QueryContext',
    'QuerySchema',
    'RECENCY_HALF_LIFE_MS',
    'RETRIEVE_TASK_KEYS',
    'RISING_BASELINE',
    'RangeCondition',
    'RelatedTask',
    'ResultOf',
    'RetrieveExecutor',
    'RetrieveMessage',
    'RetrieveTask',
    'RetrievedItem',
    'SEARCH_TASK_KEYS',
    'SLOT_BYTES',
    'SLOT_LAYOUT',
    'SearchHit',
    'SearchMessage',
    'SearchTask',
    'SignalKindSpec',
    'SignalStore',
    'SignalValues',
    'SkippedResult',
    'StoredItem',
    'TaskEnvelope',
    'TaskOf',
    'TextIndex',
    'UserQueryState',
    'VelocityWindow',
    'WARM_SYNC_BYTES',
    'WORKER_FILENAME',
    'WarmResult',
    'WindowName',
    'WorkerInit',
    'WorkerOp',
    'WorkerResult',
    'WorkerRetrieveResult',
    'WorkerSearchResult',
    'WorkerTask',
    'blobToVector',
    'buildCreatorLists',
    'creatorListsOf',
    'forYouBudgetAt',
    'ftsQuery',
    'hashString',
    'levelPlan',
    'queryTerms',
    'readItemSignals',
    'runTask',
    'searchTopK',
    'tunedPlan',
    'unpackAnswer',
    'PackedRows',
    'SharedRecordsReader',
    'SharedRecordsWriter',
    'sharedRecordRetries',
    'hashBytes',
    'FoundRecord',
    'SharedRecordsBuffers',
    'SharedRecordsStats',
    'SessionRecord',
    'UserRecord',
    'decodeRelated',
    'decodeSession',
    'decodeUserRecord',
    'decodeUserState',
    'decayedAffinities',
    'encodeRelated',
    'encodeSession',
    'encodeUserState',
    'CatalogShare',
    'createCatalogShare',
    'readCatalogImage',
    'SHARE_MIN_ROWS',
    'writeCatalogImage',
    'CatalogShareInit',
    'createSharedVectors',
    'sharedVectorBytes',
    'sharedVectorRows',
    'SharedVectorBuffers',
  ],
  'tidal-serve': [
    'AdmissionChain',
    'AdmissionOptions',
    'BuiltAdmissionChain',
    'ChainBuildOptions',
    'Clock',
    'CloseOptions',
    'DASHBOARD_DEFAULTS',
    'Dashboard',
    'DashboardFactory',
    'DashboardHandler',
    'DashboardOptions',
    'Outcome',
    'RateSpec',
    'Refusal',
    'RefusalReason',
    'RequestInfo',
    'SERVER_DEFAULTS',
    'ServeDb',
    'ServeSample',
    'ServerOptions',
    'SharedAdmissionState',
    'StageStats',
    'StartOptions',
    'Ticket',
    'TidalAdmissionOptions',
    'TidalServer',
    'Tier',
    'createAdmissionChain',
    'createDashboard',
    'createServer',
    'createSharedAdmissionState',
    'startServer',
    'tidalAdmission',
  ],
  'tidal-wal': [
    'AckMark',
    'Durability',
    'FilledMemoryGuardOptions',
    'GroupCommit',
    'GroupCommitOptions',
    'GroupCommitStats',
    'MemoryGuard',
    'MemoryGuardOptions',
    'RETRY_AFTER_MAX_MS',
    'RETRY_AFTER_MIN_MS',
    'SignalLog',
    'SlotCheckpoint',
    'WalCheckpointer',
    'assertDurability',
    'openWriterConnection',
    'resolveGroupCommitOptions',
    'resolveMemoryGuardOptions',
  ],
};

describe('main exports', () => {
  it('pins a list for every package', () => {
    expect(Object.keys(MAIN_EXPORTS).sort()).toEqual([...packages].sort());
  });

  for (const [pkg, names] of Object.entries(MAIN_EXPORTS)) {
    it(`${pkg} exports exactly its pinned names`, () => {
      expect(mainExports(pkg)).toEqual([...names].sort());
    });
  }
});

describe('package manifests', () => {
  it('each exports map names the entry and its named subpaths alone, so other internals are not importable', () => {
    // tidal-query's worker entry is a second one: tidal-core's worker host wraps it, and runs its
    // queries in the worker's own thread (runInThread). tidal-wal's storage entry is the file format
    // (tables, migrations, typed meta keys), which tidal-core and tidal-query's tests open files with.
    // The internal entries of tidal-core and tidal-serve hold what only the sibling packages, the
    // bench and the tests use; tidal-serve's demo entry is the corpus `tidal serve --demo` loads.
    const extra: Record<string, string[]> = {
      'tidal-core': ['./internal'],
      'tidal-query': ['./worker'],
      'tidal-serve': ['./internal', './demo'],
      'tidal-wal': ['./storage'],
    };
    // './package.json' lets tools (and `tidal --version`) read a package's version.
    for (const pkg of packages) expect(Object.keys(manifest(pkg).exports), pkg).toEqual(['.', ...(extra[pkg] ?? []), './package.json']);
  });

  it("tidal-fleet is an optional peer of tidal-serve, so serve installs without Redis's and PostgreSQL's clients", () => {
    const serve = manifest('tidal-serve');
    expect(serve.dependencies?.['tidal-fleet']).toBeUndefined();
    expect(serve.peerDependenciesMeta?.['tidal-fleet']?.optional).toBe(true);
  });

  it('prom-client is an optional peer of tidal-core, not a dependency', () => {
    const core = manifest('tidal-core');
    expect(core.dependencies?.['prom-client']).toBeUndefined();
    expect(core.peerDependencies?.['prom-client']).toBeDefined();
    expect(core.peerDependenciesMeta?.['prom-client']?.optional).toBe(true);
  });

  it('every package a published declaration names is a declared dependency or peer, with its types', () => {
    for (const pkg of packages) {
      const m = manifest(pkg);
      const declared = new Set([...Object.keys(m.dependencies ?? {}), ...Object.keys(m.peerDependencies ?? {})]);
      const optional = Object.entries(m.peerDependenciesMeta ?? {})
        .filter(([, meta]) => meta.optional)
        .map(([name]) => name);
      for (const file of declarations(join(root, 'packages', pkg, 'dist'))) {
        const where = `${pkg}: ${file.slice(root.length)}`;
        const text = readFileSync(file, 'utf8');
        for (const [, name] of text.matchAll(/(?:from |import\()['"]((?:@[^/'"]+\/)?[^./'"][^/'"]*)/g)) {
          if (name!.startsWith('node:')) continue;
          expect(declared.has(name!), `${where} names ${name}`).toBe(true);
          if (!shipsTypes(name!))
            expect(declared.has(`@types/${name}`), `${where} names ${name}, whose types are @types/${name}`).toBe(true);
          // An application without an optional peer installed must still type-check against tidal.
          expect(optional, `${where} names the optional peer ${name}`).not.toContain(name);
        }
      }
    }
  });
});
