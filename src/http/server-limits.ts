// Limits of the HTTP servers against clients that hold connections open or
// send oversized headers: deadlines for headers and for whole requests, Node's
// 16 KiB header limit on every request but webhooks (raised there to fit the
// largest webhook token: the front counts each head against its path's limit),
// and a count and a log line for every request a server itself refuses (431,
// 400, 408). The connection caps are the front's (front.ts).
import { readFileSync } from 'node:fs';
import { maxHeaderSize as defaultMaxHeaderSize, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { pathOfLine } from './request-framing.js';

/** Room beside the webhook token in the header block: the request line and the other headers. */
export const HEADER_SLACK_BYTES = 16 * 1024;
/** Connections allowed when the file-descriptor limit cannot be read. */
const FALLBACK_MAX_CONNECTIONS = 10_000;

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
 * What a server must be created with: a parser header limit above the largest
 * head the front lets through to it (the front counts every byte, the parser
 * fewer: the front refuses first, with the path known), and deadlines checked
 * often enough to hold (Node checks them every 30 s by default).
 */
export function serverOptions(
  limits: ServerLimits,
  largestHead: number,
): { maxHeaderSize: number; connectionsCheckingInterval: number } {
  return {
    maxHeaderSize: largestHead + 1024,
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

const STATUS_OF_PARSER_ERROR: Record<string, [number, string]> = {
  HPE_HEADER_OVERFLOW: [431, 'Request Header Fields Too Large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'Request Timeout'],
};

/**
 * The path of a request line (origin form) at the start of `raw`, or undefined when the bytes do not start with one.
 */
export function pathOf(raw: Buffer | undefined): string | undefined {
  const line = raw?.subarray(0, 2048).toString('latin1').split('\r\n', 1)[0];
  return line ? pathOfLine(line) : undefined;
}

/** A refusal written straight to a socket: its status, and a body that says what to do (by default, the status's). */
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

/** Closes a connection with a refusal whose body says why. */
export function refuseConnection(socket: Socket, refusal: Refusal): void {
  // After a timeout Node has already stopped writing to the socket: it can only be closed.
  if (!socket.writable) return void socket.destroy();
  const body = JSON.stringify(refusal.body ?? REFUSAL_BODY[refusal.status] ?? REFUSAL_BODY[400]);
  const retry = refusal.status === 429 || refusal.status === 503 ? 'retry-after: 1\r\n' : '';
  socket.end(
    `HTTP/1.1 ${refusal.status} ${refusal.text}\r\nconnection: close\r\n${retry}content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  // What the client still sends is read and dropped: closing with it unread would reset the connection before the
  // refusal is read.
  socket.resume();
  // A client that never reads nor closes would keep the half-closed socket (and its descriptor): a second is enough.
  setTimeout(() => socket.destroy(), 1_000).unref();
}

/**
 * Applies the deadlines, and answers the requests the HTTP parser refuses itself:
 * `onRefusal` hears each one (status, the request's path when known, why).
 * `headOf` is the front's view of the connection's current request.
 */
export function applyServerLimits(
  server: Server,
  limits: ServerLimits,
  onRefusal: (status: number, path: string | undefined, reason: string) => void,
  headOf: (
    socket: Socket,
  ) => { path: string | undefined; refused: boolean; whenAnswered(refusal: () => void): void } | undefined,
): void {
  server.headersTimeout = limits.headersTimeoutMs;
  server.requestTimeout = limits.requestTimeoutMs;
  const refused = new WeakSet<Socket>();
  server.on('clientError', (error: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Socket) => {
    const [status, text] = STATUS_OF_PARSER_ERROR[error.code ?? ''] ?? [400, 'Bad Request'];
    // A client that reset the connection sent no request to refuse; one already refused is only closing.
    if (error.code === 'ECONNRESET' || refused.has(socket)) return void socket.destroy();
    refused.add(socket);
    const head = headOf(socket);
    // The front refused it first (its deadline and the parser's run side by side): one refusal, already counted and
    // answered.
    if (head?.refused) return;
    onRefusal(status, head?.path ?? pathOf(error.rawPacket), error.code ?? error.message);
    const refuse = () => refuseConnection(socket, { status, text });
    if (head) head.whenAnswered(refuse);
    else refuse();
  });
}
