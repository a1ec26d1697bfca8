// createDelivery: books on the PLATFORM group (the partner group has no create
// endpoint), idempotently when the client sends an idempotencyKey.
import { setTimeout as sleep } from 'node:timers/promises';
import { IdempotencyConflictError, UpstreamTimeoutError, ValidationError } from '../errors.js';
import type { DeliveryStub } from '../mapping/model.js';
import { asValidation, toWireRequest, type DeliveryInput } from '../mapping/request.js';
import type { BookingResult } from '../store/store.js';
import { fingerprint } from '../domain/canonical-json.js';
import { hashKey } from '../domain/merchant-key.js';
import type { WireDeliveryRequest } from '../upstream/wire.js';
import { builder } from './builder.js';
import type { GraphQLContext } from './context.js';
import { DeliveryRef } from './delivery.js';
import { DeliveryInputRef } from './inputs.js';


const PENDING_POLL_MS = 25;


async function book(ctx: GraphQLContext, key: string, body: WireDeliveryRequest, input: DeliveryInput): Promise<BookingResult> {
  const created = await asValidation(key, () => ctx.services.upstream.platform.create(key, body), input);
  const result = { uid: created.uid, trackingUrl: created.trackingLink ?? null };
  await ctx.services.store.recordOwner(result.uid, hashKey(key), 'PLATFORM');
  return result;
}

/**
 * The same key with the same input returns the first booking; with other input
 * it is a conflict. A repeat that arrives while the first is still booking waits
 * for it (in this process through `services.bookingsInFlight`, across processes by polling the store).
 */
async function bookOnce(ctx: GraphQLContext, key: string, idempotencyKey: string, body: WireDeliveryRequest, input: DeliveryInput): Promise<BookingResult> {
  const { store, config } = ctx.services;
  const owner = hashKey(key);
  const print = fingerprint(body);
  const local = `${owner}:${idempotencyKey}`;
  const deadline = Date.now() + config.upstream.timeoutMs * 2;
  for (;;) {
    const running = ctx.services.bookingsInFlight.get(local);
    if (running) {
      const result = await running.catch(() => undefined);
      if (result) {
        // The running booking may have had other input: the store decides.
        const claim = await store.claimIdempotency(owner, idempotencyKey, print);
        if (claim.state === 'conflict') throw new IdempotencyConflictError();
        if (claim.state === 'done') return claim.result;
      }
      continue;
    }
    const claim = await store.claimIdempotency(owner, idempotencyKey, print);
    if (claim.state === 'conflict') throw new IdempotencyConflictError();
    if (claim.state === 'done') return claim.result;
    if (claim.state === 'pending') {
      if (Date.now() > deadline) throw new UpstreamTimeoutError('An earlier request with this idempotency key is still booking; try again.');
      await sleep(PENDING_POLL_MS);
      continue;
    }
    const booking = (async () => {
      try {
        const result = await book(ctx, key, body, input);
        await store.completeIdempotency(owner, idempotencyKey, result);
        return result;
      } catch (error) {
        // Nothing was booked as far as we know: let a retry try again.
        await store.releaseIdempotency(owner, idempotencyKey);
        throw error;
      } finally {
        ctx.services.bookingsInFlight.delete(local);
      }
    })();
    ctx.services.bookingsInFlight.set(local, booking);
    return booking;
  }
}

builder.mutationField('createDelivery', (t) =>
  t.field({
    type: DeliveryRef,
    description:
      'Books a delivery on the PLATFORM group (the partner group has no create endpoint). The same idempotencyKey with the same input returns the first result and books nothing new; with different input it is an IdempotencyConflictError. Fields beyond uid and trackingUrl are read from the upstream once, only when selected.',
    nullable: false,
    errors: {
      types: [ValidationError, IdempotencyConflictError],
      result: { description: 'The booked delivery.' },
      union: { description: 'The booked delivery, or why it was not booked.' },
      dataField: { description: 'The booked delivery; fields beyond uid and trackingUrl are read on demand.' },
    },
    args: {
      input: t.arg({ type: DeliveryInputRef, required: true, description: 'What to deliver, from where to where.' }),
      idempotencyKey: t.arg.string({
        description: 'Any string unique to this booking (per merchant key); a retry with the same key and input books nothing new.',
      }),
    },
    resolve: async (_root, { input, idempotencyKey }, ctx): Promise<DeliveryStub> => {
      const key = ctx.requireMerchantKey();
      const body = toWireRequest(input, 'PLATFORM', ctx.services.config.upstream.amountUnit);
      const result = idempotencyKey ? await bookOnce(ctx, key, idempotencyKey, body, input) : await book(ctx, key, body, input);
      return { uid: result.uid, group: 'PLATFORM', trackingUrl: result.trackingUrl, stub: true };
    },
  }),
);
