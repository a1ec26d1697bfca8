// What the page knows of the delivery it follows: where its stops and courier are, the trail so far, its status and
// which milestones it reached when.
import type { Point, Projection } from './map.js';
import { MILESTONES, rank } from './milestones.js';
import type { Address, DeliveryEvent, TrackedDelivery } from './operations.js';

export interface Tracking {
  uid: string;
  pickup: Point | undefined;
  dropoff: Point | undefined;
  courier: Point | undefined;
  trail: Point[];
  status: string;
  /** Milestone → when it was seen and what the upstream said. */
  reached: Map<string, { at: string; text: string | null }>;
  estimatedDropoffAt: string | null;
  courierName: string | null;
  stops: Array<() => void>;
  projection: Projection | undefined;
}

export function pointOf(address: Address | null): Point | undefined {
  return address && address.latitude !== null && address.longitude !== null
    ? { lat: address.latitude, lng: address.longitude }
    : undefined;
}

export function describeCourier(courier: TrackedDelivery['courier']): string | null {
  if (!courier?.name) return null;
  const vehicle = [courier.vehicle?.make, courier.vehicle?.model].filter(Boolean).join(' ');
  return vehicle ? `${courier.name} (${vehicle})` : courier.name;
}

/** Takes one event into the state: the status moves forward only; "snapshot" carries no time of its own. */
export function record(state: Tracking, event: DeliveryEvent): void {
  if (event.stale) return;
  if (rank(event.status) >= rank(state.status) || !MILESTONES.includes(event.status as never))
    state.status = event.status;
  if (event.name !== 'snapshot' && !event.name.startsWith('location.') && !state.reached.has(event.status)) {
    state.reached.set(event.status, { at: event.receivedAt, text: event.statusText });
  }
  if (event.courierLocation) addToTrail(state, event.courierLocation);
}

export function addToTrail(state: Tracking, point: Point): void {
  const last = state.trail.at(-1);
  if (!last || last.lat !== point.lat || last.lng !== point.lng) state.trail.push(point);
  state.courier = point;
}
