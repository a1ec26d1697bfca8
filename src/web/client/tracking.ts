// Following one delivery: its first read, then deliveryUpdated for the timeline and courierLocation for the pin,
// until the delivery ends or another is opened.
import { clientToken, currentKey } from './credentials.js';
import type { Point } from './map.js';
import { drawMap, placeCourier } from './map-view.js';
import { LABELS, TERMINAL } from './milestones.js';
import { FOLLOW, PIN, TRACK, type DeliveryEvent, type TrackedDelivery } from './operations.js';
import { clientFor, describe, execute } from './socket.js';
import { clock, render } from './timeline.js';
import { addToTrail, describeCourier, pointOf, record, type Tracking } from './tracking-state.js';
import { say, ui } from './ui.js';

let tracking: Tracking | undefined;

export function stopTracking(): void {
  for (const stop of tracking?.stops ?? []) stop();
  tracking = undefined;
}

export async function open(uid: string): Promise<void> {
  stopTracking();
  const key = currentKey();
  if (!key) return say('Enter a merchant key first.', 'error');
  if (!uid) return say('Enter the uid of a delivery.', 'error');
  say(`Loading ${uid}…`);
  let delivery: TrackedDelivery | null;
  try {
    delivery = (await execute<{ delivery: TrackedDelivery | null }>(TRACK, { uid })).delivery;
  } catch (error) {
    return say(`Could not read ${uid}: ${(error as Error).message}`, 'error');
  }
  if (!delivery)
    return say(
      clientToken ? `Delivery ${uid} is not part of this tracking link.` : `No delivery ${uid} is visible to this key.`,
      'error',
    );

  const state: Tracking = {
    uid,
    pickup: pointOf(delivery.pickup.address),
    dropoff: pointOf(delivery.dropoff.address),
    courier: delivery.courier?.location ?? undefined,
    trail: [],
    status: delivery.status,
    reached: new Map(),
    estimatedDropoffAt: delivery.estimatedDropoffAt,
    courierName: describeCourier(delivery.courier),
    stops: [],
    projection: undefined,
  };
  tracking = state;
  for (const { node } of delivery.events.edges) if (!node.stale) record(state, node);
  if (state.courier && !state.trail.length) state.trail.push(state.courier);
  ui.tracker.hidden = false;
  const hash = clientToken ? `#token=${clientToken}&uid=${encodeURIComponent(uid)}` : `#uid=${encodeURIComponent(uid)}`;
  if (location.hash !== hash) history.replaceState(null, '', `${location.pathname}${hash}`);
  ui.uidInput.value = uid;
  drawMap(state);
  render(state);
  say(
    TERMINAL.has(state.status) ? `${LABELS[state.status] ?? state.status}.` : `Following ${uid} live.`,
    TERMINAL.has(state.status) ? 'done' : 'info',
  );

  follow(state, key);
}

/** The live part: deliveryUpdated moves the timeline, courierLocation the pin; both stop when another uid is opened. */
function follow(state: Tracking, key: string): void {
  const { uid } = state;
  const socket = clientFor(key);
  state.stops.push(
    socket.subscribe<{ deliveryUpdated: DeliveryEvent }>(
      { query: FOLLOW, variables: { uid } },
      {
        next: ({ data, errors }) => {
          if (errors?.length) return say(describe(errors), 'error');
          if (!data || tracking !== state) return;
          record(state, data.deliveryUpdated);
          if (data.deliveryUpdated.courierLocation) moveCourier(state, data.deliveryUpdated.courierLocation);
          render(state);
          if (TERMINAL.has(state.status))
            say(`${LABELS[state.status] ?? state.status} at ${clock(data.deliveryUpdated.receivedAt)}.`, 'done');
        },
        error: (error) => tracking === state && say(describe(error), 'error'),
        // The server completes the stream after the delivery's final event (a cancel before pickup included).
        // (After DROPOFF_COMPLETE or RETURNED the message with its time is already shown.)
        complete: () =>
          tracking === state && !TERMINAL.has(state.status) && say(`${LABELS[state.status] ?? state.status}.`, 'done'),
      },
    ),
    socket.subscribe<{
      courierLocation: { milestone: string; location: Point; courier: { name: string | null } | null };
    }>(
      { query: PIN, variables: { uid } },
      {
        next: ({ data }) => {
          if (!data || tracking !== state) return;
          if (data.courierLocation.courier?.name) state.courierName = data.courierLocation.courier.name;
          moveCourier(state, data.courierLocation.location);
          render(state);
        },
        error: (error) => tracking === state && say(describe(error), 'error'),
        complete: () => undefined,
      },
    ),
  );
}

function moveCourier(state: Tracking, point: Point): void {
  addToTrail(state, point);
  if (!state.projection?.fits(point)) drawMap(state);
  else placeCourier(state);
}

/** The uid being followed, if any. */
export function trackedUid(): string | undefined {
  return tracking?.uid;
}
