// The upstream's quote result → the Quote the GraphQL type exposes.
import { UpstreamProtocolError } from '../errors.js';
import type { AmountUnit } from '../config.js';
import type { WireQuoteResult } from '../upstream/wire.js';
import type { ApiGroup, Distance, Money } from './model.js';
import { amountFromUpstream, num, str } from './scalars.js';

export interface Quote {
  group: ApiGroup;
  fee: Money;
  tip: Money | null;
  distance: Distance | null;
  message: string | null;
}

/**
 * `amountUnit` is UPSTREAM_QUOTE_AMOUNT_UNIT: the document gives delivery_fee
 * and tip as bare numbers, so which unit they are in is a setting, not a guess.
 */
export function quoteFromWire(group: ApiGroup, wire: WireQuoteResult, amountUnit: AmountUnit): Quote {
  const price = wire.data?.price ?? ({} as Partial<WireQuoteResult['data']['price']>);
  const currency = str(price.currency);
  const fee = amountFromUpstream(price.delivery_fee, amountUnit);
  // fee is Money!: a price the upstream left out must not read as a free delivery, nor one in no currency as "".
  if (fee === null || currency === null)
    throw new UpstreamProtocolError(
      `The delivery service answered a ${group === 'PLATFORM' ? 'platform' : 'partner'} quote without a ${fee === null ? 'delivery fee' : 'currency'}.`,
    );
  const tip = amountFromUpstream(price.tip, amountUnit);
  const distance = num(wire.data?.distance);
  return {
    group,
    fee: { amount: fee, currency },
    tip: tip === null ? null : { amount: tip, currency },
    distance: distance === null ? null : { value: distance, unit: null },
    message: str(wire.message),
  };
}
