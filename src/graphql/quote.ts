// Quote type and the quoteDelivery mutation (both groups).
import { UpstreamProtocolError, UpstreamValidationError, ValidationError } from '../errors.js';
import type { ApiGroup, Distance, Money } from '../mapping/model.js';
import { toWireRequest, validationErrorFromUpstream, type DeliveryInput } from '../mapping/request.js';
import { decimalFrom, num, str } from '../mapping/scalars.js';
import type { WireQuoteResult } from '../upstream/wire.js';
import { builder } from './builder.js';
import { ApiGroupEnum } from './enums.js';
import { DeliveryInputRef } from './inputs.js';
import { DistanceRef, MoneyRef } from './objects.js';

export interface Quote {
  group: ApiGroup;
  fee: Money;
  tip: Money | null;
  distance: Distance | null;
  message: string | null;
}

const QuoteRef = builder.objectRef<Quote>('Quote').implement({
  description: 'A price for a delivery; nothing is booked.',
  fields: (t) => ({
    group: t.field({ type: ApiGroupEnum, description: 'The endpoint group that priced it.', resolve: (q) => q.group }),
    fee: t.expose('fee', {
      type: MoneyRef,
      description: 'The delivery fee. A quote the upstream answers without one is an UPSTREAM_ERROR, never a free 0.00.',
    }),
    tip: t.expose('tip', { type: MoneyRef, nullable: true, description: 'The tip included in the quote; null when the upstream names none.' }),
    distance: t.expose('distance', { type: DistanceRef, nullable: true, description: 'Distance from pickup to dropoff.' }),
    message: t.exposeString('message', { nullable: true, description: "The upstream's message." }),
  }),
});

export function quoteFromWire(group: ApiGroup, wire: WireQuoteResult): Quote {
  const price = wire.data?.price ?? ({} as Partial<WireQuoteResult['data']['price']>);
  const currency = str(price.currency) ?? '';
  const fee = decimalFrom(price.delivery_fee);
  // fee is Money!: a price the upstream left out must not read as a free delivery.
  if (fee === null) throw new UpstreamProtocolError(`The delivery service answered a ${group === 'PLATFORM' ? 'platform' : 'partner'} quote without a delivery fee.`);
  const tip = decimalFrom(price.tip);
  const distance = num(wire.data?.distance);
  return {
    group,
    fee: { amount: fee, currency },
    tip: tip === null ? null : { amount: tip, currency },
    distance: distance === null ? null : { value: distance, unit: null },
    message: str(wire.message),
  };
}

/**
 * Runs an upstream call whose validation failure should read like the facade's
 * own; with the input, each problem is placed on the field the client wrote.
 */
export async function asValidation<T>(key: string, call: () => Promise<T>, input?: DeliveryInput): Promise<T> {
  try {
    return await call();
  } catch (error) {
    throw error instanceof UpstreamValidationError ? validationErrorFromUpstream(error, key, input) : error;
  }
}

builder.mutationField('quoteDelivery', (t) =>
  t.field({
    type: QuoteRef,
    description: 'Prices a delivery on either group without booking anything.',
    nullable: false,
    errors: {
      types: [ValidationError],
      result: { description: 'The quote.' },
      union: { description: 'A quote, or why the input cannot be quoted.' },
      dataField: { description: 'The quote.' },
    },
    args: {
      input: t.arg({ type: DeliveryInputRef, required: true, description: 'What to deliver, from where to where.' }),
      group: t.arg({ type: ApiGroupEnum, required: true, defaultValue: 'PLATFORM', description: 'Endpoint group to quote on.' }),
    },
    resolve: async (_root, { input, group }, ctx) => {
      const key = ctx.requireKey();
      const { upstream, config } = ctx.services;
      const body = toWireRequest(input, group, config.upstream.amountUnit);
      const wire = await asValidation(
        key,
        () => (group === 'PLATFORM' ? upstream.platform.quote(key, body, { signal: ctx.clientGone() }) : upstream.partner.quote(key, body, { signal: ctx.clientGone() })),
        input,
      );
      return quoteFromWire(group, wire);
    },
  }),
);
