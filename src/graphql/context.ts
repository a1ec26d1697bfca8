// What every resolver gets: the caller's merchant key and address, and the per-request
// loaders (keyed by group and uid, so nothing is shared across keys or requests).
import type { Reconciler } from '../realtime/reconcile.js';
import type { IncomingMessage } from 'node:http';
import DataLoader from 'dataloader';
import type { Config } from '../config.js';
import { DeliveryGraphError, ForbiddenError, NotFoundError, UnauthenticatedError } from '../errors.js';
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
import type { Judged, Owners } from '../access/owners.js';
import type { Merchants } from '../access/merchants.js';
import { proveAccess } from '../access/prove.js';
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
  /** One read per (group, uid) per request; null for a uid the caller may not see (src/access/prove.ts decides). */
  deliveryLoader(group: ApiGroup): DataLoader<string, Delivery | null>;
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

/** The context of one operation, for the caller the transport read. */
export function createContext(services: Services, options: ContextOptions): GraphQLContext {
  const { req, limits, disconnect, caller } = options;
  const key = caller.kind === 'merchant' || caller.kind === 'client-token' ? caller.key : undefined;
  // null: a client token was sent and refused; undefined: none was sent.
  const token = caller.kind === 'client-token' ? caller.token : caller.kind === 'refused-token' ? null : undefined;
  let signal = options.signal;
  const scope = token ? new Set(token.uids) : undefined;
  const loaders = new Map<ApiGroup, DataLoader<string, Delivery | null>>();
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
    deliveryLoader(group) {
      let loader = loaders.get(group);
      if (!loader) {
        // A batch may be stopped when the client goes away; a single read is left to finish (cheaper than watching for
        // it).
        loader = new DataLoader(
          async (uids) => {
            const key = this.requireKey();
            const { upstream, owners } = services;
            // The owner records for the whole batch in one lookup; each uid is proven (or not) by src/access/prove.ts.
            let caller: string;
            let judged: Map<string, Judged>;
            try {
              caller = await this.merchant();
              judged = await owners.judge(scope ? uids.filter((uid) => scope.has(uid)) : uids, caller);
            } catch (error) {
              // Without the records nobody can be told apart: every entry fails, nothing is read.
              const failure =
                error instanceof DeliveryGraphError ? error : new Error('The owner records could not be read.');
              return uids.map(() => failure);
            }
            const byReference = (reference: string) => this.orderByReferenceLoader().load(reference);
            const read = async (uid: string, options: { signal: AbortSignal } | undefined) => {
              // A client token's other uids read as not found, without asking the upstream.
              if (scope && !scope.has(uid)) return null;
              const claim = { key, merchant: caller, uid, group, purpose: 'read' } as const;
              const answer = await proveAccess(owners, upstream, claim, {
                judged: judged.get(uid),
                signal: options?.signal,
                byReference,
              });
              return answer.allowed ? answer.delivery! : null;
            };
            return readEach(services, uids, uids.length > 1 ? this.clientGone() : undefined, read);
          },
          { maxBatchSize: services.config.graphql.maxBatchSize },
        );
        loaders.set(group, loader);
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

/**
 * Reads each (already distinct) id once, at most `batchConcurrency` at a time.
 * A failing id fails only its own entry; an unknown one reads as null.
 */
async function readEach(
  services: Services,
  ids: readonly string[],
  signal: AbortSignal | undefined,
  read: (id: string, options: { signal: AbortSignal } | undefined) => Promise<Delivery | null>,
): Promise<Array<Delivery | null | Error>> {
  const readOne = async (id: string): Promise<Delivery | null | Error> => {
    try {
      return await read(id, signal ? { signal } : undefined);
    } catch (error) {
      if (error instanceof NotFoundError) return null;
      return error instanceof DeliveryGraphError ? error : new Error(String(error));
    }
  };
  // A lone read (the common `delivery(uid:)`) needs no workers to share out.
  if (ids.length === 1) return [await readOne(ids[0]!)];
  const results = new Array<Delivery | null | Error>(ids.length);
  let next = 0;
  const worker = async () => {
    while (next < ids.length && !signal?.aborted) {
      const index = next++;
      results[index] = await readOne(ids[index]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(services.config.graphql.batchConcurrency, ids.length) }, worker));
  // Reads never started because the client went away still need an entry.
  for (let index = 0; index < results.length; index += 1)
    if (results[index] === undefined) results[index] = new Error('The client went away before this read.');
  return results;
}
