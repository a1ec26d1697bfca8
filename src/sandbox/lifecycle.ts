// The milestone simulator: moves each delivery created → assigned → … →
// dropoff_complete, one milestone every `stepMs` (or on advance()), moves its
// courier between the coordinates, and announces each step as events.
import type { LocationEventName } from '../upstream/wire.js';
import type { SandboxKnobs } from './index.js';
import {
  MILESTONES,
  cancellationFeeCents,
  STEP,
  interpolate,
  isFinished,
  pickCourier,
  type DeliveryRecord,
  type SandboxState,
} from './state.js';

/** Where the courier is when an en-route milestone fires: a tenth of the way along. */
const ENROUTE_START = 0.1;

/** Receives every event as it happens; `final` marks the delivery's last one. */
export type EmitEvent = (record: DeliveryRecord, eventName: string, options: { final: boolean; location: boolean }) => void;

export class LifecycleError extends Error {
  override readonly name = 'LifecycleError';
  constructor(
    readonly code: 'not_found' | 'finished',
    message: string,
  ) {
    super(message);
  }
}

export class LifecycleSimulator {
  /** Pending step and location-tick timers per delivery uid. */
  private readonly timers = new Map<string, Set<NodeJS.Timeout>>();
  private stopped = false;

  constructor(
    private readonly state: SandboxState,
    private readonly knobs: SandboxKnobs,
    private readonly emit: EmitEvent,
  ) {}

  /** Announces a new delivery and sets its clock running. */
  start(record: DeliveryRecord): void {
    record.etaAt = this.estimateArrival(record);
    this.emit(record, MILESTONES[STEP.created]!.event, { final: false, location: false });
    this.schedule(record);
  }

  /** Moves one delivery to its next milestone now. */
  async advance(uid: string): Promise<void> {
    const record = this.state.deliveries.get(uid);
    if (!record) throw new LifecycleError('not_found', `no delivery ${uid}`);
    if (isFinished(record)) throw new LifecycleError('finished', `delivery ${uid} is already ${record.canceled ? 'canceled' : 'delivered'}`);
    this.step(record);
  }

  /**
   * Cancels if the courier has not picked the package up yet; returns the fee
   * charged, or null when cancelling is refused.
   */
  cancel(record: DeliveryRecord, reason: string): { feeCents: number } | null {
    if (isFinished(record) || record.step >= STEP.pickupComplete) return null;
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

  stop(): void {
    this.stopped = true;
    for (const uid of [...this.timers.keys()]) this.clearTimers(uid);
  }

  private step(record: DeliveryRecord): void {
    this.clearTimers(record.uid);
    const next = record.step + 1;
    record.step = next;
    const milestone = MILESTONES[next]!;

    if (next === STEP.assigned) record.courier = pickCourier(record);
    record.courierAt = this.courierPositionAt(record, next);
    record.etaAt = this.estimateArrival(record);

    const final = next === STEP.dropoffComplete;
    this.emit(record, milestone.event, { final, location: false });
    if (milestone.location) this.emit(record, milestone.location, { final: false, location: true });
    if (!final) this.schedule(record);
  }

  /**
   * Arms the next milestone and, while en route, the location ticks inside that
   * step. In manual mode (stepMs 0) there is no step to space ticks in, so none are sent.
   */
  private schedule(record: DeliveryRecord): void {
    const { stepMs, locationTicks } = this.knobs;
    if (this.stopped || stepMs <= 0 || isFinished(record)) return;
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
  private enrouteLeg(record: DeliveryRecord) {
    const courier = record.courier;
    if (!courier) return null;
    if (record.step === STEP.pickupEnroute) {
      return { from: courier.origin, to: record.pickup.point, event: 'location.pickup_enroute' as LocationEventName };
    }
    if (record.step === STEP.dropoffEnroute) {
      return { from: record.pickup.point, to: record.dropoff.point, event: 'location.dropoff_enroute' as LocationEventName };
    }
    return null;
  }

  private courierPositionAt(record: DeliveryRecord, step: number) {
    const courier = record.courier!;
    switch (step) {
      case STEP.assigned:
        return courier.origin;
      case STEP.pickupEnroute:
        return interpolate(courier.origin, record.pickup.point, ENROUTE_START);
      case STEP.pickupArrived:
      case STEP.pickupComplete:
        return record.pickup.point;
      case STEP.dropoffEnroute:
        return interpolate(record.pickup.point, record.dropoff.point, ENROUTE_START);
      default:
        return record.dropoff.point;
    }
  }

  /** When automatic, the simulator knows exactly when it will arrive; in manual mode the first guess stands. */
  private estimateArrival(record: DeliveryRecord): Date {
    const now = Date.now();
    if (record.step === STEP.dropoffComplete) return new Date(now);
    if (this.knobs.stepMs <= 0) return record.etaAt;
    return new Date(now + (STEP.dropoffComplete - record.step) * this.knobs.stepMs);
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
