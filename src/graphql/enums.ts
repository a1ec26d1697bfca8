import { DELIVERY_STATUSES, DELIVERY_STYLES } from '../mapping/model.js';
import { builder } from './builder.js';

export const ApiGroupEnum = builder.enumType('ApiGroup', {
  description: 'The upstream endpoint group a call goes to.',
  values: {
    PLATFORM: { description: 'Endpoints under /api/v1/{platform}: quote, book, read, cancel deliveries.' },
    PARTNER: {
      description: 'Endpoints directly under /api/v1: quote, read orders by uid or partner_reference, cancel.',
    },
  } as const,
});

const STATUS_HELP: Record<(typeof DELIVERY_STATUSES)[number], string> = {
  CREATED: 'Accepted; courier sourcing has started.',
  ASSIGNED: 'A courier has taken the delivery.',
  PICKUP_ENROUTE: 'The courier is on the way to the pickup.',
  PICKUP_ARRIVED: 'The courier is at the pickup.',
  PICKUP_COMPLETE: 'The package is in the vehicle (upstream "Picked Up").',
  DROPOFF_ENROUTE: 'The courier is on the way to the recipient.',
  DROPOFF_ARRIVED: 'The courier is at the dropoff; proof of delivery arrives with this milestone.',
  DROPOFF_COMPLETE:
    'Delivered. Normally final: no event moves it back, and should a later event contradict it (a failure), one read of the upstream settles the status and the read wins.',
  RETURN_IN_PROGRESS: 'The package is going back to the pickup.',
  RETURNED:
    'The package is back at the pickup. Normally final: no event moves it back; a read of the upstream that says otherwise wins.',
  CANCELED:
    'Canceled by the platform, the service or the provider. Normally final, but a later event or read can revise it: a cancel after pickup is followed by RETURN_IN_PROGRESS and RETURNED, and an event that proves a pickup (pickup_complete, any dropoff_* or return_*), in whatever order it arrives, makes a cancel first seen as one before pickup one after it. When events contradict it, one read of the upstream decides.',
  FAILED:
    'The delivery could not be completed. Normally final, but a later event or read can revise it: a failure after pickup is followed by RETURN_IN_PROGRESS and RETURNED, and a re-attempt the upstream completes ends at DROPOFF_COMPLETE. When events contradict it, one read of the upstream decides.',
  UNKNOWN: 'A status the facade does not recognise; rawStatus has the upstream string.',
};

export const DeliveryStatusEnum = builder.enumType('DeliveryStatus', {
  description:
    'Normalized lifecycle. Upstream strings ("DROPOFF_COMPLETE", "Picked Up", "Canceled", ...) map onto these case- and separator-insensitively; anything unrecognized is UNKNOWN, never an error.',
  values: Object.fromEntries(
    DELIVERY_STATUSES.map((status) => [status, { description: STATUS_HELP[status] }]),
  ) as Record<(typeof DELIVERY_STATUSES)[number], { description: string }>,
});

export const DeliveryModeEnum = builder.enumType('DeliveryMode', {
  description: 'When the delivery happens.',
  values: {
    NOW: { description: 'On demand: dispatched as soon as possible.' },
    SCHEDULED: { description: 'In the window given by deliveryDate (a UTC date) and the stop windows (the default).' },
  } as const,
});

const STYLE_HELP: Record<(typeof DELIVERY_STYLES)[number], string> = {
  STANDARD: 'Everyday parcels one person can carry (the default).',
  HYBRID: 'Routes mixing a scheduled window with on-demand sourcing.',
  SPECIAL_HANDLING: 'Fragile, temperature-sensitive or high-value goods.',
  OVERSIZE: 'Needs an SUV or larger; minimumVehicleSize is required (the upstream judges whether it is large enough).',
  OTHER:
    'A style enabled for the platform that the facade does not know; Delivery.rawStyle has the string. Read only: to request such a style, send DeliveryInput.rawStyle.',
};

export const DeliveryStyleEnum = builder.enumType('DeliveryStyle', {
  description: 'Handling style of a delivery, as documented by the upstream.',
  values: Object.fromEntries(DELIVERY_STYLES.map((style) => [style, { description: STYLE_HELP[style] }])) as Record<
    (typeof DELIVERY_STYLES)[number],
    { description: string }
  >,
});
