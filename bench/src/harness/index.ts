/** The bench harness: flags, timing, interleaved variants, the machine header, markdown and JSON output. */

export { parseOptions, parseOptionsOrThrow, usage, UsageError, type OptionSpec, type Options } from './args.js';
export { interleave, fmtSpread, spread, type Variant, type VariantResult, type InterleaveOptions, type Spread } from './interleave.js';
export {
  ROOT,
  describeHeader,
  describeMachine,
  gitCommit,
  header,
  loadAverage,
  machine,
  type Header,
  type MachineInfo,
} from './machine.js';
export { Report, type ReportTable } from './report.js';
export { loadBaseline, type Baseline } from './baseline.js';
export { agreement, blockRow, compareInBlocks, type BlockComparison, type BlockSide } from './blocks.js';
export { freePort, startRedis } from './redis.js';
export {
  Progress,
  collectGarbage,
  collectedHeapBytes,
  fmtDuration,
  fmtInt,
  fmtMs,
  fmtRatio,
  markdownTable,
  nowMs,
  percentile,
  summarize,
  textTable,
  timed,
  type Summary,
} from './stats.js';
