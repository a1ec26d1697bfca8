// The delivery statuses, as the upstream spells them anywhere (reads, cancel
// results, webhook labels and event names), case- and separator-insensitively,
// with UNKNOWN for anything new.

/**
 * Every status a delivery can have here (the GraphQL enum DeliveryStatus), UNKNOWN for one the upstream names that the
 * facade does not know.
 */
export const DELIVERY_STATUSES = [
  'CREATED',
  'ASSIGNED',
  'PICKUP_ENROUTE',
  'PICKUP_ARRIVED',
  'PICKUP_COMPLETE',
  'DROPOFF_ENROUTE',
  'DROPOFF_ARRIVED',
  'DROPOFF_COMPLETE',
  'RETURN_IN_PROGRESS',
  'RETURNED',
  'CANCELED',
  'FAILED',
  'UNKNOWN',
] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

const STATUS_ALIASES: Record<string, DeliveryStatus> = {
  CREATED: 'CREATED',
  ACCEPTED: 'CREATED',
  PENDING: 'CREATED',
  ASSIGNED: 'ASSIGNED',
  ASSIGNED_DRIVER: 'ASSIGNED',
  DRIVER_ASSIGNED: 'ASSIGNED',
  PICKUP_ENROUTE: 'PICKUP_ENROUTE',
  PICKUP_EN_ROUTE: 'PICKUP_ENROUTE',
  PICKUP_ARRIVED: 'PICKUP_ARRIVED',
  PICKUP_COMPLETE: 'PICKUP_COMPLETE',
  PICKUP_COMPLETED: 'PICKUP_COMPLETE',
  PICKED_UP: 'PICKUP_COMPLETE',
  DROPOFF_ENROUTE: 'DROPOFF_ENROUTE',
  DROPOFF_EN_ROUTE: 'DROPOFF_ENROUTE',
  DROPOFF_ARRIVED: 'DROPOFF_ARRIVED',
  DROPOFF_COMPLETE: 'DROPOFF_COMPLETE',
  DROPOFF_COMPLETED: 'DROPOFF_COMPLETE',
  DELIVERED: 'DROPOFF_COMPLETE',
  RETURN_IN_PROGRESS: 'RETURN_IN_PROGRESS',
  RETURNING: 'RETURN_IN_PROGRESS',
  RETURNED: 'RETURNED',
  CANCELED: 'CANCELED',
  CANCELLED: 'CANCELED',
  FAILED: 'FAILED',
};

/** "Picked Up", "dropoff-complete", "DROPOFF_COMPLETE" → the enum key form. */
export function enumKey(raw: string): string {
  return raw
    .trim()
    .replace(/([a-z])([A-Z])/g, '$1_$2')
    .toUpperCase()
    .replace(/[^A-Z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '');
}

/** The key with every separator dropped, so "dropoffcomplete" matches DROPOFF_COMPLETE too. */
export function bareKey(raw: string): string {
  return enumKey(raw).replace(/_/g, '');
}

const STATUS_BY_BARE_KEY = new Map(Object.entries(STATUS_ALIASES).map(([key, status]) => [bareKey(key), status]));

/** The spellings above as they are written, found without rewriting the string first (reads send these). */
const STATUS_AS_WRITTEN = new Map(Object.entries(STATUS_ALIASES));

export function deliveryStatus(raw: unknown): DeliveryStatus {
  if (typeof raw !== 'string') return 'UNKNOWN';
  const status = STATUS_AS_WRITTEN.get(raw);
  if (status !== undefined) return status;
  if (raw.trim() === '') return 'UNKNOWN';
  return STATUS_BY_BARE_KEY.get(bareKey(raw)) ?? 'UNKNOWN';
}

/**
 * The status a webhook event's milestone implies: "delivery.pickup_complete" →
 * PICKUP_COMPLETE, "location.assigned_driver" → ASSIGNED.
 */
export function statusOfEvent(eventName: string): DeliveryStatus {
  const milestone = eventName.slice(eventName.indexOf('.') + 1);
  return STATUS_BY_BARE_KEY.get(bareKey(milestone)) ?? 'UNKNOWN';
}

/**
 * The status a webhook event gives its delivery: the milestone of its
 * `event_name` (the upstream says to branch on the name; its `status` is a label
 * for people, e.g. "Picked Up"). The label counts only for an event name the
 * facade does not know.
 */
export function statusOfWebhook(eventName: unknown, label: unknown): DeliveryStatus {
  const named = typeof eventName === 'string' ? statusOfEvent(eventName) : 'UNKNOWN';
  return named === 'UNKNOWN' ? deliveryStatus(label) : named;
}
