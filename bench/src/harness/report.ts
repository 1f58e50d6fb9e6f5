/**
 * What a suite prints and writes. It starts with the machine header; tables are printed as
 * markdown as they are made (so a long run shows its results as it goes) and kept; `finish`
 * writes everything as one JSON document to `--json FILE` when the flag was given.
 */

import fs from 'node:fs';
import path from 'node:path';
import { describeHeader, header, type Header } from './machine.js';
import { markdownTable } from './stats.js';

export interface ReportTable {
  title: string;
  header: string[];
  rows: string[][];
}

export class Report {
  readonly header: Header = header();
  private readonly tables: ReportTable[] = [];
  private readonly data: Record<string, unknown> = {};
  private readonly started = Date.now();

  /**
   * @param suite the suite's name (`query`, `write`, ...)
   * @param options the parsed flags: `json` is where `finish` writes, the rest goes into the JSON as `config`
   */
  constructor(
    readonly suite: string,
    private readonly options: { readonly json: string | undefined; readonly argv: readonly string[] } & Record<string, unknown>,
  ) {
    const args = options.argv.length ? ` ${options.argv.join(' ')}` : '';
    this.line(`# ${suite}: \`npm run bench -- --suite ${suite}${args}\``);
    this.line();
    this.line(`Machine: ${describeHeader(this.header)}.`);
    this.line();
  }

  private heading = '';

  /** A line of markdown on stdout; a heading (`#`, `**...**`) becomes the title of the tables after it. */
  line(text = ''): void {
    for (const l of text.split('\n')) {
      const h = /^#+\s+(.*)$|^\*\*(.*)\*\*$/.exec(l);
      if (h) this.heading = (h[1] ?? h[2] ?? '').trim();
    }
    process.stdout.write(`${text}\n`);
  }

  /** Renders a markdown table and keeps it for the JSON (under the last heading); the caller prints it. */
  markdown(head: readonly string[], rows: readonly (readonly string[])[]): string {
    this.tables.push({ title: this.heading, header: [...head], rows: rows.map((r) => [...r]) });
    return markdownTable(head, rows);
  }

  /** Prints a markdown table under a bold title and keeps it for the JSON. */
  table(title: string, head: readonly string[], rows: readonly (readonly string[])[]): void {
    if (title) this.line(`**${title}**`);
    if (title) this.line();
    this.line(this.markdown(head, rows));
    this.line();
  }

  /** Raw results under `key` in the JSON (numbers rather than their rendering). */
  set(key: string, value: unknown): void {
    this.data[key] = value;
  }

  /** Writes the JSON when `--json FILE` was given; returns the file written, if any. */
  finish(): string | undefined {
    const file = this.options.json;
    if (file === undefined) return undefined;
    const { json: _json, argv, ...config } = this.options;
    const doc = {
      suite: this.suite,
      argv,
      header: this.header,
      config,
      totalMs: Date.now() - this.started,
      tables: this.tables,
      results: this.data,
    };
    fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
    fs.writeFileSync(file, `${JSON.stringify(doc, null, 2)}\n`);
    process.stderr.write(`results written to ${file}\n`);
    return file;
  }
}
