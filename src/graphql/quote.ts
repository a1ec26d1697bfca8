// Quote type and the quoteDelivery mutation (both groups).
import { ValidationError } from '../errors.js';
import { quoteFromWire, type Quote } from '../mapping/quote.js';
import { asValidation, toWireRequest } from '../mapping/request.js';
import { builder } from './builder.js';
import { ApiGroupEnum } from './enums.js';
import { DeliveryInputRef } from './inputs.js';
import { DistanceRef, MoneyRef } from './objects.js';

const QuoteRef = builder.objectRef<Quote>('Quote').implement({
  description: 'A price for a delivery; nothing is booked.',
  fields: (t) => ({
    group: t.field({ type: ApiGroupEnum, description: 'The endpoint group that priced it.', resolve: (q) => q.group }),
    fee: t.expose('fee', {
      type: MoneyRef,
      description:
        'The delivery fee in major units (the upstream\'s delivery_fee, read in UPSTREAM_QUOTE_AMOUNT_UNIT, major by default). A quote the upstream answers without one, or without a currency, is an UPSTREAM_ERROR, never a free 0.00 or a currency of "".',
    }),
    tip: t.expose('tip', {
      type: MoneyRef,
      nullable: true,
      description:
        'The tip included in the quote, in major units (read in UPSTREAM_QUOTE_AMOUNT_UNIT like the fee); null when the upstream names none.',
    }),
    distance: t.expose('distance', {
      type: DistanceRef,
      nullable: true,
      description: 'Distance from pickup to dropoff.',
    }),
    message: t.exposeString('message', { nullable: true, description: "The upstream's message." }),
  }),
});

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
      group: t.arg({
        type: ApiGroupEnum,
        required: true,
        defaultValue: 'PLATFORM',
        description: 'Endpoint group to quote on.',
      }),
    },
    resolve: async (_root, { input, group }, ctx) => {
      const key = ctx.requireMerchantKey();
      const { upstream, config } = ctx.services;
      const body = toWireRequest(input, group, config.upstream);
      const wire = await asValidation(
        key,
        () =>
          group === 'PLATFORM'
            ? upstream.platform.quote(key, body, { signal: ctx.clientGone() })
            : upstream.partner.quote(key, body, { signal: ctx.clientGone() }),
        input,
      );
      return quoteFromWire(group, wire, config.upstream.quoteAmountUnit);
    },
  }),
);
