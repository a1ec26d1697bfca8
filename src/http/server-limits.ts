// Limits of the HTTP servers against clients that hold connections open or
// send oversized headers: deadlines for headers and for whole requests, Node's
// 16 KiB header limit everywhere but on webhook connections (raised there to fit
// the largest webhook token), and a count and a log line for every request a
// server itself refuses (431, 400, 408). The connection cap is the front's (front.ts).
import { readFileSync } from 'node:fs';
import { maxHeaderSize as defaultMaxHeaderSize, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';

/** Room beside the webhook token in the header block: the request line and the other headers. */
export const HEADER_SLACK_BYTES = 16 * 1024;
/** Connections allowed when the file-descriptor limit cannot be read. */
const FALLBACK_MAX_CONNECTIONS = 10_000;

export interface ServerLimits {
  maxConnections: number | undefined;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  maxTokenBytes: number;
}

/** The header limit of every connection but webhook ones: Node's own (16 KiB unless --max-http-header-size says otherwise). */
export const DEFAULT_HEADER_BYTES = defaultMaxHeaderSize;

/** The header limit of webhook connections: the largest webhook token plus the rest of a request. */
export function webhookHeaderBytes(limits: ServerLimits): number {
  return limits.maxTokenBytes + HEADER_SLACK_BYTES;
}

/**
 * What a server must be created with: its header limit, and deadlines checked
 * often enough to hold (Node checks them every 30 s by default).
 */
export function serverOptions(limits: ServerLimits, maxHeaderSize: number): { maxHeaderSize: number; connectionsCheckingInterval: number } {
  return {
    maxHeaderSize,
    connectionsCheckingInterval: Math.max(100, Math.min(1_000, Math.floor(limits.headersTimeoutMs / 4))),
  };
}

/** About the bytes of a request's head as they came (request line, headers, line ends), for a limit checked after parsing. */
export function headBytes(req: IncomingMessage): number {
  let bytes = (req.method?.length ?? 0) + (req.url?.length ?? 0) + 12;
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) bytes += raw[i]!.length + raw[i + 1]!.length + 4;
  return bytes;
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

/** The path of a request line (origin form), or undefined when the bytes do not start with one. */
export function pathOf(raw: Buffer | undefined): string | undefined {
  const line = raw?.subarray(0, 2048).toString('latin1').split('\r\n', 1)[0];
  return line ? /^[A-Z]+ (\/[^ ?]*)/.exec(line)?.[1] : undefined;
}

/** What a refusal of the HTTP parser's says, in the front door's { error, message } form: the request was not read, so its path is not known. */
const REFUSAL_BODY: Record<number, { error: string; message: string }> = {
  400: { error: 'bad_request', message: 'The request could not be read as HTTP/1.1: check its request line and headers.' },
  408: { error: 'request_timeout', message: 'The request line and headers did not arrive in time: send them at once, then the body.' },
  431: { error: 'headers_too_large', message: 'The request headers are too large: send fewer or shorter ones (a long cookie, or a token in the wrong header).' },
};

/** Closes a connection with a refusal whose body says why (the request could not be read, so nothing else is said). */
export function refuseConnection(socket: Socket, status: number, text: string): void {
  // After a timeout Node has already stopped writing to the socket: it can only be closed.
  if (!socket.writable) return void socket.destroy();
  const body = JSON.stringify(REFUSAL_BODY[status] ?? REFUSAL_BODY[400]);
  socket.end(`HTTP/1.1 ${status} ${text}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  // A client that never reads nor closes would keep the half-closed socket (and its descriptor): a second is enough.
  setTimeout(() => socket.destroy(), 1_000).unref();
}

/**
 * Applies the deadlines, and answers the requests the HTTP parser refuses itself:
 * `onRefusal` hears each one (status, the path when the refused bytes show it, why).
 */
export function applyServerLimits(server: Server, limits: ServerLimits, onRefusal: (status: number, path: string | undefined, reason: string) => void): void {
  server.headersTimeout = limits.headersTimeoutMs;
  server.requestTimeout = limits.requestTimeoutMs;
  const refused = new WeakSet<Socket>();
  server.on('clientError', (error: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Socket) => {
    const [status, text] = STATUS_OF_PARSER_ERROR[error.code ?? ''] ?? [400, 'Bad Request'];
    // A client that reset the connection sent no request to refuse; one already refused is only closing.
    if (error.code === 'ECONNRESET' || refused.has(socket)) return void socket.destroy();
    refused.add(socket);
    onRefusal(status, pathOf(error.rawPacket), error.code ?? error.message);
    refuseConnection(socket, status, text);
  });
}
