// The upstream's quote result → the Quote the GraphQL type exposes.
import { UpstreamProtocolError } from '../errors.js';
import type { WireQuoteResult } from '../upstream/wire.js';
import type { ApiGroup, Distance, Money } from './model.js';
import { decimalFrom, num, str } from './scalars.js';

export interface Quote {
  group: ApiGroup;
  fee: Money;
  tip: Money | null;
  distance: Distance | null;
  message: string | null;
}

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
