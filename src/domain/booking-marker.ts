// The facade's mark on a booking made with an idempotency key. The upstream's
// create takes no idempotency key, but it returns platform_payload untouched on
// every read and webhook; so the facade puts a hash of (merchant, idempotency key)
// there under one reserved name. When a booking's answer is lost, the webhooks
// for it still carry the mark and say which booking it was. The mark is a hash:
// neither the merchant key nor the idempotency key can be read from it. Clients
// never see it: every payload the facade returns has it taken out.
import { createHash } from 'node:crypto';

/** The reserved platform_payload key; a client's own payload may not use it. */
export const BOOKING_MARKER_FIELD = '_delivery_graph_booking';

/**
 * The mark of a booking by the merchant `owner` (its id: src/access/merchants.ts) with this idempotency key (64 hex).
 */
export function bookingMarker(owner: string, idempotencyKey: string): string {
  return createHash('sha256').update(`delivery-graph booking\n${owner}\n${idempotencyKey}`).digest('hex');
}

/** The mark a platform_payload carries, when it carries one of ours. */
export function markerOf(payload: unknown): string | undefined {
  if (!isObject(payload)) return undefined;
  const mark = payload[BOOKING_MARKER_FIELD];
  return typeof mark === 'string' && /^[0-9a-f]{64}$/.test(mark) ? mark : undefined;
}

/** The payload as the client gave it: without our mark, and null when the mark was all there was. */
export function withoutMarker(payload: unknown): unknown {
  if (!isObject(payload) || !(BOOKING_MARKER_FIELD in payload)) return payload;
  const { [BOOKING_MARKER_FIELD]: _mark, ...rest } = payload;
  return Object.keys(rest).length === 0 ? null : rest;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
