// How many subscriptions may be open at once, whatever the transport (WebSocket
// or server-sent events: the pipeline takes a slot for every subscription it
// starts, before it starts it):
// - SUBSCRIPTIONS_PER_KEY per merchant key, those of its client tokens included
//   (a merchant can make any number of tokens, so they cannot each bring fresh slots);
// - SUBSCRIPTIONS_PER_CLIENT_TOKEN per client token: one tracking link, shared
//   or scraped, cannot hold more than a page needs;
// - SUBSCRIPTIONS_PER_ADDRESS per client address (IPv6: per /64), for the
//   callers no key answers for yet: client tokens, and keys the upstream has not
//   accepted. A merchant key the upstream accepted is counted by its key alone,
//   since a merchant's backend (or a platform serving many merchants) is one address.
// A slot is held until the subscription ends however it ends: completed, failed,
// stopped by the client, or its socket or stream closed (the transports then
// return the stream). Counted in this process: with several instances behind a
// load balancer each has its own slots (docs/limits.md#subscriptions says why).
// Ids are hashes: never a key or a token itself.
import { createHash } from 'node:crypto';
import { hashKey } from '../domain/merchant-key.js';
import { TooManySubscriptionsError, type SubscriptionCapSetting } from '../errors.js';
import { addressGroup } from '../observability/client-address.js';
import type { Caller, Trust } from './caller.js';

/** Subscriptions open at once; 0: no cap. */
export interface SubscriptionCaps {
  perKey: number;
  perClientToken: number;
  perAddress: number;
}

/** The caps a refusal can come from, as /metrics labels them. */
export type SubscriptionCapName = 'socket' | 'key' | 'client_token' | 'address';

const CAP_OF: Record<SubscriptionCapName, SubscriptionCapSetting> = {
  socket: 'WS_MAX_SUBSCRIPTIONS',
  key: 'SUBSCRIPTIONS_PER_KEY',
  client_token: 'SUBSCRIPTIONS_PER_CLIENT_TOKEN',
  address: 'SUBSCRIPTIONS_PER_ADDRESS',
};

/** Read by /metrics. */
export interface SubscriptionCounters {
  /** Subscriptions refused since start, by the cap that was full. */
  readonly refused: Record<SubscriptionCapName, number>;
}

/** A subscription's slots: `release` gives them back (once; later calls do nothing). */
export interface SubscriptionSlot {
  release(): void;
}

export class SubscriptionSlots {
  /** Held slots by id (`<cap>\n<hash>`); an id whose count drops to 0 is deleted, so nothing stays of a caller gone. */
  readonly #held = new Map<string, number>();
  #open = 0;
  readonly counters: SubscriptionCounters = { refused: { socket: 0, key: 0, client_token: 0, address: 0 } };

  constructor(readonly caps: SubscriptionCaps) {}

  /**
   * One slot of every cap that applies to this caller, or the refusal naming the
   * first that is full (nothing is taken then). `trust` is the pipeline's word on
   * the caller for this operation (access/caller.ts).
   */
  take(caller: Caller, address: string, trust: Trust): SubscriptionSlot | TooManySubscriptionsError {
    const ids: Array<[SubscriptionCapName, string, number]> = [];
    if (caller.kind === 'merchant' || caller.kind === 'client-token')
      ids.push(['key', `key\n${hashKey(caller.key)}`, this.caps.perKey]);
    if (caller.kind === 'client-token')
      ids.push(['client_token', `token\n${tokenHash(caller.token.token)}`, this.caps.perClientToken]);
    if (caller.kind !== 'merchant' || trust !== 'earned')
      ids.push(['address', `address\n${addressGroup(address)}`, this.caps.perAddress]);
    for (const [cap, id, limit] of ids) {
      if (limit > 0 && (this.#held.get(id) ?? 0) >= limit) return this.refuse(cap, limit);
    }
    for (const [, id] of ids) this.#held.set(id, (this.#held.get(id) ?? 0) + 1);
    this.#open += 1;
    let held = true;
    return {
      release: () => {
        if (!held) return;
        held = false;
        this.#open -= 1;
        for (const [, id] of ids) {
          const count = (this.#held.get(id) ?? 1) - 1;
          if (count > 0) this.#held.set(id, count);
          else this.#held.delete(id);
        }
      },
    };
  }

  /** Counts a refusal by `cap` and makes its error (the socket's own cap is checked by the WebSocket server). */
  refuse(cap: SubscriptionCapName, limit: number): TooManySubscriptionsError {
    this.counters.refused[cap] += 1;
    return new TooManySubscriptionsError(CAP_OF[cap], limit);
  }

  /** Subscriptions holding slots now. */
  get open(): number {
    return this.#open;
  }

  /** Ids with a slot held (for leak checks: 0 once every subscription ended). */
  get ids(): number {
    return this.#held.size;
  }
}

function tokenHash(token: string): string {
  return createHash('sha256').update(`delivery-graph:subscription-slot:${token}`).digest('base64url');
}

/**
 * The stream as it goes to the transport, giving the slot back when it ends:
 * done, failed, or returned (a client's complete, a closed socket or stream).
 */
export function holdingSlot<T>(stream: AsyncIterableIterator<T>, slot: SubscriptionSlot): AsyncIterableIterator<T> {
  const settle = (step: IteratorResult<T>) => {
    if (step.done) slot.release();
    return step;
  };
  const fail = (error: unknown): never => {
    slot.release();
    throw error;
  };
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    next: () => stream.next().then(settle, fail),
    return: (value?: unknown) => {
      slot.release();
      return stream.return
        ? stream.return(value as T).then(settle, fail)
        : Promise.resolve({ done: true, value: undefined as T });
    },
    throw: (error?: unknown) => {
      slot.release();
      return stream.throw ? stream.throw(error).then(settle, fail) : Promise.reject(error);
    },
  };
}
