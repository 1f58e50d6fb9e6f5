import fs from 'node:fs';

/**
 * This process's resident memory split by what backs it, from `/proc/self/smaps_rollup` (`Rss`,
 * `Anonymous`) and `/proc/self/status` (`RssShmem`), in MiB; Linux only (NaN elsewhere).
 *
 * - `anonymous`: private memory with no file behind it: every thread's JS heap, native buffers,
 *   and SharedArrayBuffers: V8 maps them private anonymous, shared between the threads of one
 *   process, so they count here, not in `shmem` (checked on Linux 6.18, Node 20).
 * - `shmem`: shared memory (tmpfs, `MAP_SHARED` anonymous, SysV): nothing of tidal's in-process
 *   state, kept apart so that is visible.
 * - `fileBacked`: the rest: pages of mapped files (the binary and its libraries, a mapped ANN index
 *   file, SQLite's memory-mapped pages), which the kernel can drop and read again. Rss counts a page
 *   once per mapping, so a file mapped n times counts up to n times; `fileBackedPss` (`Pss_File`)
 *   counts each page once (divided among the mappings and processes that share it).
 */
export interface ResidentMemory {
  rssMiB: number;
  anonymousMiB: number;
  fileBackedMiB: number;
  fileBackedPssMiB: number;
  shmemMiB: number;
}

function kib(text: string, key: string): number {
  const m = new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text);
  return m ? Number(m[1]) : Number.NaN;
}

function read(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

export function residentMemory(): ResidentMemory {
  const rollup = read('/proc/self/smaps_rollup');
  const rss = kib(rollup, 'Rss');
  const anonymous = kib(rollup, 'Anonymous');
  const shmem = kib(read('/proc/self/status'), 'RssShmem');
  return {
    rssMiB: rss / 1024,
    anonymousMiB: anonymous / 1024,
    fileBackedMiB: (rss - anonymous - shmem) / 1024,
    fileBackedPssMiB: kib(rollup, 'Pss_File') / 1024,
    shmemMiB: shmem / 1024,
  };
}

/** `RSS 707 MiB: anonymous 492, file-backed 215 (PSS 60), shmem 0`. */
export function fmtResident(m: ResidentMemory): string {
  const f = (x: number): string => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '?');
  return `RSS ${f(m.rssMiB)} MiB: anonymous ${f(m.anonymousMiB)}, file-backed ${f(m.fileBackedMiB)} (PSS ${f(m.fileBackedPssMiB)}), shmem ${f(m.shmemMiB)}`;
}

/** Resident memory of a group of mappings of this process, in MiB. */
export interface MappingGroup {
  mappings: number;
  rssMiB: number;
  pssMiB: number;
  anonymousMiB: number;
}

/**
 * Where this process's resident pages are, from `/proc/self/smaps`, grouped by what backs them:
 * `files` by the mapped file (a file under `dataDir` by its name there, the node binary, shared
 * libraries and native addons, other files), `anonymous` by kind (`[heap]`: the main malloc arena,
 * `[stack]`, `mappings`: every other anonymous mapping: V8 heaps, ArrayBuffers, other threads'
 * malloc arenas). `largestAnonymousMiB`: the resident anonymous size of the 8 largest anonymous
 * mappings. Empty off Linux.
 */
export interface MappingBreakdown {
  files: Record<string, MappingGroup>;
  anonymous: Record<string, MappingGroup>;
  largestAnonymousMiB: number[];
}

export function mappingBreakdown(dataDir?: string): MappingBreakdown {
  const out: MappingBreakdown = { files: {}, anonymous: {}, largestAnonymousMiB: [] };
  const text = read('/proc/self/smaps');
  const largest: number[] = [];
  const add = (into: Record<string, MappingGroup>, key: string, rss: number, pss: number, anon: number): void => {
    const g = (into[key] ??= { mappings: 0, rssMiB: 0, pssMiB: 0, anonymousMiB: 0 });
    g.mappings++;
    g.rssMiB += rss / 1024;
    g.pssMiB += pss / 1024;
    g.anonymousMiB += anon / 1024;
  };
  // One mapping: its header line (`start-end perms offset dev inode [path]`), then `Key: n kB` lines.
  for (const block of text.split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    const header = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ (\d+)\s*(.*)$/m.exec(block);
    if (!header) continue;
    const inode = Number(header[1]);
    const name = header[2]!.trim();
    const rss = kib(block, 'Rss');
    const pss = kib(block, 'Pss');
    const anon = kib(block, 'Anonymous');
    if (rss === 0) continue;
    if (inode !== 0 && name.startsWith('/')) {
      const file = name.replace(/ \(deleted\)$/, '');
      const key =
        dataDir !== undefined && file.startsWith(`${dataDir}/`)
          ? `data: ${file.slice(dataDir.length + 1)}`
          : file === process.execPath
            ? 'node binary'
            : /\.(so(\.[\d.]+)?|node)$/.test(file)
              ? 'libraries and native addons'
              : 'other files';
      add(out.files, key, rss, pss, anon);
    } else {
      add(out.anonymous, name === '[heap]' || name === '[stack]' ? name : 'mappings', rss, pss, anon);
      largest.push(anon / 1024);
    }
  }
  out.largestAnonymousMiB = largest.sort((a, b) => b - a).slice(0, 8);
  return out;
}

/** Prints `memory LABEL: RSS …` through `log` and returns the reading, for the JSON. */
export function logMemory(label: string, log: (line: string) => void): ResidentMemory {
  const m = residentMemory();
  log(`memory ${label}: ${fmtResident(m)}`);
  return m;
}
