// The main thread's side of the SQLite writer thread (sqlite-writer.ts): one thread per store, requests by id,
// answered in order once the transaction that held them has committed; an idle thread is kept for the next store.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { MessageChannel, Worker, type WorkerOptions } from 'node:worker_threads';
import type { Logger } from '../logger.js';
import type { WriterArgs, WriterData, WriterError, WriterOps, WriterReply, WriterRequest } from './sqlite-writer.js';

/** An error from the writer thread, as it was thrown there (a SqliteError keeps its code). */
export function writerError({ name, message, code }: WriterError): Error {
  return Object.assign(new Error(message), { name, ...(code ? { code } : {}) });
}

/** The writer's source as one CommonJS bundle, built once per process (see startWriterThread). */
let writerBundle: string | undefined;

/**
 * Starts the writer thread from the compiled file next to this one (node
 * dist/main.js). When this module runs as TypeScript (tsx: tests, npm start)
 * there is no compiled file, and a thread started through tsx's loader takes
 * half a second or more: esbuild (tsx's own compiler) bundles the writer's
 * source once, and each thread runs that bundle, requiring better-sqlite3 from here.
 */
function startWriterThread(options: WorkerOptions): Worker {
  if (!import.meta.url.endsWith('.ts')) return new Worker(new URL('./sqlite-writer.js', import.meta.url), options);
  const require = createRequire(import.meta.url);
  if (!writerBundle) {
    const esbuild = require('esbuild') as typeof import('esbuild');
    const entry = fileURLToPath(new URL('./sqlite-writer.ts', import.meta.url));
    const built = esbuild.buildSync({
      entryPoints: [entry],
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      external: ['better-sqlite3'],
      write: false,
    });
    writerBundle = built.outputFiles[0]!.text;
  }
  const source = `((require) => {\n${writerBundle}\n})(require('node:module').createRequire(${JSON.stringify(import.meta.url)}));`;
  return new Worker(source, { ...options, eval: true });
}

/** The main thread's side of a writer thread: requests by id, answered in order. */
export class WriterThread {
  /**
   * A thread whose store closed, kept (idle, not holding the process) for the
   * next store this process opens: starting one costs tens of ms, and a test
   * opens hundreds of stores. At most one is kept.
   */
  static #spare: WriterThread | undefined;

  /** The spare thread, or a new one. */
  static take(logger: Logger | undefined): WriterThread {
    const spare = WriterThread.#spare;
    WriterThread.#spare = undefined;
    return spare && !spare.#stopped ? spare : new WriterThread(logger);
  }

  readonly worker: Worker;
  readonly #port;
  readonly #waiting = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
  #nextId = 1;
  /** Set once the thread is gone: every request from then on fails with it. */
  #stopped: Error | undefined;
  #ending = false;

  private constructor(logger: Logger | undefined) {
    const { port1, port2 } = new MessageChannel();
    const data: WriterData = { port: port2 };
    // No flags from this process (--import tsx, --input-type…): the thread needs none.
    this.worker = startWriterThread({ workerData: data, transferList: [port2], execArgv: [] });
    this.#port = port1;
    port1.on('message', (reply: WriterReply) => {
      const waiting = this.#waiting.get(reply.id);
      if (!waiting) return;
      this.#waiting.delete(reply.id);
      if ('error' in reply) waiting.reject(writerError(reply.error));
      else waiting.resolve(reply.value);
      if (this.#waiting.size === 0) this.#holdProcess(false);
    });
    this.worker.on('error', (error) => {
      if (!this.#ending) logger?.error({ err: error }, 'the SQLite writer thread failed');
      this.#stop(`it failed: ${error.message}`);
    });
    this.worker.on('exit', (code) => this.#stop(`it exited with code ${code}`));
    this.#holdProcess(false);
  }

  /** Sends a request; resolves with its answer once the transaction that held it has committed. */
  call<Op extends keyof WriterOps>(op: Op, ...args: WriterArgs<Op>): Promise<ReturnType<WriterOps[Op]>> {
    if (this.#stopped) return Promise.reject(this.#stopped);
    const id = this.#nextId++;
    const request: WriterRequest = { id, op, now: Date.now(), args };
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { resolve: resolve as (value: unknown) => void, reject });
      if (this.#waiting.size === 1) this.#holdProcess(true);
      try {
        this.#port.postMessage(request);
      } catch (error) {
        // Arguments that cannot be copied to the thread: nothing was sent.
        this.#waiting.delete(id);
        if (this.#waiting.size === 0) this.#holdProcess(false);
        throw error;
      }
    });
  }

  /** Its store closed: kept as the spare when there is none, ended otherwise. */
  async release(): Promise<void> {
    if (!this.#stopped && !WriterThread.#spare) {
      WriterThread.#spare = this;
      return;
    }
    this.#ending = true;
    await this.worker.terminate();
  }

  #stop(reason: string): void {
    if (this.#stopped) return;
    this.#stopped = new Error(
      `The SQLite writer thread stopped (${reason}); nothing more can be written to the store.`,
    );
    for (const waiting of this.#waiting.values()) waiting.reject(this.#stopped);
    this.#waiting.clear();
    this.#port.close();
  }

  /** A request waiting for its answer keeps the process alive; an idle thread does not. */
  #holdProcess(hold: boolean): void {
    if (hold) {
      this.worker.ref();
      this.#port.ref();
    } else {
      this.worker.unref();
      this.#port.unref();
    }
  }
}
