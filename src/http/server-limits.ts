// Limits of the HTTP servers against clients that hold connections open or
// send oversized heads: Node's own deadlines (headers, whole request, idle
// keep-alive) and header limit per server, the 16 KiB bound of every request
// but webhooks checked on each parsed head where a server's parser takes
// webhook-sized heads, and an answer and a count for every request a parser
// refuses itself (431, 400, 408). The connection caps are the front's (front.ts).
import { readFileSync } from 'node:fs';
import {
  maxHeaderSize as defaultMaxHeaderSize,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { Socket } from 'node:net';

/** Room beside the webhook token in the header block: the request line and the other headers. */
export const HEADER_SLACK_BYTES = 16 * 1024;
/** Connections allowed when the file-descriptor limit cannot be read. */
const FALLBACK_MAX_CONNECTIONS = 10_000;
/** Headers Node keeps of one request (server.maxHeadersCount); it drops the rest. */
export const MAX_HEADERS_KEPT = 1_000;
/** How long an idle kept-alive connection stays open (longer than the usual load balancer's 60 s). */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

export interface ServerLimits {
  maxConnections: number | undefined;
  maxConnectionsPerAddress: number | undefined;
  webhookConnections: number | undefined;
  trustProxyHops: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  maxTokenBytes: number;
}

export interface ConnectionCaps {
  /** Over every listener. */
  maxConnections: number;
  /** Per socket peer address (IPv6: /64) on the main port; 0: none. */
  perAddress: number;
  /** Kept for webhooks (WEBHOOK_PORT's, or on a shared port the webhook path's). */
  webhookSlots: number;
}

/**
 * The connection caps, with their defaults: a quarter of the slots per address,
 * so that one address never takes them all (none behind proxies: the peer is
 * then a proxy, and a connection carries many clients' requests, so no header
 * can say whose it is); an eighth kept for webhooks, at most 64 (the upstream's
 * sender needs a few dozen at most).
 */
export function connectionCaps(limits: ServerLimits): ConnectionCaps {
  const maxConnections = limits.maxConnections ?? defaultMaxConnections();
  return {
    maxConnections,
    perAddress:
      limits.maxConnectionsPerAddress ?? (limits.trustProxyHops > 0 ? 0 : Math.max(1, Math.floor(maxConnections / 4))),
    webhookSlots: Math.min(
      Math.floor(maxConnections / 2),
      limits.webhookConnections ?? Math.min(64, Math.ceil(maxConnections / 8)),
    ),
  };
}

/** The head limit of every request but webhooks: Node's own (16 KiB unless --max-http-header-size says otherwise). */
export const DEFAULT_HEADER_BYTES = defaultMaxHeaderSize;

/** The head limit of a webhook request: the largest webhook token plus the rest of a request. */
export function webhookHeaderBytes(limits: ServerLimits): number {
  return limits.maxTokenBytes + HEADER_SLACK_BYTES;
}

/**
 * What a server must be created with: its parser's header limit, and deadlines
 * checked often enough to hold (Node checks them every 30 s by default).
 */
export function serverOptions(
  limits: ServerLimits,
  maxHeaderSize: number,
): { maxHeaderSize: number; connectionsCheckingInterval: number } {
  return {
    maxHeaderSize,
    connectionsCheckingInterval: Math.max(100, Math.min(1_000, Math.floor(limits.headersTimeoutMs / 4))),
  };
}

/**
 * 80 % of the process's soft file-descriptor limit (Linux: /proc/self/limits),
 * leaving room for the store, the upstream pool and Redis; a fallback elsewhere.
 */
export function defaultMaxConnections(): number {
  try {
    const limits = readFileSync('/proc/self/limits', 'utf8');
    const soft = /^Max open files\s+(\d+|unlimited)/m.exec(limits)?.[1];
    if (soft && soft !== 'unlimited') return Math.max(64, Math.floor(Number(soft) * 0.8));
  } catch {
    // not Linux
  }
  return FALLBACK_MAX_CONNECTIONS;
}

/**
 * The bytes of a parsed head as Node's parser counts them against its header
 * limit: the request target, and each header's name and value (without the
 * whitespace around it, which Node drops; it counts a value's trailing whitespace
 * as it parses).
 */
export function headBytes(req: IncomingMessage): number {
  let bytes = req.url?.length ?? 0;
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 1) bytes += raw[i]!.length;
  return bytes;
}

/**
 * Whether a parsed head is past `limit` (Node's parser refuses a head whose count reaches its limit): a request with
 * more headers than Node keeps is, since the ones it dropped were not counted here.
 */
export function headOver(req: IncomingMessage, limit: number): boolean {
  return req.rawHeaders.length >= 2 * MAX_HEADERS_KEPT || headBytes(req) >= limit;
}

const STATUS_OF_PARSER_ERROR: Record<string, [number, string]> = {
  HPE_HEADER_OVERFLOW: [431, 'Request Header Fields Too Large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'Request Timeout'],
};

/** The path of the request line (origin form) at the start of `raw`, or undefined when they do not start with one. */
export function pathOf(raw: Buffer | undefined): string | undefined {
  const line = raw?.subarray(0, 2048).toString('latin1').split('\r\n', 1)[0];
  return line ? /^[A-Z]+ (\/[^ ?]*)/.exec(line)?.[1] : undefined;
}

/** A refusal: its status, and a body that says what to do (by default, the status's). */
export interface Refusal {
  status: number;
  text: string;
  body?: { error: string; message: string };
}

/** What a refusal of a request that could not be read says, in the front door's { error, message } form. */
const REFUSAL_BODY: Record<number, { error: string; message: string }> = {
  400: {
    error: 'bad_request',
    message: 'The request could not be read as HTTP/1.1: check its request line and headers.',
  },
  408: {
    error: 'request_timeout',
    message: 'The request line and headers did not arrive in time: send them at once, then the body.',
  },
  431: {
    error: 'headers_too_large',
    message:
      'The request headers are too large: send fewer or shorter ones (a long cookie, or a token in the wrong header).',
  },
};

const bodyOf = (refusal: Refusal) => JSON.stringify(refusal.body ?? REFUSAL_BODY[refusal.status] ?? REFUSAL_BODY[400]);
const retries = (status: number) => status === 429 || status === 503;

/** Closes a connection with a refusal whose body says why, written straight to the socket. */
export function refuseConnection(socket: Socket, refusal: Refusal): void {
  // After a timeout Node may have stopped writing to the socket: it can only be closed.
  if (!socket.writable) return void socket.destroy();
  const body = bodyOf(refusal);
  const retry = retries(refusal.status) ? 'retry-after: 1\r\n' : '';
  socket.end(
    `HTTP/1.1 ${refusal.status} ${refusal.text}\r\nconnection: close\r\n${retry}content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  // What the client still sends is read and dropped: closing with it unread would reset the connection before the
  // refusal is read.
  socket.resume();
  // A client that never reads nor closes would keep the half-closed socket (and its descriptor): a second is enough.
  setTimeout(() => socket.destroy(), 1_000).unref();
}

/** A socket as node:http serves it: the answer being written now, until it is finished. */
interface ServedSocket extends Socket {
  _httpMessage?: ServerResponse | null;
}

/**
 * Runs a refusal once the answers to the requests read whole before it on the connection are written (at once when
 * there are none): written before them, it would be read as their answer. A request still being read when it is
 * refused (its body too slow, or malformed) is the one refused: the refusal is its answer, unless that answer has
 * begun, and then the connection can only be closed.
 */
export function afterAnswers(socket: Socket, refuse: () => void, own?: ServerResponse): void {
  const answering = (socket as ServedSocket)._httpMessage;
  // `own`: the refused request's own answer, which is never written (the refusal is).
  if (!answering || answering === own) return refuse();
  if (!answering.req.complete) return answering.headersSent ? void socket.destroy() : refuse();
  // node:http hands the socket to the next answer when one finishes, before this listener runs.
  answering.once('close', () => afterAnswers(socket, refuse, own));
}

/**
 * Applies Node's deadlines and header count, and answers the requests the HTTP
 * parser refuses itself: `onRefusal` hears each one (status, the path when the
 * refused bytes begin with its request line, why).
 */
export function applyServerLimits(
  server: Server,
  limits: ServerLimits,
  onRefusal: (status: number, path: string | undefined, reason: string) => void,
): void {
  server.headersTimeout = limits.headersTimeoutMs;
  server.requestTimeout = limits.requestTimeoutMs;
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  server.maxHeadersCount = MAX_HEADERS_KEPT;
  const refused = new WeakSet<Socket>();
  server.on('clientError', (error: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Socket) => {
    const [status, text] = STATUS_OF_PARSER_ERROR[error.code ?? ''] ?? [400, 'Bad Request'];
    // A client that reset the connection sent no request to refuse.
    if (error.code === 'ECONNRESET') return void socket.destroy();
    // Refused already (the parser refuses every later read, the client's end included): once the refusal is written,
    // the connection is only closing; until then it waits for the answers before it.
    if (refused.has(socket)) return void (socket.writableEnded && socket.destroySoon());
    refused.add(socket);
    onRefusal(status, pathOf(error.rawPacket), error.code ?? error.message);
    afterAnswers(socket, () => refuseConnection(socket, { status, text }));
  });
}
