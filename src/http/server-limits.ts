// Limits of the one HTTP server against clients that hold connections open or
// send oversized headers: a connection cap, deadlines for headers and for whole
// requests, a header limit raised to fit the largest webhook token, and a count
// and a log line for every request the server itself refuses (431, 400, 408).
import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
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

/**
 * What the server must be created with: headers up to the largest webhook token
 * plus the rest of a request, and deadlines checked often enough to hold (Node
 * checks them every 30 s by default).
 */
export function serverOptions(limits: ServerLimits): { maxHeaderSize: number; connectionsCheckingInterval: number } {
  return {
    maxHeaderSize: limits.maxTokenBytes + HEADER_SLACK_BYTES,
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

/** The path of a request's first line, from the bytes the parser refused (never the headers). */
function pathOf(raw: Buffer | undefined): string | undefined {
  const line = raw?.subarray(0, 2048).toString('latin1').split('\r\n', 1)[0];
  return line ? /^[A-Z]+ (\/[^ ?]*)/.exec(line)?.[1] : undefined;
}

/**
 * Applies the limits, and answers the requests the HTTP parser refuses itself:
 * `onRefusal` hears each one (status, the path when it can be read, why).
 */
export function applyServerLimits(server: Server, limits: ServerLimits, onRefusal: (status: number, path: string | undefined, reason: string) => void): void {
  server.maxConnections = limits.maxConnections ?? defaultMaxConnections();
  server.headersTimeout = limits.headersTimeoutMs;
  server.requestTimeout = limits.requestTimeoutMs;
  const refused = new WeakSet<Socket>();
  server.on('clientError', (error: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Socket) => {
    const [status, text] = STATUS_OF_PARSER_ERROR[error.code ?? ''] ?? [400, 'Bad Request'];
    // A client that reset the connection sent no request to refuse; one already refused is only closing.
    if (error.code === 'ECONNRESET' || refused.has(socket)) return void socket.destroy();
    refused.add(socket);
    onRefusal(status, pathOf(error.rawPacket), error.code ?? error.message);
    // After a timeout Node has already stopped writing to the socket: it can only be closed.
    if (!socket.writable) return void socket.destroy();
    socket.end(`HTTP/1.1 ${status} ${text}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    // A client that never reads nor closes would keep the half-closed socket (and its descriptor): a second is enough.
    setTimeout(() => socket.destroy(), 1_000).unref();
  });
}
