// The listening sockets in front of the HTTP servers: who may connect, and what
// each request's head may hold.
//
// Connections: MAX_CONNECTIONS over every listener, of which a listener may keep
// slots of its own (WEBHOOK_PORT: no client of the main port can take them; on a
// shared port, slots past the rest that only webhook requests may use), and a cap
// per client address (the socket's peer: there are no headers yet to read a
// forwarded address from). Past a cap, a refusal that says what to do.
//
// Heads: Node's HTTP parser has one header limit per connection, set when it
// takes the connection, and only webhook tokens need more than 16 KiB. A load
// balancer sends any path over any kept-alive connection, so the limit must be
// the request's, not the connection's. Every byte in passes through a gate here
// (request-framing.ts) before the parser: it reads each request line whole, then
// counts the head's bytes against its path's limit as they come and refuses
// (431) the moment a head passes it, so that the parser, whose own limit is the
// largest, never holds more of a head than its path allows: an idle connection
// to /graphql holds at most 16 KiB until its deadline, as with Node's default.
// The cost: every request passes through JavaScript before the parser (2-4 µs
// of CPU, bench/probes/front-requests.mjs; Node would otherwise parse straight
// from the socket), and the head's deadline is kept here. Re-routing each
// request to a server with another limit would need the same reading of where
// each request starts, and a socket cannot move between parsers mid-stream.
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer, type Server as NetServer, type Socket } from 'node:net';
import { addressGroup, normalizeAddress } from '../observability/client-address.js';
import { RequestFraming, type BodyFraming, type Scan } from './request-framing.js';
import { refuseConnection, type Refusal } from './server-limits.js';

/** Why a connection was refused before any request was read. */
export type ConnectionRefusal = 'per_address' | 'max_connections' | 'webhook_slots';

export interface ListenerSpec {
  /** How metrics and logs name it: main, webhook, metrics. */
  name: string;
  /** The HTTP server its connections are handed to (it never listens itself). */
  server: Server;
  /** The most bytes a request's head may take, by its path (the path of its request line, without the query). */
  headLimit(path: string | undefined): number;
  /** Slots of MAX_CONNECTIONS kept for this listener: no other listener's connection takes them. */
  reservedSlots?: number;
  /**
   * With reservedSlots: they take requests for this path only (one request per connection), and only once the shared
   * slots are taken.
   */
  reservedFor?: string;
  /** Most connections one client address (IPv6: its /64) may hold on this listener; 0 or unset: no cap. */
  perAddress?: number;
}

export interface FrontOptions {
  /** Most open connections over every listener (WebSockets included). */
  maxConnections: number;
  /**
   * Each request's head (a new connection's from its start, a later one's from its first byte) must arrive within this,
   * else 408.
   */
  headersTimeoutMs: number;
  /** The bound of every head until its request line is read (and of the line itself). */
  defaultHeadBytes: number;
  /** A request refused here (408, 431, 400), with its path when its request line was read, on the listener named. */
  onRefusal(status: number, path: string | undefined, reason: string, listener: string): void;
  /** A connection refused before any request was read. */
  onConnectionRefused(reason: ConnectionRefusal, listener: string, detail: string): void;
  /** A listener's error once it listens (accept failing, e.g. out of descriptors): it goes on listening. */
  onListenerError(error: Error): void;
  /** A fault in reading a connection's requests: that connection was closed. */
  onFault(error: Error): void;
}

/** What the front knows of a connection's current request. */
export interface HeadState {
  /** The path of the request being read, from its request line until its body ends (undefined between requests). */
  readonly path: string | undefined;
  /**
   * Runs `refusal` once the answers to earlier requests on the connection are
   * written (at once when there are none): written before them, it would be read
   * as their answer.
   */
  whenAnswered(refusal: () => void): void;
  /**
   * The front refused this connection already (its answer is on its way): the parser's own deadline may still fire, and
   * is not a second refusal.
   */
  readonly refused: boolean;
}

export interface Fronts {
  /** Listens; each connection goes to the spec's server through a gate. */
  listen(port: number, host: string, spec: ListenerSpec): Promise<NetServer>;
  /** Connections open now, over every listener. */
  readonly connections: number;
  /** Open connections by listener name. */
  openByListener(): Record<string, number>;
  /** Connections refused so far, by reason. */
  readonly refusals: Readonly<Record<ConnectionRefusal, number>>;
  /** The current request of a connection, when the front holds it. */
  headOf(socket: Socket): HeadState | undefined;
  /** Stops accepting and drops connections waiting for a request; resolves once every connection has closed. */
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
 * Refused connections waiting for their refusal to be read at most; past them, a refused connection is closed at once.
 */
const MAX_LINGERING = 256;

const REFUSAL_OF: Record<ConnectionRefusal, (detail: string) => Refusal> = {
  per_address: (detail) => ({
    status: 429,
    text: 'Too Many Requests',
    body: {
      error: 'too_many_connections',
      message: `${detail} Reuse the connections already open (keep-alive), or close some.`,
    },
  }),
  max_connections: (detail) => ({
    status: 503,
    text: 'Service Unavailable',
    body: { error: 'server_busy', message: `${detail} Retry in a few seconds.` },
  }),
  webhook_slots: (detail) => ({
    status: 503,
    text: 'Service Unavailable',
    body: { error: 'server_busy', message: `${detail} Retry in a few seconds.` },
  }),
};

/** Where a connection holds its slot. */
interface Slot {
  listener: Listening;
  reserved: boolean;
  /** Where the listener caps connections per address: the address (group) counted. */
  address: string | undefined;
}

interface Listening {
  spec: ListenerSpec;
  net: NetServer;
  open: number;
  reservedUsed: number;
  byAddress: Map<string, number>;
}

/** Node's own data listener for a socket it was handed: the gate feeds it. */
type Feed = (chunk: Buffer) => void;

/** The gate of one connection: every byte passes it on its way to the parser. */
class Gate implements HeadState {
  /** The path of the request being read, from its request line until its body ends. */
  path: string | undefined;
  /** Responses begun and not finished. */
  pending = 0;
  /** What runs once the last answer is written (a refusal that came while one was being written). */
  private afterAnswers: (() => void) | undefined;
  /** The request the parser made of the last head fed (set while feeding it). */
  request: IncomingMessage | undefined;
  upgraded = false;
  /** Refused, closed or upgraded: nothing more is read here. */
  done = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly framing: RequestFraming;

  constructor(
    readonly socket: Socket,
    private readonly feedParser: Feed,
    private readonly spec: ListenerSpec,
    /** On a slot kept for one path: the path every request must be for. */
    readonly onlyFor: string | undefined,
    private readonly options: FrontOptions,
    /** Counts a request refused for the slot it came on. */
    private readonly countSlotRefusal: () => void,
  ) {
    this.framing = new RequestFraming(options.defaultHeadBytes, spec.headLimit);
    this.armDeadline();
  }

  refused = false;

  whenAnswered(refusal: () => void): void {
    if (this.pending === 0) return refusal();
    this.afterAnswers = refusal;
  }

  /** An answer was written in full. */
  answered(): void {
    this.pending -= 1;
    if (this.pending > 0 || !this.afterAnswers) return;
    const refusal = this.afterAnswers;
    this.afterAnswers = undefined;
    refusal();
  }

  /** Whether the connection waits for a request the parser has seen nothing of. */
  get waiting(): boolean {
    return !this.done && this.pending === 0 && this.framing.idle;
  }

  readonly onData = (chunk: Buffer): void => {
    if (this.done) return;
    let at = 0;
    // The first byte of this read not yet fed to the parser.
    let fed = 0;
    while (at < chunk.length) {
      let scan: Scan;
      try {
        scan = this.framing.scan(chunk, at);
      } catch (error) {
        return this.fault(error as Error);
      }
      switch (scan.event) {
        case 'more':
          // Bytes from feedEnd on are an unfinished request line, held by the framing.
          if (scan.feedEnd > fed && !this.feed(chunk.subarray(fed, scan.feedEnd), chunk, chunk.length)) return;
          fed = at = chunk.length;
          break;
        case 'line':
          this.path = scan.path;
          if (this.onlyFor !== undefined && scan.path !== this.onlyFor) {
            return this.refuseSlot(`Every connection slot is taken but those kept for ${this.onlyFor}.`);
          }
          at = scan.end;
          // A line that came in several reads was held whole: the parser gets it in one piece.
          if (scan.held) {
            if (!this.feed(Buffer.concat([scan.held, chunk.subarray(scan.lineStart, scan.end)]), chunk, scan.end))
              return;
            fed = scan.end;
            if (this.pausedBefore(chunk, at)) return;
          }
          break;
        case 'head':
          this.clearDeadline();
          if (!this.feed(chunk.subarray(fed, scan.end), chunk, scan.end)) return;
          fed = at = scan.end;
          if (!this.framed()) return;
          // A request without a body is whole: what comes next is another's.
          if (this.framing.idle) this.path = undefined;
          if (this.pausedBefore(chunk, at)) return;
          break;
        case 'message':
          if (!this.feed(chunk.subarray(fed, scan.end), chunk, scan.end)) return;
          fed = at = scan.end;
          this.path = undefined;
          if (this.pausedBefore(chunk, at)) return;
          break;
        case 'over':
          return this.refuse(431, 'Request Header Fields Too Large', `headers over ${scan.limit} bytes`);
        case 'malformed':
          return this.refuse(400, 'Bad Request', scan.reason);
      }
    }
    // A request line that ended with the read: it goes on to the parser with the headers that follow it.
    if (fed < chunk.length && !this.feed(chunk.subarray(fed), chunk, chunk.length)) return;
    if (!this.timer && this.framing.inHead) this.armDeadline();
  };

  /** Hands `piece` to the parser; false when the gate is done with the connection (closed, refused or upgraded). */
  private feed(piece: Buffer, chunk: Buffer, rest: number): boolean {
    if (piece.length > 0) this.feedParser(piece);
    if (this.socket.destroyed || this.socket.writableEnded) {
      this.stop();
      return false;
    }
    if (this.upgraded) {
      // A WebSocket's: the server that took it reads the socket from here on, these bytes first.
      this.stop();
      this.socket.removeListener('data', this.onData);
      if (rest < chunk.length) this.socket.unshift(chunk.subarray(rest));
      return false;
    }
    return true;
  }

  /**
   * Whether the server paused the socket (its answers are not being read, or a
   * body is not): the bytes from `rest` on go back to the socket, and come here
   * again when the server resumes it.
   */
  private pausedBefore(chunk: Buffer, rest: number): boolean {
    if (!this.socket.isPaused()) return false;
    if (rest < chunk.length) this.socket.unshift(chunk.subarray(rest));
    if (!this.timer && this.framing.inHead) this.armDeadline();
    return true;
  }

  /** After a head was fed: its body's framing, as the parser read it. */
  private framed(): boolean {
    const request = this.request;
    this.request = undefined;
    if (!request) {
      // The parser made no request of a whole head and kept the connection: nothing here can say where the next one
      // starts.
      this.stop();
      this.socket.destroy();
      return false;
    }
    try {
      this.framing.bodyFollows(bodyFraming(request));
    } catch (error) {
      this.fault(error as Error);
      return false;
    }
    return true;
  }

  /** A fault of the framing's own: this connection is closed, every other goes on. */
  private fault(error: Error): void {
    this.stop();
    this.socket.destroy();
    this.options.onFault(error);
  }

  private armDeadline(): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.done && (this.framing.inHead || this.framing.idle))
        this.refuse(408, 'Request Timeout', `no complete request head within ${this.options.headersTimeoutMs} ms`);
    }, this.options.headersTimeoutMs);
  }

  private clearDeadline(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  stop(): void {
    this.done = true;
    this.clearDeadline();
  }

  private refuse(status: number, text: string, reason: string): void {
    this.stop();
    this.refused = true;
    this.options.onRefusal(status, this.path, reason, this.spec.name);
    this.whenAnswered(() => refuseConnection(this.socket, { status, text }));
  }

  private refuseSlot(detail: string): void {
    this.stop();
    this.refused = true;
    this.countSlotRefusal();
    this.options.onConnectionRefused('webhook_slots', this.spec.name, detail);
    this.whenAnswered(() => refuseConnection(this.socket, REFUSAL_OF.webhook_slots(detail)));
  }
}

/**
 * A head's body, as the parser framed it (it refuses a Transfer-Encoding that does not end in chunked, and one beside a
 * Content-Length).
 */
function bodyFraming(request: IncomingMessage): BodyFraming {
  if (request.headers['transfer-encoding'] !== undefined) return { kind: 'chunked' };
  const length = request.headers['content-length'];
  return length === undefined ? { kind: 'none' } : { kind: 'length', bytes: Number(length.trim()) };
}

export function createFronts(options: FrontOptions): Fronts {
  const listeners: Listening[] = [];
  const gates = new WeakMap<Socket, Gate>();
  // Every open gate, for a graceful stop to drop those waiting for a request.
  const open = new Set<Gate>();
  const refusals: Record<ConnectionRefusal, number> = { per_address: 0, max_connections: 0, webhook_slots: 0 };
  const watched = new WeakSet<Server>();
  let lingering = 0;
  let closing = false;

  // The parser's requests, heard as it makes them (answered by Node itself too: a missing Host, a refused Expect).
  const onRequestStart = (message: unknown) => {
    const { request, response, socket } = message as {
      request: IncomingMessage;
      response: ServerResponse;
      socket: Socket;
    };
    const gate = gates.get(socket);
    if (!gate) return;
    gate.request = request;
    gate.pending += 1;
    // A slot kept for webhooks serves one request: it is free again for the next webhook.
    if (gate.onlyFor !== undefined) response.setHeader('connection', 'close');
  };
  const onResponseFinish = (message: unknown) => {
    const gate = gates.get((message as { socket: Socket }).socket);
    gate?.answered();
  };
  subscribe('http.server.request.start', onRequestStart);
  subscribe('http.server.response.finish', onResponseFinish);

  /** Slots of MAX_CONNECTIONS that no listener keeps for itself. */
  const sharedSlots = () =>
    options.maxConnections - listeners.reduce((sum, listener) => sum + (listener.spec.reservedSlots ?? 0), 0);
  let sharedUsed = 0;

  const refuseAtAccept = (socket: Socket, listener: Listening, reason: ConnectionRefusal, detail: string) => {
    refusals[reason] += 1;
    options.onConnectionRefused(reason, listener.spec.name, detail);
    // Past the cap, a descriptor is held only as long as it takes to say why, and only for a bounded number of them.
    if (lingering >= MAX_LINGERING) return void socket.destroy();
    lingering += 1;
    socket.once('close', () => (lingering -= 1));
    refuseConnection(socket, REFUSAL_OF[reason](detail));
  };

  /** A slot for a new connection, or undefined when it was refused. */
  const admit = (socket: Socket, listener: Listening): Slot | undefined => {
    const { spec } = listener;
    // Counted only where capped: the socket's peer, an IPv6 address by its /64.
    const address = spec.perAddress ? addressGroup(normalizeAddress(socket.remoteAddress) ?? 'unknown') : undefined;
    if (address !== undefined && (listener.byAddress.get(address) ?? 0) >= spec.perAddress!) {
      refuseAtAccept(
        socket,
        listener,
        'per_address',
        `This address already holds ${spec.perAddress} connections, the most one address may (MAX_CONNECTIONS_PER_ADDRESS).`,
      );
      return undefined;
    }
    const reserved = spec.reservedSlots ?? 0;
    const ownFirst = spec.reservedFor === undefined;
    let inReserve: boolean;
    if (ownFirst && listener.reservedUsed < reserved) inReserve = true;
    else if (sharedUsed < sharedSlots()) inReserve = false;
    else if (!ownFirst && listener.reservedUsed < reserved) inReserve = true;
    else {
      refuseAtAccept(
        socket,
        listener,
        'max_connections',
        `All ${options.maxConnections} connection slots are taken (MAX_CONNECTIONS).`,
      );
      return undefined;
    }
    if (inReserve) listener.reservedUsed += 1;
    else sharedUsed += 1;
    listener.open += 1;
    if (address !== undefined) listener.byAddress.set(address, (listener.byAddress.get(address) ?? 0) + 1);
    return { listener, reserved: inReserve, address };
  };

  const release = (slot: Slot) => {
    const { listener } = slot;
    if (slot.reserved) listener.reservedUsed -= 1;
    else sharedUsed -= 1;
    listener.open -= 1;
    if (slot.address === undefined) return;
    const left = (listener.byAddress.get(slot.address) ?? 1) - 1;
    if (left === 0) listener.byAddress.delete(slot.address);
    else listener.byAddress.set(slot.address, left);
  };

  const watch = (server: Server) => {
    if (watched.has(server)) return;
    watched.add(server);
    // Before the WebSocket server's own listener: from here on the socket is that server's.
    server.prependListener('upgrade', (_request: IncomingMessage, socket: Socket) => {
      const gate = gates.get(socket);
      if (gate) gate.upgraded = true;
    });
  };

  /** Hands the socket to its server with the gate between them. */
  const openGate = (socket: Socket, slot: Slot) => {
    const { spec } = slot.listener;
    const before = new Set(socket.listeners('data'));
    spec.server.emit('connection', socket);
    const feed = socket.listeners('data').find((listener) => !before.has(listener)) as Feed | undefined;
    if (!feed) return void socket.destroy();
    const onlyFor = slot.reserved ? spec.reservedFor : undefined;
    const gate = new Gate(socket, feed, spec, onlyFor, options, () => (refusals.webhook_slots += 1));
    gates.set(socket, gate);
    open.add(gate);
    socket.once('close', () => {
      gate.stop();
      open.delete(gate);
    });
    // The gate reads the socket in the parser's place (adding a data listener stops Node parsing straight from the
    // socket).
    socket.removeListener('data', feed);
    socket.on('data', gate.onData);
    socket.resume();
  };

  return {
    get connections() {
      return listeners.reduce((sum, listener) => sum + listener.open, 0);
    },
    openByListener() {
      return Object.fromEntries(listeners.map((listener) => [listener.spec.name, listener.open]));
    },
    refusals,
    headOf(socket) {
      return gates.get(socket);
    },
    async listen(port, host, spec) {
      watch(spec.server);
      // As node:http does for its own listener: half-open sockets (the server ends them) and no Nagle delay.
      const net = createServer({ pauseOnConnect: true, allowHalfOpen: true, noDelay: true }, (socket) => {
        if (closing) return void socket.destroy();
        const slot = admit(socket, listener);
        if (!slot) return;
        socket.once('close', () => release(slot));
        openGate(socket, slot);
      });
      const listener: Listening = { spec, net, open: 0, reservedUsed: 0, byAddress: new Map() };
      await new Promise<void>((resolve, reject) => {
        net.once('error', reject);
        net.listen(port, host, () => {
          net.off('error', reject);
          net.on('error', options.onListenerError);
          resolve();
        });
      });
      listeners.push(listener);
      return net;
    },
    async close() {
      closing = true;
      for (const gate of open) if (gate.waiting) gate.socket.destroy();
      await Promise.all(
        listeners.map((listener) => new Promise<void>((resolve) => listener.net.close(() => resolve()))),
      );
      unsubscribe('http.server.request.start', onRequestStart);
      unsubscribe('http.server.response.finish', onResponseFinish);
    },
  };
}
