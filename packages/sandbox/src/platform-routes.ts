// The platform group, under {base_url}/{platform}: quote, create, read, cancel,
// availability. Keys and the platform id are checked before these run.
import type { WireAvailability, WirePlatformCancellation, WireQuoteResult } from './wire.js';
import { apiError, SERVICE_NAME, type ApiContext, type ApiResult, type ApiRoute } from './routing.js';
import { toPlatformDelivery, trackingUrl } from './representations.js';
import { centsToDecimal, centsToMajor, priceDelivery, type Quote } from './state.js';
import { platformValidationBody, validateDeliveryRequest } from './validation.js';

export const PLATFORM_ROUTES: readonly ApiRoute[] = [
  { method: 'POST', path: ['quote'], json: true, handle: quoteDelivery },
  { method: 'POST', path: ['deliveries'], json: true, handle: createDelivery },
  { method: 'GET', path: ['deliveries', ':uid'], handle: readDelivery },
  { method: 'POST', path: ['deliveries', ':uid', 'cancel'], handle: cancelDelivery },
  { method: 'GET', path: ['availability'], handle: availability },
];

/** The quote result both groups return. */
export function quoteResult(quote: Quote): WireQuoteResult {
  return {
    message: 'Quote created',
    data: {
      price: {
        delivery_fee: centsToMajor(quote.feeCents),
        tip: centsToMajor(quote.tipCents),
        currency: quote.currency,
      },
      distance: quote.distanceKm,
    },
  };
}

function quoteDelivery(ctx: ApiContext): ApiResult {
  const { problems, request } = validateDeliveryRequest('platform', ctx.body);
  if (problems.length > 0) return { status: 422, body: platformValidationBody(problems) };
  return { status: 200, body: quoteResult(priceDelivery(request)) };
}

function createDelivery(ctx: ApiContext): ApiResult {
  const { problems, request } = validateDeliveryRequest('platform', ctx.body);
  if (problems.length > 0) return { status: 422, body: platformValidationBody(problems) };
  const record = ctx.state.create('platform', ctx.merchant.key, request);
  ctx.lifecycle.start(record);
  // The doc shows only `uid` and `tracking_link`: at the top level unless the createAnswerShape knob says `data`.
  const created = { uid: record.uid, tracking_link: trackingUrl(ctx.state.origin, record.uid) };
  if (ctx.state.createAnswerShape === 'data')
    return { status: 200, body: { message: 'Delivery created', data: created } };
  return { status: 201, body: { message: 'Delivery created', ...created } };
}

function readDelivery(ctx: ApiContext): ApiResult {
  const record = ctx.state.findReadable(ctx.params.uid!, 'platform', ctx.merchant);
  // A delivery the key may not read is "not found", never "forbidden": its existence is not leaked.
  if (!record) return apiError('platform', 404, 'not_found', 'No delivery with this uid belongs to the platform.');
  return { status: 200, body: { data: toPlatformDelivery(record, ctx.state.origin, ctx.state.deliveryMinuteOfDay) } };
}

function cancelDelivery(ctx: ApiContext): ApiResult {
  const uid = ctx.params.uid!;
  const record = ctx.state.find(uid, 'platform', ctx.merchant.key);
  if (!record) return apiError('platform', 404, 'not_found', 'No delivery with this uid belongs to the platform.');
  const outcome = ctx.lifecycle.cancel(record, 'Canceled by platform');
  if (!outcome) {
    return apiError(
      'platform',
      409,
      'not_cancelable',
      'The delivery can no longer be canceled: it was picked up, delivered or already canceled.',
    );
  }
  const body: WirePlatformCancellation = {
    message: 'Delivery canceled',
    uid,
    data: {
      status: 'Canceled',
      cancellation_fee: { amount: centsToDecimal(outcome.feeCents), currency: record.quote.currency },
    },
  };
  return { status: 200, body };
}

function availability(): ApiResult {
  const body: WireAvailability = { service: SERVICE_NAME, available: true };
  return { status: 200, body };
}
