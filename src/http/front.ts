// The listening sockets in front of the HTTP servers. Node's HTTP parser has one
// header limit per server, and only webhook tokens need more than its 16 KiB: so
// on a shared port each connection's first request line is read here, before any
// parser holds headers, and the connection goes to the server for its path (the
// webhook path to the one whose limit fits a token, anything else to one with
// Node's default). Here too: the connection cap across every listener, and the
// deadline for that first request line.
import { METHODS, type Server } from 'node:http';
import { createServer, type Server as NetServer, type Socket } from 'node:net';
import { DEFAULT_HEADER_BYTES, pathOf, refuseConnection } from './server-limits.js';

/** Which server takes a connection, by the path of its first request (undefined: no request line could be read). */
export type Route = (path: string | undefined) => Server;

/** Whether the bytes of a first line so far can still be a request line's start: a known method, or the start of one. */
function couldBeRequestLine(head: Buffer, start: number): boolean {
  const space = head.indexOf(0x20, start);
  const method = head.toString('latin1', start, space < 0 ? Math.min(head.length, start + 16) : space);
  return space < 0 ? METHODS.some((known) => known.startsWith(method)) : METHODS.includes(method);
}

export interface FrontOptions {
  /** Most open connections over every listener (WebSockets included); the next are closed at once. */
  maxConnections: number;
  /** The first request line must arrive within this, else 408 (the server's own deadline then covers its headers). */
  headersTimeoutMs: number;
  /** A connection refused here, before any server had it. */
  onRefusal(status: number, reason: string): void;
  /** A listener's error once it listens (accept failing, e.g. out of descriptors): it goes on listening. */
  onListenerError(error: Error): void;
}

export interface Fronts {
  /** Listens; each connection goes to `to` (one server), or to the server `to` picks by its first request's path. */
  listen(port: number, host: string, to: Server | Route): Promise<NetServer>;
  /** Connections open now, over every listener. */
  readonly connections: number;
  /** Stops accepting and drops connections still waiting for their first line; resolves once every connection has closed. */
  close(): Promise<void>;
}

/**
 * Makes an HTTP server that never listens itself take connections handed to it:
 * Node starts checking a server's header and request deadlines when it starts
 * listening, so that moment is announced here (its own 'listening' handler).
 */
export function takeHandedConnections(server: Server): void {
  server.emit('listening');
}

/**
 * net.Server's own count of its open connections, the one its maxConnections
 * checks: it drops as a socket is destroyed, where 'close' comes a turn later.
 */
function openOn(listener: NetServer): number {
  return (listener as NetServer & { _connections: number })._connections;
}

export function createFronts(options: FrontOptions): Fronts {
  const listeners: NetServer[] = [];
  // Connections whose first request line has not arrived: a graceful stop drops them.
  const waiting = new Set<Socket>();
  let closing = false;
  const open = () => listeners.reduce((sum, listener) => sum + openOn(listener), 0);

  const handOff = (socket: Socket, server: Server, head: Buffer | undefined) => {
    // The bytes read here go back in front of the rest, for the server's parser to read first.
    if (head) socket.unshift(head);
    server.emit('connection', socket);
    socket.resume();
  };

  const readFirstLine = (socket: Socket, route: Route) => {
    waiting.add(socket);
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = () => {
      clearTimeout(timer);
      waiting.delete(socket);
      socket.off('data', onData);
      socket.off('end', drop);
      socket.off('error', drop);
    };
    const timer = setTimeout(() => {
      stop();
      options.onRefusal(408, `no request line within ${options.headersTimeoutMs} ms`);
      refuseConnection(socket, 408, 'Request Timeout');
    }, options.headersTimeoutMs);
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      const head = chunks.length === 1 ? chunk : Buffer.concat(chunks, size);
      // Empty lines before a request line are allowed (RFC 9112, 2.2), and skipped as the parser skips them.
      let start = 0;
      while (head[start] === 0x0d || head[start] === 0x0a) start += 1;
      const lineEnd = head.indexOf('\r\n', start);
      // Bytes that cannot begin a request, and a line longer than the default limit, go to the default server at once: its parser refuses them (400, 431).
      if (lineEnd < 0 && size < DEFAULT_HEADER_BYTES && couldBeRequestLine(head, start)) return;
      stop();
      socket.pause();
      handOff(socket, route(lineEnd < 0 ? undefined : pathOf(head.subarray(start, lineEnd))), head);
    };
    // Closed or broken before a request line: nothing to answer.
    const drop = () => {
      stop();
      socket.destroy();
    };
    socket.on('data', onData);
    socket.on('end', drop);
    socket.on('error', drop);
    socket.resume();
  };

  return {
    get connections() {
      return open();
    },
    async listen(port, host, to) {
      // As node:http does for its own listener: half-open sockets (the server ends them) and no Nagle delay.
      const listener = createServer({ pauseOnConnect: true, allowHalfOpen: true, noDelay: true }, (socket) => {
        // This connection is already counted.
        if (closing || open() > options.maxConnections) return void socket.destroy();
        if (typeof to === 'function') readFirstLine(socket, to);
        else handOff(socket, to, undefined);
      });
      await new Promise<void>((resolve, reject) => {
        listener.once('error', reject);
        listener.listen(port, host, () => {
          listener.off('error', reject);
          listener.on('error', options.onListenerError);
          resolve();
        });
      });
      listeners.push(listener);
      return listener;
    },
    async close() {
      closing = true;
      for (const socket of waiting) socket.destroy();
      waiting.clear();
      await Promise.all(listeners.map((listener) => new Promise<void>((resolve) => listener.close(() => resolve()))));
    },
  };
}
