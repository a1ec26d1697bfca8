// Milestone ranks: webhooks can arrive late and out of order, so an event is
// compared with the delivery's current rank before it may change anything.
import type { DeliveryStatus } from '../mapping/model.js';
import { statusOfEvent } from '../mapping/status.js';

/**
 * created < assigned < pickup_enroute < pickup_arrived < pickup_complete <
 * dropoff_enroute < dropoff_arrived < dropoff_complete. A return branches off
 * after pickup_complete and may follow any dropoff milestone, so its ranks sit
 * between them; canceled and failed may follow anything that is not terminal.
 */
const RANK: Partial<Record<DeliveryStatus, number>> = {
  CREATED: 0,
  ASSIGNED: 1,
  PICKUP_ENROUTE: 2,
  PICKUP_ARRIVED: 3,
  PICKUP_COMPLETE: 4,
  DROPOFF_ENROUTE: 5,
  DROPOFF_ARRIVED: 6,
  RETURN_IN_PROGRESS: 6.5,
  DROPOFF_COMPLETE: 7,
  RETURNED: 7.5,
  CANCELED: 8,
  FAILED: 8,
};

const TERMINAL = new Set<DeliveryStatus>(['DROPOFF_COMPLETE', 'RETURNED', 'CANCELED', 'FAILED']);

export function rankOfStatus(status: DeliveryStatus): number | undefined {
  return RANK[status];
}

/** Rank of an event's milestone (`delivery.*` or `location.*`); undefined for names the facade does not know. */
export function milestoneRank(eventName: string): number | undefined {
  return RANK[statusOfEvent(eventName)];
}

export function isTerminalStatus(status: DeliveryStatus): boolean {
  return TERMINAL.has(status);
}

/** Event kinds ignore ASCII case, as the stores' queries do (SQLite's LIKE, Redis's lower-cased flag). */
export function isDeliveryEvent(eventName: string): boolean {
  return /^delivery\./i.test(eventName);
}

export function isLocationEvent(eventName: string): boolean {
  return /^location\./i.test(eventName);
}

export interface MilestoneState {
  rank: number;
  terminal: boolean;
}

/**
 * Whether an event arrives too late to count: below the current rank, after a
 * terminal milestone, or (for delivery.* events) a repeat of the current one.
 * Location events may repeat their milestone: a courier en route moves.
 */
export function isStale(eventName: string, current: MilestoneState | undefined): boolean {
  const rank = milestoneRank(eventName);
  if (!current) return false;
  if (current.terminal) return true;
  if (rank === undefined) return false;
  return isDeliveryEvent(eventName) ? rank <= current.rank : rank < current.rank;
}

/** The state after a non-stale event; location events never move it. */
export function advance(eventName: string, current: MilestoneState | undefined): MilestoneState | undefined {
  if (!isDeliveryEvent(eventName)) return current;
  const status = statusOfEvent(eventName);
  const rank = RANK[status];
  if (rank === undefined) return current;
  return { rank, terminal: TERMINAL.has(status) };
}
