// GraphQL over HTTP. The common request (a JSON POST that asks for JSON) goes
// straight to the pipeline (the same one every transport runs through) without
// building WHATWG Request and Response objects for it, and its answer is written
// here by yoga's rules for application/json; anything else (GET, GraphiQL, SSE,
// other content types, batches) goes to yoga's full handler, which reads the
// request and hands it to the same pipeline.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ExecutionResult, GraphQLError } from 'graphql';
import { readCaller, trustOf, type Caller, type Trust } from '../access/caller.js';
import { KEYLESS_LIMITED, keylessWorkUnits, type RequestLimits } from '../access/rate-limit.js';
import { clientAddress } from '../observability/client-address.js';
import { noteErrorCodes, requestInfoOf, type RequestInfo } from '../observability/request.js';
import type { ClientTokens } from '../access/client-tokens.js';
import { responseTooLarge, textOver } from '../pipeline/guards/response-size.js';
import { namesPersistedQuery } from '../pipeline/persisted-operations.js';
import { isStreamRefusal, type Pipeline } from '../pipeline/pipeline.js';
import type { WrittenResult } from '../pipeline/plan.js';
import type { GraphQLServer } from '../pipeline/yoga.js';
import { judgeKey, type Upstream } from '../upstream/clients.js';

export interface GraphQLHttpOptions {
  /** Larger bodies are refused with 413 before they are parsed. */
  maxBodyBytes: number;
  /** An SSE response with more than this many bytes waiting to be sent is ended with SUBSCRIBER_TOO_SLOW. */
  maxSseBufferedBytes: number;
  /** GRAPHQL_MAX_RESPONSE_BYTES: the direct path checks the text it writes. */
  maxResponseBytes: number;
  /** MAX_DOCUMENT_BYTES: what a request without a credential may send is bounded by it. */
  maxDocumentBytes: number;
  /** false: no direct path, every request goes through yoga's handler (tests compare both). */
  direct?: boolean;
}

const LIMITED = Symbol('delivery-graph.sse-limited');

/**
 * Yoga writes an SSE stream as fast as its subscription yields, so a reader that
 * stops reading piles the stream up in this process's memory (the subscription's
 * own queue never fills). This bounds it: once more than `maxBytes` wait in the
 * socket's buffer, one last event says SUBSCRIBER_TOO_SLOW, the stream ends, and
 * the closing response ends the subscription. Installed once per response.
 */
function limitEventStream(res: ServerResponse, maxBytes: number): void {
  const marked = res as ServerResponse & { [LIMITED]?: true };
  if (marked[LIMITED]) return;
  marked[LIMITED] = true;
  const write = res.write.bind(res) as (chunk: unknown, ...rest: unknown[]) => boolean;
  let cut = false;
  res.write = ((chunk: unknown, ...rest: unknown[]) => {
    if (cut) return false;
    const ok = write(chunk, ...rest);
    if (res.writableLength > maxBytes) {
      cut = true;
      const error = {
        message: `subscriber too slow: more than ${maxBytes} bytes waiting to be sent`,
        extensions: { code: 'SUBSCRIBER_TOO_SLOW' },
      };
      write(`event: next\ndata: ${JSON.stringify({ errors: [error] })}\n\nevent: complete\ndata:\n\n`);
      const info = requestInfoOf(res.req);
      noteErrorCodes(info, [error]);
      if (info) info.result = 'error';
      res.end();
    }
    return ok;
  }) as ServerResponse['write'];
}

const ERRORS_MARK = Buffer.from('"errors":[');

/** The codes of the errors in a chunk of a stream of server-sent events, for its access-log line. */
function noteStreamErrors(info: RequestInfo, chunk: Uint8Array): void {
  const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  const at = bytes.indexOf(ERRORS_MARK);
  if (at < 0) return;
  const codes = bytes.toString('utf8', at).matchAll(/"code":"([A-Z_]+)"/g);
  noteErrorCodes(
    info,
    [...codes].map((match) => ({ extensions: { code: match[1] } })),
  );
}

function asksForEventStream(req: IncomingMessage): boolean {
  return /text\/event-stream/i.test(headerOf(req, 'accept') ?? '');
}

interface Params {
  query?: unknown;
  variables?: unknown;
  operationName?: unknown;
  extensions?: unknown;
}

type HttpMarks = { status?: number; spec?: boolean; headers?: Record<string, string> };

/** An answer without errors. */
const OK = Object.freeze({ status: 200, headers: undefined });

/**
 * The status and headers yoga gives an answer under application/json: the
 * highest `extensions.http.status` of its errors, spec-marked ones (parse and
 * validation errors) excepted, which GraphQL-over-HTTP answers 200 there; 500
 * for an unexpected error without data; else 200.
 */
function statusOf(result: ExecutionResult): { status: number; headers: Record<string, string> | undefined } {
  // The common answer: nothing to read.
  if (!result.errors?.length) return OK;
  let status = 0;
  let unexpected = false;
  const headers: Record<string, string> = {};
  for (const error of result.errors ?? []) {
    const http = error.extensions?.http as HttpMarks | undefined;
    if (http) {
      if (http.headers) Object.assign(headers, http.headers);
      if (!http.spec && http.status && http.status > status) status = http.status;
    } else if (error.extensions?.unexpected) unexpected = true;
  }
  return { status: status || (unexpected && !('data' in result) ? 500 : 200), headers };
}

/** The errors as a client sees them: without the marks only the server reads (http, unexpected). */
function withoutMarks(result: ExecutionResult): ExecutionResult {
  if (!result.errors?.some((error) => error.extensions?.http || error.extensions?.unexpected)) return result;
  const errors = result.errors.map((error) => {
    const { http: _http, unexpected: _unexpected, ...extensions } = error.extensions ?? {};
    const json = error.toJSON();
    return { ...json, extensions: Object.keys(extensions).length > 0 ? extensions : undefined };
  });
  return { ...result, errors: errors as unknown as GraphQLError[] };
}

class BodyTooLarge extends Error {}

/**
 * Reads a body of at most `limit` bytes. `raise`, when given, is asked once
 * when the body turns out longer (declared or as it comes), with reading
 * paused: the larger limit it answers (a key the upstream has just accepted),
 * or undefined to refuse the body.
 */
function readBody(req: IncomingMessage, limit: number, raise?: () => Promise<number | undefined>): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const refuse = () => {
      // Stop reading; the connection is closed once the 413 is written.
      req.off('data', onData);
      req.pause();
      reject(new BodyTooLarge());
    };
    /** Asks for a larger limit (once); reading stays paused meanwhile. */
    const askForMore = (then: () => void) => {
      const ask = raise;
      raise = undefined;
      if (!ask) return refuse();
      req.pause();
      ask().then(
        (raised) => {
          if (raised === undefined || raised <= limit) return refuse();
          limit = raised;
          then();
        },
        () => refuse(),
      );
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      chunks.push(chunk);
      if (size > limit) askForMore(() => (size > limit ? refuse() : req.resume()));
    };
    const start = () => {
      const declared = Number(req.headers['content-length']);
      if (Number.isFinite(declared) && declared > limit) return askForMore(start);
      req.on('data', onData);
      req.on('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)));
      req.on('error', reject);
      // Paused while a larger limit was asked for.
      req.resume();
    };
    start();
  });
}

function headerOf(req: IncomingMessage, name: string): string | null {
  const value = req.headers[name.toLowerCase()];
  return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value;
}

/** Only plain JSON POSTs that ask for JSON take the direct path. */
function isPlainJsonPost(req: IncomingMessage): boolean {
  if (req.method !== 'POST') return false;
  const type = req.headers['content-type'];
  if (!type || !/^application\/json\s*(;|$)/i.test(type)) return false;
  const accept = req.headers.accept;
  return !accept || accept === '*/*' || /^application\/json\s*(;|,|$)/i.test(accept);
}

export interface GraphQLHttpParts {
  yoga: GraphQLServer;
  pipeline: Pipeline;
  clientTokens: ClientTokens;
  limits: RequestLimits;
  /**
   * Asked about a key nobody has judged yet whose body is larger than a keyless one may be; without it, such a body is
   * refused.
   */
  upstream?: Upstream;
  /** TRUST_PROXY's hops, for the client address. */
  trustProxyHops: number;
}

/** Room for variables and extensions beside the query text in the body of a request without a credential. */
const KEYLESS_BODY_SLACK_BYTES = 64 * 1024;
/** How long a large body of a key nobody has judged waits for the upstream's verdict on the key. */
const JUDGE_KEY_MS = 3_000;
/**
 * How long a request refused before its body is read waits for its 429: a
 * client that loops on its refusals then sends two a second a connection, not
 * the thousands an immediate answer lets it (each a connection to accept and a
 * request to parse).
 */
const REFUSAL_PAUSE_MS = 500;

/**
 * The 429 for an address over its keyless budgets, after a pause: a client that loops on its refusals then sends two a
 * second a connection. Nothing of the request is read.
 */
function refuseKeyless(req: IncomingMessage, res: ServerResponse, wait: number): void {
  const errors = [{ message: KEYLESS_LIMITED, extensions: { code: 'RATE_LIMITED', retryAfterSeconds: wait } }];
  noteErrorCodes(requestInfoOf(req), errors);
  const text = JSON.stringify({ errors });
  const refuse = () => {
    if (res.destroyed) return;
    res.setHeader('connection', 'close');
    res
      .writeHead(429, {
        'content-type': 'application/json; charset=utf-8',
        'retry-after': String(wait),
        'content-length': Buffer.byteLength(text),
      })
      .end(text);
    req.resume();
  };
  const paused = setTimeout(refuse, REFUSAL_PAUSE_MS);
  res.once('close', () => clearTimeout(paused));
}

/**
 * Passes a response's body on as it comes: streams (SSE subscriptions) bounded by limitEventStream; an event stream's
 * end (and the codes of its errors) noted for the access log.
 */
async function passBody(
  req: IncomingMessage,
  res: ServerResponse,
  stream: ReadableStream<Uint8Array>,
  events: boolean,
): Promise<void> {
  const reader = stream.getReader();
  // Cancelling ends the subscription and gives back its slots (src/access/subscription-slots.ts). The stream is
  // cancelled itself: yoga's (a Node stream inside) cancels a reader only after its pending read, which waits
  // for the next ping (12 s). Where a locked stream cannot be, the reader is. A client gone while the
  // subscription started has closed already: its 'close' will not come again.
  const cancel = () =>
    void Promise.resolve()
      .then(() => stream.cancel())
      .catch(() => reader.cancel())
      .catch(() => undefined);
  const info = events ? requestInfoOf(req) : undefined;
  // Before the access log's own 'close' listener: a stream the server has not ended was closed by the client.
  if (info) res.prependOnceListener('close', () => (info.result ??= 'closed'));
  if (res.destroyed) cancel();
  else res.on('close', cancel);
  while (!res.writableEnded && !res.destroyed) {
    const { done, value } = await reader.read();
    if (done) {
      if (info) info.result ??= 'complete';
      break;
    }
    if (info) noteStreamErrors(info, value);
    res.write(value);
  }
  if (!res.writableEnded) res.end();
  else void reader.cancel().catch(() => undefined);
}

/**
 * The parameters of a plain JSON POST as the pipeline takes them; undefined for anything yoga's own checks would
 * refuse or read otherwise (not JSON, a batch, odd parameter types), which yoga's handler then reads.
 */
function plainParams(body: Buffer): Params | undefined {
  let params: Params;
  try {
    params = JSON.parse(body.toString('utf8')) as Params;
  } catch {
    return undefined;
  }
  if (!params || typeof params !== 'object' || Array.isArray(params)) return undefined;
  if (params.variables != null && (typeof params.variables !== 'object' || Array.isArray(params.variables)))
    return undefined;
  if (params.operationName != null && typeof params.operationName !== 'string') return undefined;
  if (params.query != null && typeof params.query !== 'string') return undefined;
  if (params.query == null && !namesPersistedQuery(params)) return undefined;
  if (params.extensions != null && (typeof params.extensions !== 'object' || Array.isArray(params.extensions)))
    return undefined;
  for (const name in params)
    if (name !== 'query' && name !== 'variables' && name !== 'operationName' && name !== 'extensions') return undefined;
  return params;
}

/**
 * A signal aborted if the client goes away before its answer is written (its reads stop), made only when a resolver
 * asks for it: a batch read does, a single read does not.
 */
function clientGone(res: ServerResponse): () => AbortSignal {
  let gone: AbortController | undefined;
  return () => {
    if (!gone) {
      const controller = (gone = new AbortController());
      if (res.destroyed && !res.writableFinished) controller.abort();
      else res.once('close', () => !res.writableFinished && controller.abort());
    }
    return gone.signal;
  };
}

/** Writes a result by yoga's rules for application/json: its status, its text within GRAPHQL_MAX_RESPONSE_BYTES. */
function writeResult(res: ServerResponse, result: WrittenResult, maxBytes: number): void {
  const { status, headers } = statusOf(result);
  let text: string;
  try {
    // graphql-jit hands back a serializer compiled for this operation's shape.
    text =
      result.stringify && !result.errors?.length
        ? compiledText(result, result.stringify)
        : JSON.stringify(withoutMarks(result));
  } catch (error) {
    // Longer than the longest string V8 can make: far over any limit.
    if (!(error instanceof RangeError && /string length/i.test(error.message))) throw error;
    text = JSON.stringify(responseTooLarge(maxBytes));
  }
  if (textOver(text, maxBytes)) text = JSON.stringify(responseTooLarge(maxBytes));
  // Encoded once, within the limit: its length is the header's, and the socket writes the bytes as they are
  // (a string would be joined to the head, then flattened and encoded again on the way out).
  const bytes = Buffer.from(text);
  const head = { 'content-type': 'application/json; charset=utf-8', 'content-length': bytes.length };
  res.writeHead(status, headers ? { ...headers, ...head } : head).end(bytes);
}

/** The answer to a body over the limit its caller's trust allows; the rest of it stays unread. */
function refuseBody(req: IncomingMessage, res: ServerResponse): void {
  // Answer, then close the connection.
  res.setHeader('connection', 'close');
  // yoga's code for the same refusal (a body it reads itself, e.g. application/graphql).
  noteErrorCodes(requestInfoOf(req), [{ extensions: { code: 'REQUEST_ENTITY_TOO_LARGE' } }]);
  res
    .writeHead(413, { 'content-type': 'application/json' })
    .end('{"errors":[{"message":"Request body too large.","extensions":{"code":"REQUEST_ENTITY_TOO_LARGE"}}]}');
  req.destroy();
}

const UNEXPECTED = '{"errors":[{"message":"Unexpected error.","extensions":{"code":"INTERNAL_SERVER_ERROR"}}]}';

/**
 * GraphQL over HTTP for one server: who is asking and what it has earned (its body's bound, its address's budgets),
 * then the direct path for a plain JSON POST, or yoga's handler for the rest.
 */
class GraphQLHttp {
  /**
   * A request without an accepted credential can only run what needs none, or is a key's first try: its body has no
   * use for more than a document and its variables until the upstream accepts the key.
   */
  readonly #keylessBodyBytes: number;

  constructor(
    readonly parts: GraphQLHttpParts,
    readonly options: GraphQLHttpOptions,
  ) {
    this.#keylessBodyBytes = Math.min(options.maxBodyBytes, options.maxDocumentBytes + KEYLESS_BODY_SLACK_BYTES);
  }

  /** Every request: the caller is read once, before any of the body (a client token's reading is remembered). */
  handle(req: IncomingMessage, res: ServerResponse): void {
    const caller = readCaller(headerOf(req, 'authorization'), this.parts.clientTokens);
    if (!(caller instanceof Promise)) return this.#admit(req, res, caller);
    caller.then(
      (read) => this.#admit(req, res, read),
      () => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' }).end(UNEXPECTED);
      },
    );
  }

  /**
   * Trust, as the pipeline decides it: anything but a client token this server made or a key the upstream accepted
   * (no Authorization, one that is not a Bearer credential, a refused or made-up key) is held to keyless bounds, and
   * its address's budgets (kept per address only for such callers) may refuse it before anything is read.
   */
  #admit(req: IncomingMessage, res: ServerResponse, caller: Caller): void {
    const { limits, trustProxyHops } = this.parts;
    const trust = trustOf(caller, limits.keys);
    if (trust === 'earned') return this.#serve(req, res, caller, trust, '');
    const address = clientAddress(req, trustProxyHops);
    const wait = limits.keylessWait(address);
    if (wait === 0) return this.#serve(req, res, caller, trust, address);
    if (trust !== 'trying' || caller.kind !== 'merchant') return refuseKeyless(req, res, wait);
    // A key nobody has judged yet is not refused for what other callers spent, nor before the upstream has judged it
    // (the try is one of its address's AUTH_FAILURES_PER_MINUTE).
    void this.#raiseForKey(caller.key, address, req)().then(
      () => {
        const now = trustOf(caller, limits.keys);
        if (now === 'earned') return this.#serve(req, res, caller, now, '');
        const own = limits.keylessWait(address, now);
        if (own > 0) return refuseKeyless(req, res, own);
        this.#serve(req, res, caller, now, address);
      },
      () => refuseKeyless(req, res, wait),
    );
  }

  /**
   * The full body limit for a key nobody has judged once the upstream accepts it (the address pays one of its
   * AUTH_FAILURES_PER_MINUTE tries, as a WebSocket's first key does); undefined otherwise.
   */
  #raiseForKey(key: string, address: string, req: IncomingMessage): () => Promise<number | undefined> {
    const { upstream, limits } = this.parts;
    return async () => {
      if (!upstream) return undefined;
      const gone = new AbortController();
      const onClose = () => gone.abort();
      req.once('close', onClose);
      try {
        const ask = () => judgeKey(upstream, key, AbortSignal.any([AbortSignal.timeout(JUDGE_KEY_MS), gone.signal]));
        const admission = await limits.admitConnection(key, address, ask);
        return admission.verdict === 'accepted' ? this.options.maxBodyBytes : undefined;
      } finally {
        req.off('close', onClose);
      }
    };
  }

  /** Reads the request (a body within what its trust allows) and runs it. */
  #serve(req: IncomingMessage, res: ServerResponse, caller: Caller, trust: Trust, address: string): void {
    if (res.destroyed) return;
    const { limits, yoga } = this.parts;
    // Streams go through viaYoga, whose writes limitEventStream can watch.
    const stream = asksForEventStream(req);
    // Yoga reads the bodies of the rest itself, up to GRAPHQL_MAX_BODY_BYTES: only for a caller who earned that.
    const bodiless = req.method === 'GET' || req.method === 'HEAD';
    if (!stream && !isPlainJsonPost(req) && (trust === 'earned' || bodiless)) return void yoga(req, res);
    const raise =
      trust === 'trying' && caller.kind === 'merchant' ? this.#raiseForKey(caller.key, address, req) : undefined;
    readBody(req, trust === 'earned' ? this.options.maxBodyBytes : this.#keylessBodyBytes, raise)
      .then(async (body) => {
        // The bytes read are work too (the operation's own is charged by the pipeline).
        if (trust !== 'earned') limits.chargeKeylessWork(address, keylessWorkUnits(0, body.length), trust);
        const direct = !stream && this.options.direct !== false && isPlainJsonPost(req);
        if (!direct || !(await this.#direct(req, res, body, caller))) await this.#viaYoga(req, res, body);
      })
      .catch((error: unknown) => {
        if (res.headersSent) return void res.destroy();
        if (error instanceof BodyTooLarge) return refuseBody(req, res);
        res.writeHead(500, { 'content-type': 'application/json' }).end(UNEXPECTED);
      });
  }

  /**
   * Runs a plain JSON POST through the pipeline and writes its answer; false when yoga's handler should read it
   * instead.
   */
  async #direct(req: IncomingMessage, res: ServerResponse, body: Buffer, caller: Caller): Promise<boolean> {
    const params = plainParams(body);
    if (!params) return false;
    const answer = await this.parts.pipeline.run({
      params,
      caller,
      method: 'POST',
      streams: false,
      req,
      signal: clientGone(res),
      checksText: true,
    });
    // A subscription asked for with `*/*` (or no accept) is answered with a stream, by yoga's handler; with
    // application/json, 406.
    if (
      answer.kind === 'invalid' &&
      answer.errors.some(isStreamRefusal) &&
      !/application\/json/i.test(headerOf(req, 'accept') ?? '')
    )
      return false;
    const result = (answer.kind === 'invalid' ? { errors: answer.errors } : answer.outcome) as WrittenResult;
    writeResult(res, result, this.options.maxResponseBytes);
    return true;
  }

  /** Hands the request to yoga's full handler, with the body already read. */
  async #viaYoga(req: IncomingMessage, res: ServerResponse, body: Buffer | undefined): Promise<void> {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
    }
    // The server context, { req }, as yoga's own node handler gives it: the pipeline finds the request record on it.
    const response = await this.parts.yoga.fetch(
      `http://${req.headers.host ?? 'localhost'}${req.url ?? '/graphql'}`,
      { method: req.method, headers, body: body && req.method !== 'GET' && req.method !== 'HEAD' ? body : undefined },
      { req },
    );
    const outgoing: Record<string, string> = {};
    response.headers.forEach((value, name) => (outgoing[name] = value));
    const events = /^text\/event-stream/i.test(response.headers.get('content-type') ?? '');
    if (events) limitEventStream(res, this.options.maxSseBufferedBytes);
    res.writeHead(response.status, outgoing);
    if (!response.body) return void res.end();
    await passBody(req, res, response.body, events);
  }
}

export function createGraphQLHttpHandler(
  parts: GraphQLHttpParts,
  options: GraphQLHttpOptions,
): (req: IncomingMessage, res: ServerResponse) => void {
  const http = new GraphQLHttp(parts, options);
  return (req, res) => http.handle(req, res);
}

/** A compiled plan's serializer writes data alone: the extensions, when there are any, go after it. */
function compiledText(result: ExecutionResult, stringify: (result: ExecutionResult) => string): string {
  if (!result.extensions) return stringify(result);
  // Some serializers (JSON.stringify, where graphql-jit could make none) would write them too: given without them.
  const { extensions, ...rest } = result;
  const text = stringify(rest);
  return text.endsWith('}') ? `${text.slice(0, -1)},"extensions":${JSON.stringify(extensions)}}` : text;
}
