// The milestones a delivery passes on its way to the dropoff, the words the page shows for every status, and where
// following ends.

export const MILESTONES = [
  'CREATED',
  'ASSIGNED',
  'PICKUP_ENROUTE',
  'PICKUP_ARRIVED',
  'PICKUP_COMPLETE',
  'DROPOFF_ENROUTE',
  'DROPOFF_ARRIVED',
  'DROPOFF_COMPLETE',
] as const;
export const LABELS: Record<string, string> = {
  CREATED: 'Booked',
  ASSIGNED: 'Courier assigned',
  PICKUP_ENROUTE: 'Courier on the way to pickup',
  PICKUP_ARRIVED: 'Courier at pickup',
  PICKUP_COMPLETE: 'Picked up',
  DROPOFF_ENROUTE: 'On the way to the dropoff',
  DROPOFF_ARRIVED: 'Courier at the dropoff',
  DROPOFF_COMPLETE: 'Delivered',
  CANCELED: 'Cancelled',
  FAILED: 'Failed',
  RETURN_IN_PROGRESS: 'Being returned',
  RETURNED: 'Returned',
  UNKNOWN: 'Unrecognised status',
};
// A cancel or failure after pickup is followed by the return; the server completes deliveryUpdated at the real end.
export const TERMINAL = new Set(['DROPOFF_COMPLETE', 'RETURNED']);

export function rank(status: string): number {
  return MILESTONES.indexOf(status as (typeof MILESTONES)[number]);
}
