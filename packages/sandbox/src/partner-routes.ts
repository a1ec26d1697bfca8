// The second ("partner") group, directly under {base_url}: quote, order reads by
// uid and by partner reference, cancel, availability. It has no create endpoint;
// orders are seeded through the sandbox (seedPartnerOrder, POST /sandbox/orders).
import type { JsonObject, WireAvailability, WireOrder, WirePartnerCancellation } from './wire.js';
import type { LifecycleSimulator } from './lifecycle.js';
import { quoteResult } from './platform-routes.js';
import { toPartnerOrder } from './representations.js';
import { apiError, SERVICE_NAME, type ApiContext, type ApiResult, type ApiRoute } from './routing.js';
import {
  centsToMajor,
  DuplicateReferenceError,
  priceDelivery,
  type DeliveryRecord,
  type SandboxState,
} from './state.js';
import { partnerValidationBody, validateDeliveryRequest, type FieldProblem } from './validation.js';

export const PARTNER_ROUTES: readonly ApiRoute[] = [
  { method: 'POST', path: ['quote'], json: true, handle: quoteOrder },
  { method: 'GET', path: ['orders', 'partner', ':reference'], handle: readOrderByReference },
  { method: 'GET', path: ['orders', ':uid'], handle: readOrder },
  { method: 'POST', path: ['orders', ':uid', 'cancel'], handle: cancelOrder },
  { method: 'GET', path: ['availability'], handle: availability },
];

/** First path segments that belong to this group rather than being a platform id. */
export const PARTNER_ROOTS: ReadonlySet<string> = new Set(PARTNER_ROUTES.map((r) => r.path[0]!));

function quoteOrder(ctx: ApiContext): ApiResult {
  const { problems, request } = validateDeliveryRequest('partner', ctx.body);
  if (problems.length > 0) return { status: 422, body: partnerValidationBody(problems) };
  return { status: 200, body: quoteResult(priceDelivery(request)) };
}

function readOrder(ctx: ApiContext): ApiResult {
  const record = ctx.state.findReadable(ctx.params.uid!, 'partner', ctx.merchant);
  if (!record) return apiError('partner', 404, 'not_found', 'No order with this uid.');
  // The read by uid has no delivery_style, unlike the read by reference.
  return {
    status: 200,
    body: { data: toPartnerOrder(record, ctx.state.origin, false, ctx.state.deliveryMinuteOfDay) },
  };
}

function readOrderByReference(ctx: ApiContext): ApiResult {
  const record = ctx.state.findByPartnerReference(ctx.merchant.key, ctx.params.reference!);
  if (!record) return apiError('partner', 404, 'not_found', 'No order with this partner reference.');
  return { status: 200, body: { data: toPartnerOrder(record, ctx.state.origin, true, ctx.state.deliveryMinuteOfDay) } };
}

function cancelOrder(ctx: ApiContext): ApiResult {
  const uid = ctx.params.uid!;
  const record = ctx.state.find(uid, 'partner', ctx.merchant.key);
  if (!record) return apiError('partner', 404, 'not_found', 'No order with this uid.');
  const outcome = ctx.lifecycle.cancel(record, 'Canceled by partner');
  if (!outcome) {
    return apiError(
      'partner',
      409,
      'not_cancelable',
      'The order can no longer be canceled: it was picked up, delivered or already canceled.',
    );
  }
  const body: WirePartnerCancellation = {
    message: 'Order canceled',
    uid,
    data: {
      status: 'Canceled',
      partner_reference: record.request.partner_reference ?? '',
      // This group writes the fee as a number, and spells it "cancelation".
      cancelation_fee: { value: centsToMajor(outcome.feeCents), currency: record.quote.currency },
    },
  };
  return { status: 200, body };
}

function availability(): ApiResult {
  const body: WireAvailability = { service: SERVICE_NAME, available: true };
  return { status: 200, body };
}

// ---------------------------------------------------------------------------
// Seeding: the partner group has no create endpoint, so the sandbox books
// orders on a caller's behalf.

/** Enough of a request that a seed needs only a partner reference: an order across San Francisco. */
const SEED_DEFAULTS: JsonObject = {
  pickup_name: 'Sandbox Store',
  dropoff_name: 'Sandbox Customer',
  email: 'store@example.com',
  currency: 'USD',
  package_delivery_mode: 'NOW',
};
const SEED_ADDRESSES = {
  pickup: { street: '1 Market St', city: 'San Francisco', country: 'US' },
  dropoff: { street: '500 Howard St', city: 'San Francisco', country: 'US' },
} as const;

/**
 * The seed body with the defaults filled in. An end's default address goes in
 * whole, and only when the body says nothing of that end's address (a key set
 * to undefined counts: it asks for no address there). Next to an end the body
 * placed, it is in that end's city: an order picked up in Springfield is not
 * delivered to San Francisco.
 */
function seedRequestBody(body: JsonObject): JsonObject {
  const mentions = (end: 'pickup' | 'dropoff') => Object.keys(body).some((name) => name.startsWith(`${end}_address_`));
  const filled: JsonObject = { ...SEED_DEFAULTS };
  for (const [end, other] of [
    ['pickup', 'dropoff'],
    ['dropoff', 'pickup'],
  ] as const) {
    if (mentions(end)) continue;
    const otherCity = body[`${other}_address_city`];
    const near =
      typeof otherCity === 'string' && otherCity.trim() !== ''
        ? { city: otherCity, state: body[`${other}_address_state`], country: body[`${other}_address_country`] }
        : { city: SEED_ADDRESSES[end].city, country: SEED_ADDRESSES[end].country };
    filled[`${end}_address_street`] = SEED_ADDRESSES[end].street;
    for (const [part, value] of Object.entries(near)) if (value !== undefined) filled[`${end}_address_${part}`] = value;
  }
  return { ...filled, ...body };
}

export type SeedOutcome =
  | { ok: true; order: WireOrder }
  | {
      ok: false;
      reason: 'invalid_api_key' | 'validation_error' | 'duplicate_reference';
      message: string;
      problems?: FieldProblem[];
    };

/** Validates with the partner rules, books the order and starts its lifecycle. */
export function seedOrder(
  state: SandboxState,
  lifecycle: LifecycleSimulator,
  key: string,
  body: JsonObject,
): SeedOutcome {
  if (!state.merchantByKey(key)) return { ok: false, reason: 'invalid_api_key', message: 'The API key is invalid.' };
  const { problems, request } = validateDeliveryRequest('partner', seedRequestBody(body));
  if (request.partner_reference === undefined && !problems.some((p) => p.field === 'partner_reference')) {
    problems.push({ field: 'partner_reference', message: 'The partner_reference field is required.' });
  }
  if (problems.length > 0) {
    return { ok: false, reason: 'validation_error', message: partnerValidationBody(problems).message, problems };
  }
  let record: DeliveryRecord;
  try {
    record = state.create('partner', key, request);
  } catch (error) {
    if (!(error instanceof DuplicateReferenceError)) throw error;
    return { ok: false, reason: 'duplicate_reference', message: error.message };
  }
  lifecycle.start(record);
  return { ok: true, order: toPartnerOrder(record, state.origin, true, state.deliveryMinuteOfDay) };
}
