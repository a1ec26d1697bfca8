// What every resolver gets: the caller's merchant key and the per-request
// loaders (keyed by group and uid, so nothing is shared across keys or requests).
import DataLoader from 'dataloader';
import type { Config } from '../config.js';
import { DeliveryGraphError, NotFoundError, UnauthenticatedError } from '../errors.js';
import { fromPartnerOrder, fromPlatformDelivery } from '../mapping/delivery.js';
import type { ApiGroup, Delivery } from '../mapping/model.js';
import type { ReadAccess } from '../realtime/access.js';
import type { EventBus } from '../realtime/bus.js';
import type { Store } from '../store/store.js';
import type { Upstream } from '../upstream/clients.js';

/** Long-lived parts of the app that resolvers use. */
export interface Services {
  config: Config;
  upstream: Upstream;
  store: Store;
  bus: EventBus;
  access: ReadAccess;
  /** Most events one subscriber may have waiting before it is cut off. */
  maxPendingEvents: number;
}

export interface GraphQLContext {
  services: Services;
  /** The merchant key from `Authorization: Bearer <key>`, if one was sent. */
  key: string | undefined;
  /** The key, or UNAUTHENTICATED before any upstream call. */
  requireKey(): string;
  /** One read per (group, uid) per request; null for a uid the caller does not own. */
  deliveryLoader(group: ApiGroup): DataLoader<string, Delivery | null>;
  /** Over WebSocket: closes this connection (a subscriber that fell too far behind). */
  disconnect?(code: number, reason: string): void;
}

/** `Bearer <key>` (scheme case-insensitive) → key. */
export function bearerKey(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^\s*bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1];
}

export function createContext(
  services: Services,
  authorization: string | null | undefined,
  disconnect?: (code: number, reason: string) => void,
): GraphQLContext {
  const key = bearerKey(authorization);
  const loaders = new Map<ApiGroup, DataLoader<string, Delivery | null>>();
  return {
    services,
    key,
    disconnect,
    requireKey() {
      if (!key) throw new UnauthenticatedError();
      return key;
    },
    deliveryLoader(group) {
      let loader = loaders.get(group);
      if (!loader) {
        loader = new DataLoader((uids) => readDeliveries(services, this.requireKey(), group, uids), {
          maxBatchSize: services.config.graphql.maxBatchSize,
        });
        loaders.set(group, loader);
      }
      return loader;
    },
  };
}

/**
 * Reads each (already distinct) uid once, at most `batchConcurrency` at a time.
 * A failing uid fails only its own entry; an unknown one reads as null.
 */
async function readDeliveries(services: Services, key: string, group: ApiGroup, uids: readonly string[]): Promise<Array<Delivery | null | Error>> {
  const { upstream, config } = services;
  const readOne = async (uid: string): Promise<Delivery | null | Error> => {
    try {
      return group === 'PLATFORM' ? fromPlatformDelivery(await upstream.platform.get(key, uid)) : fromPartnerOrder(await upstream.partner.getOrder(key, uid));
    } catch (error) {
      if (error instanceof NotFoundError) return null;
      return error instanceof DeliveryGraphError ? error : new Error(String(error));
    }
  };
  const results = new Array<Delivery | null | Error>(uids.length);
  let next = 0;
  const worker = async () => {
    while (next < uids.length) {
      const index = next++;
      results[index] = await readOne(uids[index]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(config.graphql.batchConcurrency, uids.length) }, worker));
  return results;
}
