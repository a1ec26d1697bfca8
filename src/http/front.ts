// The listening sockets in front of the HTTP servers: who may connect. Each new
// connection is admitted or refused before any of its bytes is read (deciding on
// a socket is not framing), then handed whole to its HTTP server, whose parser
// reads it straight from the socket: Node's parser alone decides where each
// request ends.
//
// Connections: MAX_CONNECTIONS over every listener, of which a listener may keep
// slots of its own (WEBHOOK_PORT: no client of the main port can take them; on a
// shared port, slots past the rest that only a webhook request may use, one per
// connection), and a cap per client address (the socket's peer: there are no
// headers yet to read a forwarded address from). Past a cap, a refusal that says
// what to do.
import type { Server } from 'node:http';
import { createServer, type Server as NetServer, type Socket } from 'node:net';
import { addressGroup, normalizeAddress } from '../observability/client-address.js';
import { refuseConnection, type Refusal } from './server-limits.js';

/** Why a connection (or a request on a slot kept for webhooks) was refused. */
export type ConnectionRefusal = 'per_address' | 'max_connections' | 'webhook_slots';

export interface ListenerSpec {
  /** How metrics and logs name it: main, webhook, metrics. */
  name: string;
  /** The HTTP server its connections are handed to (it never listens itself). */
  server: Server;
  /** Slots of MAX_CONNECTIONS kept for this listener: no other listener's connection takes them. */
  reservedSlots?: number;
  /**
   * With reservedSlots: they take one request for this path per connection, and only once the shared slots are
   * taken.
   */
  reservedFor?: string;
  /** Most connections one client address (IPv6: its /64) may hold on this listener; 0 or unset: no cap. */
  perAddress?: number;
}

export interface FrontOptions {
  /** Most open connections over every listener (WebSockets included). */
  maxConnections: number;
  /** A connection refused, or a request on a slot kept for webhooks that was not one. */
  onConnectionRefused(reason: ConnectionRefusal, listener: string, detail: string): void;
  /** A listener's error once it listens (accept failing, e.g. out of descriptors): it goes on listening. */
  onListenerError(error: Error): void;
}

export interface Fronts {
  /** Listens; each admitted connection goes to the spec's server. */
  listen(port: number, host: string, spec: ListenerSpec): Promise<NetServer>;
  /** Connections open now, over every listener. */
  readonly connections: number;
  /** Open connections by listener name. */
  openByListener(): Record<string, number>;
  /** Connections (and requests on slots kept for webhooks) refused so far, by reason. */
  readonly refusals: Readonly<Record<ConnectionRefusal, number>>;
  /**
   * What the slot of a request's connection allows, asked once per request before it runs: 'serve', 'serve-once' (a
   * slot kept for webhooks: answer this one, then close), or the refusal to answer instead of running it.
   */
  slotVerdict(socket: Socket, path: string | undefined): 'serve' | 'serve-once' | Refusal;
  /**
   * Stops accepting and drops the connections waiting for a request (none being answered); resolves once every
   * connection has closed.
   */
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

interface Listening {
  spec: ListenerSpec;
  net: NetServer;
  open: number;
  reservedUsed: number;
  byAddress: Map<string, number>;
}

/** Where a connection holds its slot. */
interface Slot {
  listener: Listening;
  reserved: boolean;
  /** Where the listener caps connections per address: the address (group) counted. */
  address: string | undefined;
  /** On a slot kept for one path: the path its one request must be for. */
  onlyFor: string | undefined;
  /** Requests seen on a slot kept for one path. */
  requests: number;
}

/** What node:http keeps on a socket it serves: the answer being written, and its parser until an upgrade. */
interface ServedSocket extends Socket {
  _httpMessage?: unknown;
  parser?: unknown;
}

/** The slots of MAX_CONNECTIONS: which listener holds how many, of its own or shared, and per client address. */
class SlotBook {
  readonly listeners: Listening[] = [];
  private sharedUsed = 0;

  constructor(readonly maxConnections: number) {}

  /** A slot for a new connection, or why it gets none. */
  take(socket: Socket, listener: Listening): Slot | ConnectionRefusal {
    const { spec } = listener;
    // Counted only where capped: the socket's peer, an IPv6 address by its /64.
    const address = spec.perAddress ? addressGroup(normalizeAddress(socket.remoteAddress) ?? 'unknown') : undefined;
    if (address !== undefined && (listener.byAddress.get(address) ?? 0) >= spec.perAddress!) return 'per_address';
    const reserved = this.inReserve(listener);
    if (reserved === undefined) return 'max_connections';
    if (reserved) listener.reservedUsed += 1;
    else this.sharedUsed += 1;
    listener.open += 1;
    if (address !== undefined) listener.byAddress.set(address, (listener.byAddress.get(address) ?? 0) + 1);
    return { listener, reserved, address, onlyFor: reserved ? spec.reservedFor : undefined, requests: 0 };
  }

  release(slot: Slot): void {
    const { listener } = slot;
    if (slot.reserved) listener.reservedUsed -= 1;
    else this.sharedUsed -= 1;
    listener.open -= 1;
    if (slot.address === undefined) return;
    const left = (listener.byAddress.get(slot.address) ?? 1) - 1;
    if (left === 0) listener.byAddress.delete(slot.address);
    else listener.byAddress.set(slot.address, left);
  }

  /** Whether the listener's own slots come before the shared ones, or after them (a shared port's webhook slots). */
  private inReserve(listener: Listening): boolean | undefined {
    const reserved = listener.spec.reservedSlots ?? 0;
    const ownFirst = listener.spec.reservedFor === undefined;
    if (ownFirst && listener.reservedUsed < reserved) return true;
    if (this.sharedUsed < this.sharedSlots()) return false;
    if (!ownFirst && listener.reservedUsed < reserved) return true;
    return undefined;
  }

  /** Slots of MAX_CONNECTIONS that no listener keeps for itself. */
  private sharedSlots(): number {
    return this.maxConnections - this.listeners.reduce((sum, listener) => sum + (listener.spec.reservedSlots ?? 0), 0);
  }
}

/** Listens; once listening, the listener's errors go to `onError` (it goes on listening). */
function listenOn(net: NetServer, port: number, host: string, onError: (error: Error) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    net.once('error', reject);
    net.listen(port, host, () => {
      net.off('error', reject);
      net.on('error', onError);
      resolve();
    });
  });
}

export function createFronts(options: FrontOptions): Fronts {
  const book = new SlotBook(options.maxConnections);
  // Every open connection, with its slot.
  const slots = new Map<Socket, Slot>();
  const refusals: Record<ConnectionRefusal, number> = { per_address: 0, max_connections: 0, webhook_slots: 0 };
  let lingering = 0;
  let closing = false;

  const refuseAtAccept = (socket: Socket, listener: Listening, reason: ConnectionRefusal) => {
    const { perAddress } = listener.spec;
    const detail =
      reason === 'per_address'
        ? `This address already holds ${perAddress} connections, the most one address may (MAX_CONNECTIONS_PER_ADDRESS).`
        : `All ${options.maxConnections} connection slots are taken (MAX_CONNECTIONS).`;
    refusals[reason] += 1;
    options.onConnectionRefused(reason, listener.spec.name, detail);
    // Past the cap, a descriptor is held only as long as it takes to say why, and only for a bounded number of them.
    if (lingering >= MAX_LINGERING) return void socket.destroy();
    lingering += 1;
    socket.once('close', () => (lingering -= 1));
    refuseConnection(socket, REFUSAL_OF[reason](detail));
  };

  const onConnection = (socket: Socket, listener: Listening) => {
    if (closing) return void socket.destroy();
    const slot = book.take(socket, listener);
    if (typeof slot === 'string') return refuseAtAccept(socket, listener, slot);
    slots.set(socket, slot);
    socket.once('close', () => {
      slots.delete(socket);
      book.release(slot);
    });
    // The server's parser reads the socket itself from here on (node:http consumes a socket no one else reads).
    listener.spec.server.emit('connection', socket);
    socket.resume();
  };

  return {
    get connections() {
      return book.listeners.reduce((sum, listener) => sum + listener.open, 0);
    },
    openByListener() {
      return Object.fromEntries(book.listeners.map((listener) => [listener.spec.name, listener.open]));
    },
    refusals,
    slotVerdict(socket, path) {
      const slot = slots.get(socket);
      if (slot?.onlyFor === undefined) return 'serve';
      slot.requests += 1;
      if (slot.requests === 1 && path === slot.onlyFor) return 'serve-once';
      const detail = `Every connection slot is taken but those kept for ${slot.onlyFor}.`;
      // One refusal per connection: the requests pipelined behind it are never answered (it closes after the first).
      if (slot.requests === 1) {
        refusals.webhook_slots += 1;
        options.onConnectionRefused('webhook_slots', slot.listener.spec.name, detail);
      }
      return REFUSAL_OF.webhook_slots(detail);
    },
    async listen(port, host, spec) {
      // As node:http does for its own listener: half-open sockets (the server ends them) and no Nagle delay.
      const net = createServer({ pauseOnConnect: true, allowHalfOpen: true, noDelay: true }, (socket) =>
        onConnection(socket, listener),
      );
      const listener: Listening = { spec, net, open: 0, reservedUsed: 0, byAddress: new Map() };
      await listenOn(net, port, host, options.onListenerError);
      book.listeners.push(listener);
      return net;
    },
    async close() {
      closing = true;
      // Waiting for a request: no answer being written, and still HTTP's (not upgraded to a WebSocket).
      for (const socket of slots.keys() as IterableIterator<ServedSocket>)
        if (socket.parser && !socket._httpMessage) socket.destroy();
      await Promise.all(
        book.listeners.map((listener) => new Promise<void>((resolve) => listener.net.close(() => resolve()))),
      );
    },
  };
}
