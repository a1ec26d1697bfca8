// One upstream request's answer through undici's dispatch API (a handler of its
// own, not request()'s stream and promises), bounded in size as it is read.
import type { Dispatcher } from 'undici';
import { Flight } from './shared-reads.js';

export interface RawResponse {
  status: number;
  /** Its Retry-After header (the first, if repeated), the one header read from an answer. */
  retryAfter: string | undefined;
  text: string;
}

export class ResponseTooLarge extends Error {}

/**
 * One request's answer, read into memory as undici hands it over (its dispatch
 * API: no Readable stream, no promise per body), refused past `limit` bytes: at
 * once when its Content-Length says so (undici fails a body that runs past its
 * Content-Length), chunk by chunk when it has none. Settles `resolve` once with
 * the whole answer, or `reject` with undici's error or ResponseTooLarge.
 */
export class Exchange implements Dispatcher.DispatchHandler {
  #status = 0;
  #retryAfter: string | undefined;
  #chunks: Buffer[] = [];
  #size = 0;
  /** undici's way to stop the request, once it has a connection. */
  #abort: ((error?: Error) => void) | undefined;
  /** Asked to stop before undici handed over its abort: done as soon as it does. */
  #stopped: Error | undefined;
  #stopWatching: (() => void) | undefined;

  constructor(
    readonly limit: number,
    readonly resolve: (response: RawResponse) => void,
    readonly reject: (error: unknown) => void,
  ) {}

  /** Stops the request when `signal` aborts (a flight's time budget, or every caller leaving). */
  watch(signal: AbortSignal | Flight): void {
    const stop = () => this.#stop(new RequestAborted());
    if (signal instanceof Flight) {
      if (signal.aborted) return stop();
      this.#stopWatching = signal.onAbort(stop);
    } else {
      if (signal.aborted) return stop();
      signal.addEventListener('abort', stop, { once: true });
      this.#stopWatching = () => signal.removeEventListener('abort', stop);
    }
  }

  #stop(error: Error): void {
    if (this.#abort) this.#abort(error);
    else this.#stopped ??= error;
  }

  onConnect(abort: (error?: Error) => void): void {
    if (this.#stopped) return abort(this.#stopped);
    this.#abort = abort;
  }

  onHeaders(status: number, rawHeaders: Buffer[]): boolean {
    // An informational answer (100 Continue): the real one follows.
    if (status < 200) return true;
    this.#status = status;
    // Only a refusal's wait is read (a 2xx has nothing to say there).
    if (status >= 300) this.#retryAfter = headerValue(rawHeaders, 'retry-after');
    const length = headerValue(rawHeaders, 'content-length');
    if (length !== undefined && length !== '' && Number(length) > this.limit) this.#stop(new ResponseTooLarge());
    return true;
  }

  onData(chunk: Buffer): boolean {
    this.#size += chunk.length;
    if (this.#size > this.limit) {
      this.#stop(new ResponseTooLarge());
      return false;
    }
    this.#chunks.push(chunk);
    return true;
  }

  onComplete(): void {
    this.#stopWatching?.();
    const chunks = this.#chunks;
    const text = chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks, this.#size).toString('utf8');
    this.resolve({ status: this.#status, retryAfter: this.#retryAfter, text });
  }

  onError(error: Error): void {
    this.#stopWatching?.();
    this.reject(error);
  }
}

/** The request was stopped by its flight or signal (the caller reads why from the flight). */
class RequestAborted extends Error {
  readonly code = 'UND_ERR_ABORTED';
  constructor() {
    super('Request aborted');
  }
}

/**
 * One header of an answer's raw list (name, value, name, value…), the first if it is repeated; undefined when absent.
 */
function headerValue(rawHeaders: Buffer[], name: string): string | undefined {
  for (let index = 0; index + 1 < rawHeaders.length; index += 2) {
    const raw = rawHeaders[index]!;
    if (raw.length === name.length && raw.toString('latin1').toLowerCase() === name)
      return rawHeaders[index + 1]!.toString('latin1');
  }
  return undefined;
}
