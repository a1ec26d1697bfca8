// Where each request on a connection begins and ends, read as its bytes pass
// (front.ts feeds them on to the HTTP parser): so that every request, not only
// a connection's first, gets the header limit of its own path. A request's head
// is counted byte for byte as it arrives (blank lines before it, whitespace and
// line ends included) and its request line is read in linear time; the body is
// only skipped over, by the framing the HTTP parser itself found in the head
// (bodyFollows), so the two never disagree on where the next request starts.
import { METHODS } from 'node:http';

const CR = 0x0d;
const LF = 0x0a;
const SP = 0x20;
/** Longer than any method of METHODS: bytes that do not make one by then are not HTTP. */
const LONGEST_METHOD = 16;

/**
 * The bytes of a request line that spans several reads, copied into one buffer
 * that doubles as it fills: each byte is copied about twice at most, however
 * the line is cut (re-joining every piece on every read is quadratic).
 */
export class LineBuffer {
  private bytes: Buffer = Buffer.allocUnsafe(0);
  private length = 0;
  /** Bytes copied so far, growth included: the work done, for tests to count. */
  copied = 0;

  append(chunk: Buffer, start: number, end: number): void {
    const needed = this.length + (end - start);
    if (needed > this.bytes.length) {
      const grown = Buffer.allocUnsafe(Math.max(256, needed, this.bytes.length * 2));
      this.copied += this.bytes.copy(grown, 0, 0, this.length);
      this.bytes = grown;
    }
    this.copied += chunk.copy(this.bytes, this.length, start, end);
    this.length = needed;
  }

  get size(): number {
    return this.length;
  }

  /** The last byte appended, or undefined when empty. */
  get last(): number | undefined {
    return this.length > 0 ? this.bytes[this.length - 1] : undefined;
  }

  /** The bytes held (a view, valid until the next append), and empty again. */
  take(): Buffer {
    const held = this.bytes.subarray(0, this.length);
    this.bytes = Buffer.allocUnsafe(0);
    this.length = 0;
    return held;
  }
}

/** The path of a request line's origin-form target (no query), or undefined. */
export function pathOfLine(line: string): string | undefined {
  return /^[A-Z]+ (\/[^ ?]*)/.exec(line)?.[1];
}

/** What the next bytes of a scanned read are, up to `end`. */
export type Scan =
  /** Every byte was read; those from `feedEnd` on belong to an unfinished request line and are held here. */
  | { event: 'more'; feedEnd: number }
  /**
   * A request line ended before `end` (the bytes of it in this read, from `lineStart`, are not fed yet; `held`, its
   * earlier part, comes before them).
   */
  | { event: 'line'; end: number; lineStart: number; path: string | undefined; held: Buffer | undefined }
  /** The head ended before `end`: feed up to it, then call bodyFollows with what the parser made of it. */
  | { event: 'head'; end: number }
  /** The body ended before `end`: the next byte begins another request. */
  | { event: 'message'; end: number }
  /** The head passed its limit (431); nothing from here on is to be fed. */
  | { event: 'over'; limit: number }
  /** Not a request line: no method, or a line end without CR (400). */
  | { event: 'malformed'; reason: string };

/** How a body is framed, as the parser read the head's Content-Length and Transfer-Encoding. */
export type BodyFraming = { kind: 'none' } | { kind: 'length'; bytes: number } | { kind: 'chunked' };

type Phase =
  'blank' | 'line' | 'fields' | 'framing' | 'length' | 'chunk-size' | 'chunk-data' | 'chunk-end' | 'trailers';

export class RequestFraming {
  private phase: Phase = 'blank';
  /** Bytes of the current head so far, every byte counted. */
  private headBytes = 0;
  /** The head limit of the current request: the default until its path is known. */
  private limit: number;
  private readonly line = new LineBuffer();
  /** The method's bytes so far (at most LONGEST_METHOD), checked as they come. */
  private method = '';
  private methodDone = false;
  /** Bytes of the current header or trailer line before this read, and its first byte. */
  private fieldLineBytes = 0;
  private fieldLineFirst = -1;
  /** Body or chunk bytes still to skip. */
  private remaining = 0;
  /** The chunk-size line: its size so far, and whether its hex digits have ended. */
  private chunkSize = 0;
  private chunkDigitsDone = false;

  /**
   * `defaultLimit` bounds every head until its request line is read, and the
   * line itself; `limitFor` gives the limit of a path.
   */
  constructor(
    private readonly defaultLimit: number,
    private readonly limitFor: (path: string | undefined) => number,
  ) {
    this.limit = defaultLimit;
  }

  /** Whether the current request's head has begun (a byte of it arrived) and not ended: its deadline runs. */
  get inHead(): boolean {
    return (this.phase === 'blank' && this.headBytes > 0) || this.phase === 'line' || this.phase === 'fields';
  }

  /** Whether the connection is between requests: nothing of the next one has come. */
  get idle(): boolean {
    return this.phase === 'blank' && this.headBytes === 0;
  }

  /** The limit the current head is held to. */
  get headLimit(): number {
    return this.limit;
  }

  /** Reads `chunk` from `from` to its next event (or its end). */
  scan(chunk: Buffer, from: number): Scan {
    // Body phases hand on the position they reached; head phases end in an event.
    for (let at = from; ;) {
      let next: Scan | number;
      switch (this.phase) {
        case 'blank':
          return this.scanBlank(chunk, at);
        case 'line':
          return this.scanLine(chunk, at, at);
        case 'fields':
          return this.scanFields(chunk, at);
        case 'framing':
          throw new Error('bodyFollows must be called after a head');
        case 'length':
        case 'chunk-data':
          next = this.skip(chunk, at);
          break;
        case 'chunk-size':
        case 'chunk-end':
          next = this.scanChunkLine(chunk, at);
          break;
        case 'trailers':
          next = this.scanTrailers(chunk, at);
          break;
      }
      if (typeof next !== 'number') return next;
      if (next === chunk.length) return { event: 'more', feedEnd: next };
      at = next;
    }
  }

  /** After a head: how its body is framed (the parser's reading of it). */
  bodyFollows(framing: BodyFraming): void {
    if (this.phase !== 'framing') throw new Error('bodyFollows without a head');
    if (framing.kind === 'length' && framing.bytes > 0) {
      this.phase = 'length';
      this.remaining = framing.bytes;
    } else if (framing.kind === 'chunked') {
      this.startChunkLine('chunk-size');
    } else this.nextRequest();
  }

  private nextRequest(): void {
    this.phase = 'blank';
    this.headBytes = 0;
    this.limit = this.defaultLimit;
  }

  /**
   * Empty lines before a request line are allowed (RFC 9112, 2.2) and skipped, as the parser skips them; they count.
   */
  private scanBlank(chunk: Buffer, from: number): Scan {
    let at = from;
    while (at < chunk.length && (chunk[at] === CR || chunk[at] === LF)) at += 1;
    this.headBytes += at - from;
    if (this.headBytes > this.limit) return { event: 'over', limit: this.limit };
    if (at === chunk.length) return { event: 'more', feedEnd: at };
    this.phase = 'line';
    this.method = '';
    this.methodDone = false;
    return this.scanLine(chunk, at, at);
  }

  /**
   * The request line, from `start` in this read (`lineStart`: where it began in this read, or 0 when it began in an
   * earlier one).
   */
  private scanLine(chunk: Buffer, start: number, lineStart: number): Scan {
    const newline = chunk.indexOf(LF, start);
    const end = newline < 0 ? chunk.length : newline;
    if (!this.methodDone) {
      const bad = this.checkMethod(chunk, start, end);
      if (bad) return { event: 'malformed', reason: bad };
    }
    const lineBytes = this.line.size + (end - lineStart) + (newline < 0 ? 0 : 1);
    if (this.headBytes + lineBytes > this.limit) return { event: 'over', limit: this.limit };
    if (newline < 0) {
      // Held here until it ends: the parser is given a whole line, and the path is known before any header is.
      this.line.append(chunk, lineStart, chunk.length);
      return { event: 'more', feedEnd: lineStart };
    }
    const before = newline > lineStart ? chunk[newline - 1] : this.line.last;
    if (before !== CR) return { event: 'malformed', reason: 'a request line ending in LF without CR' };
    this.headBytes += lineBytes;
    const held = this.line.size > 0 ? this.line.take() : undefined;
    const text = held
      ? held.toString('latin1') + chunk.toString('latin1', lineStart, newline)
      : chunk.toString('latin1', lineStart, newline);
    const path = pathOfLine(text);
    this.limit = this.limitFor(path);
    this.phase = 'fields';
    this.fieldLineBytes = 0;
    this.fieldLineFirst = -1;
    return { event: 'line', end: newline + 1, lineStart, path, held };
  }

  /** Whether the bytes so far can begin a request line: a known method, or the start of one, then a space. */
  private checkMethod(chunk: Buffer, start: number, end: number): string | undefined {
    const space = chunk.indexOf(SP, start);
    const stop = Math.min(end, space < 0 || space > end ? end : space, start + LONGEST_METHOD - this.method.length);
    this.method += chunk.toString('latin1', start, stop);
    if (space >= 0 && space < end && stop === space) {
      this.methodDone = true;
      return METHODS.includes(this.method) ? undefined : 'not an HTTP method';
    }
    if (
      this.method.length >= LONGEST_METHOD ||
      !METHODS.some((known) => known.startsWith(this.method)) ||
      (end < chunk.length && stop === end)
    ) {
      return 'not an HTTP request line';
    }
    return undefined;
  }

  /** Header lines up to the empty one that ends the head, counted against the path's limit. */
  private scanFields(chunk: Buffer, from: number): Scan {
    const end = this.findEmptyLine(chunk, from);
    const upTo = end < 0 ? chunk.length : end;
    this.headBytes += upTo - from;
    if (this.headBytes > this.limit) return { event: 'over', limit: this.limit };
    if (end < 0) return { event: 'more', feedEnd: chunk.length };
    this.phase = 'framing';
    return { event: 'head', end };
  }

  /**
   * The position after the LF of the first empty line (nothing, or a lone CR,
   * before its LF) from `from`, or -1; keeps what it needs of an unfinished line.
   */
  private findEmptyLine(chunk: Buffer, from: number): number {
    let lineStart = from;
    for (let newline = chunk.indexOf(LF, from); newline >= 0; newline = chunk.indexOf(LF, lineStart)) {
      const length = this.fieldLineBytes + (newline - lineStart);
      const first = this.fieldLineBytes > 0 ? this.fieldLineFirst : chunk[lineStart];
      this.fieldLineBytes = 0;
      this.fieldLineFirst = -1;
      lineStart = newline + 1;
      if (length === 0 || (length === 1 && first === CR)) return lineStart;
    }
    if (lineStart < chunk.length) {
      if (this.fieldLineBytes === 0) this.fieldLineFirst = chunk[lineStart]!;
      this.fieldLineBytes += chunk.length - lineStart;
    }
    return -1;
  }

  /** Body bytes (a length, or a chunk's data). */
  private skip(chunk: Buffer, from: number): Scan | number {
    const taken = Math.min(this.remaining, chunk.length - from);
    this.remaining -= taken;
    const end = from + taken;
    if (this.remaining > 0) return end;
    if (this.phase === 'length') {
      this.nextRequest();
      return { event: 'message', end };
    }
    this.startChunkLine('chunk-end');
    return end;
  }

  private startChunkLine(phase: 'chunk-size' | 'chunk-end'): void {
    this.phase = phase;
    this.chunkSize = 0;
    this.chunkDigitsDone = false;
  }

  /** A chunk-size line (hex digits, then extensions), or the line end after a chunk's data. */
  private scanChunkLine(chunk: Buffer, from: number): number {
    const newline = chunk.indexOf(LF, from);
    const end = newline < 0 ? chunk.length : newline;
    if (this.phase === 'chunk-size') {
      for (let at = from; at < end && !this.chunkDigitsDone; at += 1) {
        const digit = hexValue(chunk[at]!);
        if (digit < 0) this.chunkDigitsDone = true;
        // The parser refuses sizes past 2^64; this only has to stay a number until it does.
        else this.chunkSize = Math.min(this.chunkSize * 16 + digit, Number.MAX_SAFE_INTEGER);
      }
    }
    if (newline < 0) return chunk.length;
    if (this.phase === 'chunk-end') this.startChunkLine('chunk-size');
    else if (this.chunkSize > 0) {
      this.phase = 'chunk-data';
      this.remaining = this.chunkSize;
    } else {
      // The last chunk: trailer lines up to an empty one.
      this.phase = 'trailers';
      this.fieldLineBytes = 0;
      this.fieldLineFirst = -1;
    }
    return newline + 1;
  }

  private scanTrailers(chunk: Buffer, from: number): Scan | number {
    const end = this.findEmptyLine(chunk, from);
    if (end < 0) return chunk.length;
    this.nextRequest();
    return { event: 'message', end };
  }
}

function hexValue(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  if (byte >= 0x61 && byte <= 0x66) return byte - 0x57;
  if (byte >= 0x41 && byte <= 0x46) return byte - 0x37;
  return -1;
}
