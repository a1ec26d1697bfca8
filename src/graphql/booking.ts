// createDelivery: books on the PLATFORM group (the partner group has no create
// endpoint), idempotently when the client sends an idempotencyKey.
import { setTimeout as sleep } from 'node:timers/promises';
import {
  BookingOutcomeUnknownError,
  IdempotencyConflictError,
  NotFoundError,
  UnauthenticatedError,
  UpstreamTimeoutError,
  UpstreamUnavailableError,
  ValidationError,
} from '../errors.js';
import { BOOKING_MARKER_FIELD, bookingMarker } from '../domain/booking-marker.js';
import type { DeliveryStub } from '../mapping/model.js';
import { asValidation, toWireRequest, type DeliveryInput } from '../mapping/request.js';
import type { BookingRecord } from '../access/owners.js';
import type { BookingResult } from '../store/store.js';
import { fingerprint } from '../domain/canonical-json.js';
import type { WireDeliveryRequest } from '../upstream/wire.js';
import { builder } from './builder.js';
import type { GraphQLContext } from './context.js';
import { DeliveryRef } from './delivery.js';
import { DeliveryInputRef } from './inputs.js';

const PENDING_POLL_MS = 25;

/**
 * Books upstream and records the booking (its owner, and with `claim` the
 * idempotency key's result). Once the upstream has booked, the booking is the
 * caller's whatever the store does: a record it cannot write waits in memory
 * (Owners.recordBooking), so a failed write never turns a booking into an error
 * that would make the caller book again.
 */
async function book(
  ctx: GraphQLContext,
  key: string,
  body: WireDeliveryRequest,
  input: DeliveryInput,
  claim?: BookingRecord['claim'],
): Promise<BookingResult> {
  // Known before the upstream books: nothing after the booking may fail before it is recorded.
  const owner = await ctx.merchant();
  const created = await asValidation(key, () => ctx.services.upstream.platform.create(key, body), input);
  const result = { uid: created.uid, trackingUrl: created.trackingLink ?? null };
  await ctx.services.owners.recordBooking({ result, owner, group: 'PLATFORM', claim });
  return result;
}

/**
 * Whether a failed create certainly booked nothing: the upstream refused it (a
 * 4xx, a 429, a 503, which says it did not handle the request), or it never left
 * (an open circuit, no connection). A timeout, a reset or closed connection, any
 * other 5xx, or an answer that could not be read may come after the upstream booked.
 */
function bookedNothing(error: unknown): boolean {
  if (error instanceof ValidationError || error instanceof UnauthenticatedError || error instanceof NotFoundError)
    return true;
  if (error instanceof UpstreamUnavailableError) return error.unsent || error.status === 429 || error.status === 503;
  return false;
}

/**
 * Frees the key when nothing was booked; otherwise keeps it unknown, or returns the booking a webhook already named.
 */
async function afterFailedBooking(
  ctx: GraphQLContext,
  owner: string,
  idempotencyKey: string,
  error: unknown,
): Promise<BookingResult> {
  const { store } = ctx.services;
  if (bookedNothing(error)) {
    await store.releaseIdempotency(owner, idempotencyKey);
    throw error;
  }
  const claim = await store.markIdempotencyUnknown(owner, idempotencyKey);
  if (claim.state !== 'done') throw error;
  await ctx.services.owners.recordBooking({ result: claim.result, owner, group: 'PLATFORM' });
  return claim.result;
}

/**
 * The same key with the same input returns the first booking; with other input
 * it is a conflict. A repeat that arrives while the first is still booking waits
 * for it (in this process through `services.bookingsInFlight`, across processes by polling the store).
 * A booking whose answer was lost keeps its claim as 'unknown': its webhooks carry
 * the key's marker (src/domain/booking-marker.ts) and turn it done; until then a
 * repeat books nothing and gets BookingOutcomeUnknownError. A booking whose result
 * the store could not take is answered from memory here (Owners.unrecordedClaim);
 * another process sees its claim pending meanwhile (docs/operations.md).
 */
async function bookOnce(
  ctx: GraphQLContext,
  key: string,
  idempotencyKey: string,
  body: WireDeliveryRequest,
  input: DeliveryInput,
): Promise<BookingResult> {
  const { store, config } = ctx.services;
  // The merchant's, not the key's: a retry with the merchant's next key finds the same claim (src/access/merchants.ts).
  const owner = await ctx.merchant();
  const print = fingerprint(body);
  const marked: WireDeliveryRequest = {
    ...body,
    platform_payload: { ...body.platform_payload, [BOOKING_MARKER_FIELD]: bookingMarker(owner, idempotencyKey) },
  };
  const local = `${owner}:${idempotencyKey}`;
  const deadline = Date.now() + config.upstream.timeoutMs * 2;
  for (;;) {
    // Booked, but the store has not taken the claim's result yet: it is in memory, and only there.
    const unrecorded = ctx.services.owners.unrecordedClaim(owner, idempotencyKey);
    if (unrecorded) {
      if (unrecorded.fingerprint !== print) throw new IdempotencyConflictError();
      return unrecorded.result;
    }
    const running = ctx.services.bookingsInFlight.get(local);
    if (running) {
      // The running booking may have had other input: once it ends, the claim decides (from memory or the store).
      await running.catch(() => undefined);
      continue;
    }
    const claim = await store.claimIdempotency(owner, idempotencyKey, print);
    if (claim.state === 'conflict') throw new IdempotencyConflictError();
    if (claim.state === 'done') return claim.result;
    if (claim.state === 'unknown') throw new BookingOutcomeUnknownError(claim.since);
    if (claim.state === 'pending') {
      if (Date.now() > deadline)
        throw new UpstreamTimeoutError('An earlier request with this idempotency key is still booking; try again.');
      await sleep(PENDING_POLL_MS);
      continue;
    }
    const booking = book(ctx, key, marked, input, { idempotencyKey, fingerprint: print })
      .catch((error: unknown) => afterFailedBooking(ctx, owner, idempotencyKey, error))
      .finally(() => ctx.services.bookingsInFlight.delete(local));
    ctx.services.bookingsInFlight.set(local, booking);
    return booking;
  }
}

builder.mutationField('createDelivery', (t) =>
  t.field({
    type: DeliveryRef,
    description:
      "Books a delivery on the PLATFORM group (the partner group has no create endpoint). The same idempotencyKey with the same input returns the first result and books nothing new; with different input it is an IdempotencyConflictError. When the first request's answer was lost (UPSTREAM_TIMEOUT, or UPSTREAM_UNAVAILABLE after it was sent), the upstream may have booked: a retry with the same key books nothing and returns that booking once the upstream's webhook for it has arrived, a BookingOutcomeUnknownError until then. Fields beyond uid and trackingUrl are read from the upstream once, only when selected.",
    nullable: false,
    errors: {
      types: [ValidationError, IdempotencyConflictError, BookingOutcomeUnknownError],
      result: { description: 'The booked delivery.' },
      union: { description: 'The booked delivery, or why it was not booked.' },
      dataField: { description: 'The booked delivery; fields beyond uid and trackingUrl are read on demand.' },
    },
    args: {
      input: t.arg({ type: DeliveryInputRef, required: true, description: 'What to deliver, from where to where.' }),
      idempotencyKey: t.arg.string({
        description:
          "Any string unique to this booking (per merchant: a key linked to the merchant's earlier one, see linkMerchantKey, finds the same), kept for IDEMPOTENCY_RETENTION (24 h by default); a retry with the same key and input books nothing new, even when the first request's answer was lost. A refusal that booked nothing (a ValidationError, a 429 or 503) frees the key. The facade marks the booking's platform_payload with a hash of it (never the key itself), under a reserved name that reads never show.",
      }),
    },
    resolve: async (_root, { input, idempotencyKey }, ctx): Promise<DeliveryStub> => {
      const key = ctx.requireMerchantKey();
      const body = toWireRequest(input, 'PLATFORM', ctx.services.config.upstream);
      const result = idempotencyKey
        ? await bookOnce(ctx, key, idempotencyKey, body, input)
        : await book(ctx, key, body, input);
      return { uid: result.uid, group: 'PLATFORM', trackingUrl: result.trackingUrl, stub: true };
    },
  }),
);
