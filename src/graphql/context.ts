// What every resolver gets: the caller's merchant key and address, and the per-request
// loaders (keyed by group and uid, so nothing is shared across keys or requests).
import type { Reconciler } from '../realtime/reconcile.js';
import type { IncomingMessage } from 'node:http';
import DataLoader from 'dataloader';
import type { Config } from '../config.js';
import { BadUserInputError, ForbiddenError, UnauthenticatedError } from '../errors.js';
import { fromPartnerOrder } from '../mapping/delivery.js';
import type { ApiGroup, Delivery } from '../mapping/model.js';
import type { ReadAccess } from '../realtime/access.js';
import type { EventBus } from '../realtime/bus.js';
import type { EventPages } from '../realtime/event-pages.js';
import type { SubscriptionFanout } from '../realtime/fanout.js';
import { clientAddress } from '../observability/client-address.js';
import type { BookingResult, Store } from '../store/store.js';
import type { Upstream } from '../upstream/clients.js';
import type { Caller, ClientTokenCredential } from '../access/caller.js';
import { MERCHANT_ONLY } from '../access/client-token-scope.js';
import type { ClientTokens } from '../access/client-tokens.js';
import type { Owners } from '../access/owners.js';
import type { Merchants } from '../access/merchants.js';
import { readDeliveries, readEach, type ReadFreshness, type ReadTally } from './delivery-reads.js';
import type { RequestLimits } from '../access/rate-limit.js';
import type { SubscriptionSlots } from '../access/subscription-slots.js';
import type { KeyWatch } from '../access/key-watch.js';

/** Long-lived parts of the app that resolvers use. */
export interface Services {
  config: Config;
  upstream: Upstream;
  store: Store;
  bus: EventBus;
  access: ReadAccess;
  /** Owner records: who may see which delivery (src/access/owners.ts). */
  owners: Owners;
  /** The merchant behind each key (src/access/merchants.ts). */
  merchants: Merchants;
  /** Most events one subscriber may have waiting before it is cut off. */
  maxPendingEvents: number;
  /**
   * Bookings under way in this process, by merchant and idempotency key, so that
   * concurrent repeats share one upstream call (other processes wait on the store).
   */
  bookingsInFlight: Map<string, Promise<BookingResult>>;
  /** Makes and reads client tokens (CLIENT_TOKEN_SECRET). */
  clientTokens: ClientTokens;
  /**
   * Confirms a subscriber's key with the upstream and reads followed deliveries when no event comes
   * (src/realtime/reconcile.ts).
   */
  reconciler?: Reconciler;
  /** Subscriptions open at once per key, client token and address (src/access/subscription-slots.ts). */
  subscriptions: SubscriptionSlots;
  /**
   * Re-confirms the key of every open subscription at a bounded interval and ends them when it is refused
   * (src/access/key-watch.ts).
   */
  keyWatch?: KeyWatch;
  /**
   * Delivery.events in a subscription: one store read per message for all its subscribers
   * (src/realtime/event-pages.ts).
   */
  eventPages: EventPages;
  /**
   * Subscriptions: each event executed and serialized once per (plan, variables, visibility) (src/realtime/fanout.ts);
   * without it, once per subscriber.
   */
  fanout?: SubscriptionFanout;
}

export type { ClientTokenCredential };

export interface GraphQLContext {
  services: Services;
  /**
   * The merchant key from `Authorization: Bearer <key>`, if one was sent; with a
   * client token, the key the token acts for (upstream calls are made with it).
   */
  key: string | undefined;
  /** Set when the caller holds a client token: it may read these deliveries and nothing else. */
  clientToken: ClientTokenCredential | undefined;
  /** The uids a client token may read; undefined for a merchant key (whatever the upstream lets it read). */
  scope: ReadonlySet<string> | undefined;
  /** The client's address (X-Forwarded-For only as far as TRUST_PROXY says), for limits per address. */
  clientAddress: string;
  /**
   * The app's request limits (per key, per address), for the checks the streams make (a subscription's upstream access
   * checks).
   */
  limits: RequestLimits | undefined;
  /**
   * The key for reads: a merchant's own, or the one a client token acts for (its
   * reads are held to its uids by `scope`). UNAUTHENTICATED before any upstream
   * call without one (no key, or a client token that is not accepted).
   */
  requireKey(): string;
  /**
   * The key for what only a merchant may do (book, cancel, quote, make client
   * tokens): FORBIDDEN for a client token, whatever the pipeline let through.
   */
  requireMerchantKey(): string;
  /**
   * The merchant id of the key (requireKey's), resolved once per operation
   * (src/access/merchants.ts): what owns deliveries, idempotency keys and cursors.
   */
  merchant(): Promise<string>;
  /**
   * One read per (group, uid) per request and freshness; null for a uid the caller may not see (src/access/prove.ts
   * decides). From the stored view when it is fresh enough (src/graphql/delivery-reads.ts); without `freshness`,
   * READ_MAX_AGE and a selection that may hold anything.
   */
  deliveryLoader(group: ApiGroup, freshness?: ReadFreshness): DataLoader<string, Delivery | null>;
  /**
   * The freshness a read asks for: its `maxAge` argument (seconds), else READ_MAX_AGE; 0 whatever it says when the
   * request came with `Cache-Control: no-cache`. BAD_USER_INPUT for a negative maxAge.
   */
  readFreshness(maxAge?: number | null, needsRead?: boolean): ReadFreshness;
  /** Deliveries this request answered from the stored view and from the upstream (the answer's extensions). */
  deliveryReads: ReadTally;
  /**
   * One partner-group read by partner reference per reference per request; null
   * when none belongs to the caller. Used for what only that read carries
   * (delivery_style), so it is never asked for unless such a field is selected.
   */
  orderByReferenceLoader(): DataLoader<string, Delivery | null>;
  /** Over WebSocket: closes this connection (a subscriber that fell too far behind). */
  disconnect?(code: number, reason: string): void;
  /**
   * Aborted when the client goes away before its answer: reads (and quotes) made
   * for this request stop, unless another request shares them. Bookings and
   * cancellations never take it, so none is left half-done.
   */
  clientGone(): AbortSignal | undefined;
}

export interface ContextOptions {
  /** Who is asking, as the transport read it (access/caller.ts). */
  caller: Caller;
  /** The Node request (any transport): where the client address comes from. */
  req?: IncomingMessage;
  limits?: RequestLimits;
  disconnect?: (code: number, reason: string) => void;
  /** The signal, or a function that makes it on first use (it costs a listener per request). */
  signal?: AbortSignal | (() => AbortSignal | undefined);
}

/** Said for every client token that is not accepted, whichever the reason: a forger learns nothing from it. */
export const REFUSED_CLIENT_TOKEN =
  'The client token is not accepted: it was altered, has expired, or was made by another server.';

/** Whether a request's Cache-Control asks for an answer the origin confirms now: no-cache, or max-age=0. */
export function wantsNoCache(header: string | string[] | undefined): boolean {
  if (header === undefined) return false;
  return /(?:^|,)\s*(?:no-cache|max-age\s*=\s*0)\s*(?:,|$)/i.test(Array.isArray(header) ? header.join(',') : header);
}

/** The context of one operation, for the caller the transport read. */
export function createContext(services: Services, options: ContextOptions): GraphQLContext {
  const { req, limits, disconnect, caller } = options;
  const key = caller.kind === 'merchant' || caller.kind === 'client-token' ? caller.key : undefined;
  // null: a client token was sent and refused; undefined: none was sent.
  const token = caller.kind === 'client-token' ? caller.token : caller.kind === 'refused-token' ? null : undefined;
  let signal = options.signal;
  const scope = token ? new Set(token.uids) : undefined;
  const loaders = new Map<string, DataLoader<string, Delivery | null>>();
  const noCache = req !== undefined && wantsNoCache(req.headers['cache-control']);
  let byReference: DataLoader<string, Delivery | null> | undefined;
  let merchant: Promise<string> | undefined;
  return {
    services,
    key,
    clientToken: token ?? undefined,
    scope,
    clientAddress: clientAddress(req, services.config.server.trustProxyHops),
    limits,
    disconnect,
    // A method, not a getter: a context that is copied must not make the signal.
    clientGone() {
      if (typeof signal === 'function') signal = signal();
      return signal;
    },
    requireKey() {
      if (token === null) throw new UnauthenticatedError(REFUSED_CLIENT_TOKEN);
      if (!key) throw new UnauthenticatedError();
      // A token past its expiry is refused even within the operation or socket it was accepted for.
      if (token && token.expiresAt.getTime() <= Date.now()) throw new UnauthenticatedError(REFUSED_CLIENT_TOKEN);
      return key;
    },
    requireMerchantKey() {
      if (token) throw new ForbiddenError(MERCHANT_ONLY);
      return this.requireKey();
    },
    merchant() {
      const key = this.requireKey();
      merchant ??= services.merchants.of(key);
      return merchant;
    },
    deliveryReads: { fromView: 0, fromUpstream: 0 },
    readFreshness(maxAge, needsRead = true) {
      if (maxAge != null && (!Number.isInteger(maxAge) || maxAge < 0))
        throw new BadUserInputError(`maxAge is a whole number of seconds, 0 or more; got ${maxAge}.`);
      // Cache-Control: no-cache (or max-age=0) on the request: the upstream now, whatever the query says.
      if (noCache) return { maxAge: 0, needsRead };
      return { maxAge: maxAge ?? services.config.graphql.readMaxAgeSeconds, needsRead };
    },
    deliveryLoader(group, freshness) {
      const fresh = freshness ?? this.readFreshness();
      const name = `${group} ${fresh.maxAge} ${fresh.needsRead ? 1 : 0}`;
      let loader = loaders.get(name);
      if (!loader) {
        // A batch may be stopped when the client goes away; a single read is left to finish (cheaper than watching for
        // it).
        loader = new DataLoader((uids) => readDeliveries(this, group, fresh, this.deliveryReads, uids), {
          maxBatchSize: services.config.graphql.maxBatchSize,
        });
        loaders.set(name, loader);
      }
      return loader;
    },
    orderByReferenceLoader() {
      byReference ??= new DataLoader(
        (references) => {
          const key = this.requireKey();
          const read = async (reference: string, options: { signal: AbortSignal } | undefined) =>
            fromPartnerOrder(await services.upstream.partner.getOrderByReference(key, reference, options));
          return readEach(services, references, references.length > 1 ? this.clientGone() : undefined, read);
        },
        { maxBatchSize: services.config.graphql.maxBatchSize },
      );
      return byReference;
    },
  };
}
