/**
 * An answer's rows as they cross from a query worker to the database's thread: their numbers in
 * one Float64Array, their strings in one array, and each distinct row shape (its keys in order and
 * what each holds) once, as one string. The receiving thread turns a shape into a function that
 * builds a row as one object literal, once per shape (kept across answers). Why: every embedded
 * query's answer is read on that one thread, and reading the structured clone of the row objects
 * was its largest single cost. Reading a for_you answer of 20 rows took 43–66 µs cloned and takes
 * 18–27 µs packed; the worker pays 10–15 µs more to pack than it did to clone (2 cores, Node 20).
 *
 * What packs: plain objects (nested to any depth) whose values are numbers, strings, booleans,
 * null or undefined. Anything else inside a row (an array, a typed array, an object of another
 * class) is carried as is, in `others`, cloned as before. Unpacking gives objects equal to what a
 * structured clone gives: the same own keys in the same order, the same values (−0 and NaN
 * included), a `__proto__` key as an own property.
 */

/** A row's shape: (key, tag) pairs in key order, a nested object's pairs closed by {@link END}. */
type Program = (string | number)[];

export interface PackedRows {
  /** The distinct shapes, each a JSON array of its program. */
  readonly shapes: string[];
  /** Per row, its shape's index in `shapes`. */
  readonly rowShapes: Uint16Array;
  readonly nums: Float64Array;
  readonly strs: string[];
  readonly others: unknown[];
}

const NUM = 0;
const STR = 1;
const TRUE = 2;
const FALSE = 3;
const NULL = 4;
const UNDEF = 5;
const OTHER = 6;
const OBJ = 7;
/** Closes an object (in place of a key). */
const END = -1;

/** Distinct shapes an answer may carry; past it packing gives up (the rows cross as they are). */
const MAX_SHAPES = 0xffff;

/** An object a structured clone copies key by key (a null prototype comes back as Object's, as from a clone). */
function isPlain(v: object): boolean {
  const proto = Object.getPrototypeOf(v) as unknown;
  return !Array.isArray(v) && (proto === Object.prototype || proto === null);
}

function tagOf(v: unknown): number {
  switch (typeof v) {
    case 'number':
      return NUM;
    case 'string':
      return STR;
    case 'boolean':
      return v ? TRUE : FALSE;
    case 'undefined':
      return UNDEF;
    case 'object':
      return v === null ? NULL : isPlain(v) ? OBJ : OTHER;
    default:
      return OTHER;
  }
}

class Packer {
  nums = new Float64Array(256);
  n = 0;
  strs: string[] = [];
  others: unknown[] = [];

  #num(v: number): void {
    if (this.n === this.nums.length) {
      const grown = new Float64Array(this.nums.length * 2);
      grown.set(this.nums);
      this.nums = grown;
    }
    this.nums[this.n++] = v;
  }

  #value(v: unknown, tag: number): void {
    if (tag === NUM) this.#num(v as number);
    else if (tag === STR) this.strs.push(v as string);
    else if (tag === OTHER) this.others.push(v);
  }

  /**
   * Writes `o`'s values when its shape is `program`'s from `at`: the position after it, or −1 (the
   * caller then drops what was written, see {@link mark}).
   */
  follow(o: Record<string, unknown>, program: Program, at: number): number {
    for (const k of Object.keys(o)) {
      if (program[at] !== k) return -1;
      const v = o[k];
      switch (program[at + 1]) {
        case NUM:
          if (typeof v !== 'number') return -1;
          this.#num(v);
          break;
        case STR:
          if (typeof v !== 'string') return -1;
          this.strs.push(v);
          break;
        case OBJ:
          if (typeof v !== 'object' || v === null || !isPlain(v)) return -1;
          at = this.follow(v as Record<string, unknown>, program, at + 2) - 2;
          if (at < 0) return -1;
          break;
        default: {
          const tag = tagOf(v);
          if (program[at + 1] !== tag) return -1;
          if (tag === OTHER) this.others.push(v);
        }
      }
      at += 2;
    }
    return program[at] === END ? at + 1 : -1;
  }

  /** Writes `o`'s values and appends its shape to `program`. */
  learn(o: Record<string, unknown>, program: Program): void {
    for (const k of Object.keys(o)) {
      const v = o[k];
      const tag = tagOf(v);
      program.push(k, tag);
      if (tag === OBJ) this.learn(v as Record<string, unknown>, program);
      else this.#value(v, tag);
    }
    program.push(END);
  }

  mark(): [number, number, number] {
    return [this.n, this.strs.length, this.others.length];
  }

  reset([n, s, o]: [number, number, number]): void {
    this.n = n;
    this.strs.length = s;
    this.others.length = o;
  }
}

/**
 * `rows` packed, or null when one of them is not a plain object (a caller then sends the rows as
 * they are). The rows are only read.
 */
export function packRows(rows: readonly unknown[]): PackedRows | null {
  const p = new Packer();
  const programs: Program[] = [];
  const rowShapes = new Uint16Array(rows.length);
  let last = -1;
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r];
    if (typeof row !== 'object' || row === null || !isPlain(row)) return null;
    const o = row as Record<string, unknown>;
    // Rows of one answer nearly always share a shape: the previous row's is tried first.
    const before = p.mark();
    let s = last >= 0 && p.follow(o, programs[last]!, 0) === programs[last]!.length ? last : -1;
    for (let t = 0; s < 0 && t < programs.length; t++) {
      if (t === last) continue;
      p.reset(before);
      if (p.follow(o, programs[t]!, 0) === programs[t]!.length) s = t;
    }
    if (s < 0) {
      if (programs.length === MAX_SHAPES) return null;
      p.reset(before);
      const program: Program = [];
      p.learn(o, program);
      s = programs.push(program) - 1;
    }
    rowShapes[r] = s;
    last = s;
  }
  return { shapes: programs.map((x) => JSON.stringify(x)), rowShapes, nums: p.nums.slice(0, p.n), strs: p.strs, others: p.others };
}

/** Where a row builder stands in the columns. */
interface Cursor {
  num: number;
  str: number;
  other: number;
}

type Builder = (nums: Float64Array, strs: string[], others: unknown[], c: Cursor) => Record<string, unknown>;

/**
 * The row builder of a shape: compiled into one object literal when the runtime allows code
 * generation (`--disallow-code-generation-from-strings` does not), else an interpreter of the
 * program. Both assign in the program's order, so the columns are read in the order they were written.
 */
function builderOf(program: Program, compile: boolean): Builder {
  try {
    if (!compile) throw new EvalError('code generation not asked for');
    let at = 0;
    const literal = (): string => {
      const parts: string[] = [];
      for (;;) {
        const k = program[at++]!;
        if (k === END) return `{${parts.join(',')}}`;
        const tag = program[at++] as number;
        // `"__proto__": v` in a literal sets the prototype; a computed key makes an own property.
        const key = k === '__proto__' ? '["__proto__"]' : JSON.stringify(k);
        const value =
          tag === NUM
            ? 'n[c.num++]'
            : tag === STR
              ? 's[c.str++]'
              : tag === TRUE
                ? 'true'
                : tag === FALSE
                  ? 'false'
                  : tag === NULL
                    ? 'null'
                    : tag === UNDEF
                      ? 'undefined'
                      : tag === OTHER
                        ? 'x[c.other++]'
                        : literal();
        parts.push(`${key}:${value}`);
      }
    };
    // eslint-disable-next-line @typescript-eslint/no-implied-eval -- the keys are JSON string literals, the values column reads
    return new Function('n', 's', 'x', 'c', `return ${literal()};`) as Builder;
  } catch {
    return (nums, strs, others, c) => interpret(program, { at: 0 }, nums, strs, others, c);
  }
}

function setKey(o: Record<string, unknown>, k: string, v: unknown): void {
  // An assignment to `__proto__` would set the prototype: a clone gives an own property.
  if (k === '__proto__') Object.defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
  else o[k] = v;
}

function interpret(
  program: Program,
  pos: { at: number },
  nums: Float64Array,
  strs: string[],
  others: unknown[],
  c: Cursor,
): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  for (;;) {
    const k = program[pos.at++]!;
    if (k === END) return o;
    const tag = program[pos.at++] as number;
    const v =
      tag === NUM
        ? nums[c.num++]
        : tag === STR
          ? strs[c.str++]
          : tag === TRUE
            ? true
            : tag === FALSE
              ? false
              : tag === NULL
                ? null
                : tag === UNDEF
                  ? undefined
                  : tag === OTHER
                    ? others[c.other++]
                    : interpret(program, pos, nums, strs, others, c);
    setKey(o, k as string, v);
  }
}

/** Row builders by shape, kept across answers (a database's answers have a handful of shapes). */
const builders = new Map<string, Builder>();
/**
 * Shapes given a compiled builder at most: past it (rows whose signal kinds vary in many
 * combinations) a new shape is interpreted, not compiled, so no answer pays a compilation per row.
 */
const MAX_BUILDERS = 1024;

function builderFor(shape: string): Builder {
  let b = builders.get(shape);
  if (b === undefined) {
    const program = JSON.parse(shape) as Program;
    if (builders.size >= MAX_BUILDERS) return builderOf(program, false);
    b = builderOf(program, true);
    builders.set(shape, b);
  }
  return b;
}

/**
 * The rows {@link packRows} packed, as new objects. `compile` false builds them without generated
 * code, as a runtime that refuses code generation does (tests).
 */
export function unpackRows<T>(p: PackedRows, compile = true): T[] {
  const out = new Array<T>(p.rowShapes.length);
  const made = p.shapes.map((shape) => (compile ? builderFor(shape) : builderOf(JSON.parse(shape) as Program, false)));
  const c: Cursor = { num: 0, str: 0, other: 0 };
  for (let r = 0; r < out.length; r++) out[r] = made[p.rowShapes[r]!]!(p.nums, p.strs, p.others, c) as T;
  return out;
}

/** What {@link unpackAnswer} reads and rewrites of a worker's answer. */
interface MaybePacked {
  items?: unknown[];
  itemsPacked?: PackedRows;
  hits?: unknown[];
  hitsPacked?: PackedRows;
}

/**
 * A query worker's answer with its rows packed (the rows of a retrieve's `items` or a search's
 * `hits`); any other answer as it is. The answer is only read.
 */
export function packAnswer<R>(answer: R): R {
  const a = answer as MaybePacked;
  if (a.items !== undefined && a.items.length > 0) {
    const p = packRows(a.items);
    return p === null ? answer : { ...answer, items: [], itemsPacked: p };
  }
  if (a.hits !== undefined && a.hits.length > 0) {
    const p = packRows(a.hits);
    return p === null ? answer : { ...answer, hits: [], hitsPacked: p };
  }
  return answer;
}

/** The answer {@link packAnswer} packed, its rows rebuilt in place (the answer is the receiver's own copy). */
export function unpackAnswer<R>(answer: R): R {
  const a = answer as MaybePacked;
  if (a.itemsPacked !== undefined) {
    a.items = unpackRows(a.itemsPacked);
    delete a.itemsPacked;
  } else if (a.hitsPacked !== undefined) {
    a.hits = unpackRows(a.hitsPacked);
    delete a.hitsPacked;
  }
  return answer;
}
