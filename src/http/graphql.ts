// GraphQL over HTTP. The common request (a JSON POST that asks for JSON) goes
// straight to the pipeline (the same one every transport runs through) without
// building WHATWG Request and Response objects for it, and its answer is written
// here by yoga's rules for application/json; anything else (GET, GraphiQL, SSE,
// other content types, batches) goes to yoga's full handler, which reads the
// request and hands it to the same pipeline.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ExecutionResult, GraphQLError } from 'graphql';
import { readCaller } from '../access/caller.js';
import { KEYLESS_LIMITED, type RequestLimits } from '../access/rate-limit.js';
import { clientAddress } from '../observability/client-address.js';
import { noteErrorCodes, requestInfoOf } from '../observability/request.js';
import type { ClientTokens } from '../access/client-tokens.js';
import { responseTooLarge } from '../pipeline/guards/response-size.js';
import { namesPersistedQuery } from '../pipeline/persisted-operations.js';
import { isStreamRefusal, type Pipeline } from '../pipeline/pipeline.js';
import type { WrittenResult } from '../pipeline/plan.js';
import type { GraphQLServer } from '../pipeline/yoga.js';

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
      const error = { message: `subscriber too slow: more than ${maxBytes} bytes waiting to be sent`, extensions: { code: 'SUBSCRIBER_TOO_SLOW' } };
      write(`event: next\ndata: ${JSON.stringify({ errors: [error] })}\n\nevent: complete\ndata:\n\n`);
      res.end();
    }
    return ok;
  }) as ServerResponse['write'];
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

/**
 * The status and headers yoga gives an answer under application/json: the
 * highest `extensions.http.status` of its errors, spec-marked ones (parse and
 * validation errors) excepted, which GraphQL-over-HTTP answers 200 there; 500
 * for an unexpected error without data; else 200.
 */
function statusOf(result: ExecutionResult): { status: number; headers: Record<string, string> } {
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

function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit) return reject(new BodyTooLarge());
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        // Stop reading; the connection is closed once the 413 is written.
        req.off('data', onData);
        req.pause();
        reject(new BodyTooLarge());
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.on('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)));
    req.on('error', reject);
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
  /** TRUST_PROXY's hops, for the client address. */
  trustProxyHops: number;
}

/** Room for variables and extensions beside the query text in the body of a request without a credential. */
const KEYLESS_BODY_SLACK_BYTES = 64 * 1024;

export function createGraphQLHttpHandler({ yoga, pipeline, clientTokens, limits, trustProxyHops }: GraphQLHttpParts, options: GraphQLHttpOptions) {
  // A request without a credential can only run what needs none: its body has no use for more than a document and its variables.
  const keylessBodyBytes = Math.min(options.maxBodyBytes, options.maxDocumentBytes + KEYLESS_BODY_SLACK_BYTES);
  /** Hands the request to yoga's full handler, with the body already read. */
  const viaYoga = async (req: IncomingMessage, res: ServerResponse, body: Buffer | undefined): Promise<void> => {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
    }
    // The server context, { req }, as yoga's own node handler gives it: the pipeline finds the request record on it.
    const response = await yoga.fetch(
      `http://${req.headers.host ?? 'localhost'}${req.url ?? '/graphql'}`,
      { method: req.method, headers, body: body && req.method !== 'GET' && req.method !== 'HEAD' ? body : undefined },
      { req },
    );
    const outgoing: Record<string, string> = {};
    response.headers.forEach((value, name) => (outgoing[name] = value));
    if (/^text\/event-stream/i.test(response.headers.get('content-type') ?? '')) limitEventStream(res, options.maxSseBufferedBytes);
    res.writeHead(response.status, outgoing);
    if (!response.body) return void res.end();
    // Streams (SSE subscriptions) are passed on as they come (bounded by limitEventStream).
    const reader = response.body.getReader();
    res.on('close', () => void reader.cancel().catch(() => undefined));
    while (!res.writableEnded) {
      const { done, value } = await reader.read();
      if (done) break;
      res.write(value);
    }
    if (!res.writableEnded) res.end();
    else void reader.cancel().catch(() => undefined);
  };

  /** Runs a plain JSON POST through the pipeline and writes its answer; false when yoga's handler should read it instead. */
  const direct = async (req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<boolean> => {
    let params: Params;
    try {
      params = JSON.parse(body.toString('utf8')) as Params;
    } catch {
      return false;
    }
    // Anything yoga's own checks would refuse (a batch, odd parameter types) is left to them.
    if (!params || typeof params !== 'object' || Array.isArray(params)) return false;
    if (params.variables != null && (typeof params.variables !== 'object' || Array.isArray(params.variables))) return false;
    if (params.operationName != null && typeof params.operationName !== 'string') return false;
    if (params.query != null && typeof params.query !== 'string') return false;
    if (params.query == null && !namesPersistedQuery(params)) return false;
    if (params.extensions != null && (typeof params.extensions !== 'object' || Array.isArray(params.extensions))) return false;
    for (const name in params) if (name !== 'query' && name !== 'variables' && name !== 'operationName' && name !== 'extensions') return false;

    // Aborted if the client goes away before its answer is written: its reads stop.
    // Made only when a resolver asks for it (a batch read does; a single read does not).
    let gone: AbortController | undefined;
    const signal = () => {
      if (!gone) {
        gone = new AbortController();
        const controller = gone;
        if (res.destroyed && !res.writableFinished) controller.abort();
        else res.once('close', () => !res.writableFinished && controller.abort());
      }
      return gone.signal;
    };
    const caller = await readCaller(headerOf(req, 'authorization'), clientTokens);
    const answer = await pipeline.run({ params, caller, method: 'POST', streams: false, req, signal, checksText: true });
    // A subscription asked for with `*/*` (or no accept) is answered with a stream, by yoga's handler; with application/json, 406.
    if (answer.kind === 'invalid' && answer.errors.some(isStreamRefusal) && !/application\/json/i.test(headerOf(req, 'accept') ?? '')) return false;
    const result = (answer.kind === 'invalid' ? { errors: answer.errors } : answer.outcome) as WrittenResult;
    const { status, headers } = statusOf(result);
    const maxBytes = options.maxResponseBytes;
    let text: string;
    try {
      // graphql-jit hands back a serializer compiled for this operation's shape.
      text = result.stringify && !result.errors?.length ? result.stringify(result) : JSON.stringify(withoutMarks(result));
    } catch (error) {
      // Longer than the longest string V8 can make: far over any limit.
      if (!(error instanceof RangeError && /string length/i.test(error.message))) throw error;
      text = JSON.stringify(responseTooLarge(maxBytes));
    }
    // The length the header needs anyway is the one the limit is checked on.
    let bytes = Buffer.byteLength(text);
    if (bytes > maxBytes) {
      text = JSON.stringify(responseTooLarge(maxBytes));
      bytes = Buffer.byteLength(text);
    }
    res.writeHead(status, { ...headers, 'content-type': 'application/json; charset=utf-8', 'content-length': bytes }).end(text);
    return true;
  };

  return (req: IncomingMessage, res: ServerResponse): void => {
    const keyless = !req.headers.authorization;
    if (keyless) {
      // An address whose requests without a credential were refused too often this minute gets nothing read.
      const wait = limits.keylessWait(clientAddress(req, trustProxyHops));
      if (wait > 0) {
        const errors = [{ message: KEYLESS_LIMITED, extensions: { code: 'RATE_LIMITED', retryAfterSeconds: wait } }];
        noteErrorCodes(requestInfoOf(req), errors);
        const text = JSON.stringify({ errors });
        res.setHeader('connection', 'close');
        res.writeHead(429, { 'content-type': 'application/json; charset=utf-8', 'retry-after': String(wait), 'content-length': Buffer.byteLength(text) }).end(text);
        return void req.resume();
      }
    }
    // Streams go through viaYoga, whose writes limitEventStream can watch.
    const stream = asksForEventStream(req);
    if (!stream && !isPlainJsonPost(req)) return void yoga(req, res);
    readBody(req, keyless ? keylessBodyBytes : options.maxBodyBytes)
      .then(async (body) => {
        if (stream || options.direct === false || !(await direct(req, res, body))) await viaYoga(req, res, body);
      })
      .catch((error: unknown) => {
        if (res.headersSent) return void res.destroy();
        if (error instanceof BodyTooLarge) {
          // The rest of the body stays unread: answer, then close the connection.
          res.setHeader('connection', 'close');
          // yoga's code for the same refusal (a body it reads itself, e.g. application/graphql).
          noteErrorCodes(requestInfoOf(req), [{ extensions: { code: 'REQUEST_ENTITY_TOO_LARGE' } }]);
          res.writeHead(413, { 'content-type': 'application/json' }).end('{"errors":[{"message":"Request body too large.","extensions":{"code":"REQUEST_ENTITY_TOO_LARGE"}}]}');
          return void req.destroy();
        }
        res.writeHead(500, { 'content-type': 'application/json' }).end('{"errors":[{"message":"Unexpected error.","extensions":{"code":"INTERNAL_SERVER_ERROR"}}]}');
      });
  };
}
