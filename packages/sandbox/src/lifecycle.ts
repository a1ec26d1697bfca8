// The milestone simulator: moves each delivery along the plan of its outcome
// (created → assigned → … → dropoff_complete, or a failure or provider cancel
// before or after pickup, then maybe back to the pickup or a second attempt),
// one milestone every `stepMs` (or on advance()), moves its courier between the
// coordinates, and announces each step as events.
import type { LocationEventName, WireLatLng } from './wire.js';
import type { Outcome, SandboxKnobs } from './types.js';
import {
  MILESTONE,
  OUTCOMES,
  cancellationFeeCents,
  STEP,
  isFinished,
  isPickedUp,
  milestoneOf,
  planOf,
  pickCourier,
  pickProviderCancellationReason,
  PLANS,
  type DeliveryRecord,
  type MilestoneKey,
  type SandboxState,
} from './state.js';
import { interpolate } from './geography.js';

/** Where the courier is when an en-route milestone fires: a tenth of the way along. */
const ENROUTE_START = 0.1;
/** A provider cancel right after pickup finds the courier just driven off: this share of the way to the dropoff. */
const DRIVEN_OFF = 0.05;
/** After a failed attempt the courier leaves and comes back for the second from halfway between the two ends. */
const REATTEMPT_FROM = 0.5;

/** Milestones on the way to the recipient: the arrival estimate means something only here. */
const DELIVERY_PATH: ReadonlySet<MilestoneKey> = new Set(PLANS.delivered.map((m) => m.key));

/** Receives every event as it happens; `final` marks the delivery's last one. */
export type EmitEvent = (
  record: DeliveryRecord,
  eventName: string,
  options: { final: boolean; location: boolean },
) => void;

export class LifecycleError extends Error {
  override readonly name = 'LifecycleError';
  constructor(
    readonly code: 'not_found' | 'finished' | 'not_assigned',
    message: string,
  ) {
    super(message);
  }
}

export class LifecycleSimulator {
  /** Pending step and location-tick timers per delivery uid. */
  private readonly timers = new Map<string, Set<NodeJS.Timeout>>();
  private stopped = false;
  /** Paused: no clock runs (advance() still moves a delivery) until resume(). */
  private paused: boolean;

  constructor(
    private readonly state: SandboxState,
    private readonly knobs: SandboxKnobs,
    private readonly emit: EmitEvent,
    { paused = false } = {},
  ) {
    this.paused = paused;
  }

  /** Announces a new delivery and sets its clock running. */
  start(record: DeliveryRecord): void {
    // With outcomeWeights every outcome may be drawn, some branching before pickup: drawn now.
    if (this.knobs.outcomeWeights !== null)
      record.outcome ??= this.drawWeightedOutcome(record, this.knobs.outcomeWeights);
    record.etaAt = this.estimateArrival(record);
    this.emit(record, MILESTONE.created.event, { final: false, location: false });
    this.schedule(record);
  }

  /** Moves one delivery to its next milestone now. */
  async advance(uid: string): Promise<void> {
    const record = this.state.deliveries.get(uid);
    if (!record) throw new LifecycleError('not_found', `no delivery ${uid}`);
    if (isFinished(record)) {
      const ends: Partial<Record<string, string>> = {
        returned: 'returned',
        dropoff_complete: 'delivered',
        failed: 'failed',
        provider_canceled: 'canceled',
      };
      const end = record.canceled ? 'canceled' : ends[milestoneOf(record).key];
      throw new LifecycleError('finished', `delivery ${uid} is already ${end}`);
    }
    this.step(record);
  }

  /**
   * Gives a delivery another courier (new driver_id, name, phones, vehicle), as
   * the document allows ("A driver has taken it" can happen again): announced by
   * delivery.assigned and location.assigned_driver naming the new driver, while
   * the milestone stays where it is. Before pickup the new courier comes from
   * elsewhere; once picked up they take over where the package is.
   */
  reassign(uid: string): void {
    const record = this.state.deliveries.get(uid);
    if (!record) throw new LifecycleError('not_found', `no delivery ${uid}`);
    if (isFinished(record)) throw new LifecycleError('finished', `delivery ${uid} is already finished`);
    if (!record.courier) throw new LifecycleError('not_assigned', `delivery ${uid} has no courier yet`);
    this.changeCourier(record);
    // The step's location ticks start again from the new courier.
    this.clearTimers(uid);
    this.schedule(record);
  }

  private changeCourier(record: DeliveryRecord): void {
    const courier = pickCourier(record, record.courier!);
    if (isPickedUp(record) && record.courierAt) courier.origin = record.courierAt;
    record.courier = courier;
    record.courierAt = courier.origin;
    this.emit(record, MILESTONE.assigned.event, { final: false, location: false });
    this.emit(record, MILESTONE.assigned.location!, { final: false, location: true });
  }

  /**
   * Cancels if the courier has not picked the package up yet; returns the fee
   * charged, or null when cancelling is refused (a return, once picked up, is refused too).
   */
  cancel(record: DeliveryRecord, reason: string): { feeCents: number } | null {
    if (isFinished(record) || isPickedUp(record)) return null;
    this.clearTimers(record.uid);
    const feeCents = cancellationFeeCents(record);
    record.canceled = { at: new Date(), reason, feeCents };
    this.emit(record, 'delivery.canceled', { final: true, location: false });
    return { feeCents };
  }

  /** Re-times every running delivery after a knob change (e.g. stepMs 0 → 50 starts them moving). */
  reschedule(): void {
    for (const record of this.state.deliveries.values()) {
      if (isFinished(record)) continue;
      this.clearTimers(record.uid);
      this.schedule(record);
    }
  }

  /** Sets the clocks of every unfinished delivery running (those restored from a world file included). */
  resume(): void {
    this.paused = false;
    this.reschedule();
  }

  stop(): void {
    this.stopped = true;
    for (const uid of [...this.timers.keys()]) this.clearTimers(uid);
  }

  private step(record: DeliveryRecord): void {
    this.clearTimers(record.uid);
    record.step += 1;
    // Whether this package reaches its recipient is settled once it is in the vehicle.
    if (record.step === STEP.pickupComplete) record.outcome ??= this.chooseOutcome(record);
    const milestone = milestoneOf(record);
    const final = isFinished(record);

    if (milestone.key === 'assigned') record.courier = pickCourier(record);
    if (milestone.key === 'provider_canceled')
      record.providerCancellation = { at: new Date(), reason: pickProviderCancellationReason() };
    if (milestone.key === 'return_in_progress') record.returnFrom = record.courierAt;
    record.courierAt = this.courierPositionAt(record, milestone.key);
    record.etaAt = this.estimateArrival(record);

    this.emit(record, milestone.event, { final, location: false });
    if (milestone.location) this.emit(record, milestone.location, { final: false, location: true });
    // The reassignRate knob's share of deliveries get another courier once, on the way to the pickup.
    if (milestone.key === 'pickup_enroute' && this.knobs.reassignRate > 0 && record.random() < this.knobs.reassignRate)
      this.changeCourier(record);
    if (!final) this.schedule(record);
  }

  /** The returnRate knob's share of deliveries go back, half after a failure and half after a provider cancel. */
  private chooseOutcome(record: DeliveryRecord): Outcome {
    const { returnRate } = this.knobs;
    if (returnRate <= 0 || record.random() >= returnRate) return 'delivered';
    return record.random() < 0.5 ? 'failed_then_returned' : 'canceled_then_returned';
  }

  /** One outcome drawn by weight (outcomeWeights knob); every weight 0 or missing means delivered. */
  private drawWeightedOutcome(record: DeliveryRecord, weights: Partial<Record<Outcome, number>>): Outcome {
    const total = OUTCOMES.reduce((sum, outcome) => sum + (weights[outcome] ?? 0), 0);
    let draw = record.random() * total;
    for (const outcome of OUTCOMES) {
      draw -= weights[outcome] ?? 0;
      if (draw < 0) return outcome;
    }
    return 'delivered';
  }

  /**
   * Arms the next milestone and, while en route, the location ticks inside that
   * step. In manual mode (stepMs 0) there is no step to space ticks in, so none are sent.
   */
  private schedule(record: DeliveryRecord): void {
    const { stepMs, locationTicks } = this.knobs;
    if (this.stopped || this.paused || stepMs <= 0 || isFinished(record)) return;
    this.addTimer(record.uid, stepMs, () => this.step(record));

    const leg = this.enrouteLeg(record);
    if (!leg) return;
    for (let i = 1; i <= locationTicks; i++) {
      const share = i / (locationTicks + 1);
      this.addTimer(record.uid, stepMs * share, () => {
        record.courierAt = interpolate(leg.from, leg.to, ENROUTE_START + (1 - ENROUTE_START) * share);
        this.emit(record, leg.event, { final: false, location: true });
      });
    }
  }

  /** The leg being driven when the delivery sits at an en-route milestone. */
  private enrouteLeg(record: DeliveryRecord): { from: WireLatLng; to: WireLatLng; event: LocationEventName } | null {
    const courier = record.courier;
    if (!courier) return null;
    switch (milestoneOf(record).key) {
      case 'pickup_enroute':
        return { from: courier.origin, to: record.pickup.point, event: 'location.pickup_enroute' };
      case 'dropoff_enroute':
        return { from: this.dropoffLegStart(record), to: record.dropoff.point, event: 'location.dropoff_enroute' };
      case 'return_in_progress':
        return {
          from: record.returnFrom ?? record.dropoff.point,
          to: record.pickup.point,
          event: 'location.return_in_progress',
        };
      default:
        return null;
    }
  }

  private courierPositionAt(record: DeliveryRecord, key: MilestoneKey): WireLatLng | null {
    const courier = record.courier!;
    switch (key) {
      case 'assigned':
        return courier.origin;
      case 'pickup_enroute':
        return interpolate(courier.origin, record.pickup.point, ENROUTE_START);
      case 'pickup_arrived':
      case 'pickup_complete':
      case 'returned':
        return record.pickup.point;
      case 'dropoff_enroute':
        return interpolate(this.dropoffLegStart(record), record.dropoff.point, ENROUTE_START);
      case 'dropoff_arrived':
      case 'dropoff_complete':
        return record.dropoff.point;
      case 'return_in_progress':
        return interpolate(record.returnFrom ?? record.dropoff.point, record.pickup.point, ENROUTE_START);
      case 'provider_canceled':
        // Right after pickup the courier has just driven off; otherwise the cancel finds them where they are.
        return planOf(record)[record.step - 1]?.key === 'pickup_complete'
          ? interpolate(record.pickup.point, record.dropoff.point, DRIVEN_OFF)
          : record.courierAt;
      default:
        // A failure happens where the courier is.
        return record.courierAt;
    }
  }

  /** The dropoff leg starts at the pickup; a second attempt after a failure, from where the courier waited. */
  private dropoffLegStart(record: DeliveryRecord): WireLatLng {
    const reattempt = planOf(record)
      .slice(0, record.step)
      .some((m) => m.key === 'failed');
    return reattempt ? interpolate(record.dropoff.point, record.pickup.point, REATTEMPT_FROM) : record.pickup.point;
  }

  /**
   * When automatic, the simulator knows exactly when it will arrive; in manual
   * mode the first guess stands, and so does the last one once the package turns back.
   */
  private estimateArrival(record: DeliveryRecord): Date {
    const now = Date.now();
    const key = milestoneOf(record).key;
    if (key === 'dropoff_complete') return new Date(now);
    if (this.knobs.stepMs <= 0 || !DELIVERY_PATH.has(key)) return record.etaAt;
    // A plan that ends elsewhere is estimated as if it would arrive, as it still might for all the courier knows.
    const arrival = planOf(record).lastIndexOf(MILESTONE.dropoff_complete);
    return new Date(now + ((arrival >= 0 ? arrival : STEP.dropoffComplete) - record.step) * this.knobs.stepMs);
  }

  private addTimer(uid: string, ms: number, run: () => void): void {
    let set = this.timers.get(uid);
    if (!set) {
      set = new Set();
      this.timers.set(uid, set);
    }
    const timers = set;
    const timer = setTimeout(() => {
      timers.delete(timer);
      run();
    }, ms);
    timers.add(timer);
  }

  private clearTimers(uid: string): void {
    const set = this.timers.get(uid);
    if (!set) return;
    for (const timer of set) clearTimeout(timer);
    this.timers.delete(uid);
  }
}
