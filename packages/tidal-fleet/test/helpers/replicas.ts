import { spawn, type ChildProcess } from 'node:child_process';

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** A child process speaking a line protocol: commands on stdin, one answer line on stdout each. */
export class Replica {
  readonly child: ChildProcess;
  readonly #lines: string[] = [];
  readonly #waiting: ((line: string) => void)[] = [];
  #exited: Promise<number | null>;

  constructor(script: string, args: string[]) {
    this.child = spawn(process.execPath, [script, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
    let buffer = '';
    this.child.stdout!.on('data', (d: Buffer) => {
      buffer += d.toString('utf8');
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        const waiter = this.#waiting.shift();
        if (waiter) waiter(line);
        else this.#lines.push(line);
      }
    });
    running.add(this.child);
    this.#exited = new Promise((resolve) =>
      this.child.once('exit', (code) => {
        running.delete(this.child);
        resolve(code);
      }),
    );
  }

  /** The next line the child prints; rejects if it exits first or takes longer than `timeoutMs`. */
  next(timeoutMs = 20_000): Promise<string> {
    const queued = this.#lines.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no line from the replica within ${timeoutMs} ms`)), timeoutMs);
      const onLine = (line: string): void => {
        clearTimeout(timer);
        resolve(line);
      };
      this.#waiting.push(onLine);
      void this.#exited.then((code) => {
        const i = this.#waiting.indexOf(onLine);
        if (i < 0) return;
        this.#waiting.splice(i, 1);
        clearTimeout(timer);
        reject(new Error(`the replica exited (${code}) before printing a line`));
      });
    });
  }

  send(command: string): void {
    this.child.stdin!.write(`${command}\n`);
  }

  async ask(command: string): Promise<string> {
    this.send(command);
    return this.next();
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** SIGKILL and wait for the exit. */
  async kill(): Promise<void> {
    if (this.alive) this.child.kill('SIGKILL');
    await this.#exited;
  }
}
