// Tracking ends where the delivery ends, whatever the webhooks do (issue 30). A
// property over the sandbox's lifecycles: each run books a few deliveries side
// by side, each with a random outcome (a merchant cancel before pickup now and
// then) and a random script for its webhooks (as emitted, reversed, a seeded
// shuffle or a random selector list; some sent twice, some lost beyond the
// retries, now and then every delivery.* event or every event lost; some held
// back and released at a random later step), and drives them through
// the sandbox with random small pauses, while the facade polls (a short
// RECONCILE_INTERVAL_MS and FINALITY_GRACE_MS). Then, for each delivery:
// - deliveryUpdated, followed from the booking and from a random later step,
//   ends at the upstream's final state and completes, and only once the
//   upstream has settled there; every status it sent is one the upstream went
//   through, in the upstream's order, none twice;
// - courierLocation completes, and only once the upstream has settled;
// - a new subscriber's first message is that state, and it completes;
// - a read (`delivery(uid)`) says it, and so does the log (its last event that
//   is not stale);
// - every message's delivery is the delivery as known after it (issue 38): the
//   tracking URL and payload from the first message on, and nothing a message
//   showed (price, ETA, addresses, courier) is gone from a later one.
// Over real HTTP and graphql-ws, on the embedded SQLite store and on Redis.
//
// Replaying: the seed is printed (and fast-check names it, with the path, on a
// failure): PROPERTY_SEED=<seed> [PROPERTY_PATH=<path>] PROPERTY_RUNS=<runs>.
// PROPERTY_SHRINK=1 lets fast-check shrink a failure (each run takes a second
// or two, so it is off by default). The sandbox's own draws follow the script's
// seed; the timing of the facade's reads does not replay exactly.
import fc from 'fast-check';
import type { Client } from 'graphql-ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OUTCOMES, plannedWebhooks, type Outcome } from '@delivery-graph/sandbox';
import type { Stack } from '../helpers/stack.js';
import {
  asStatus,
  bookScripted,
  cancelThroughFacade,
  follow,
  settled,
  trackingStores,
  truthOf,
  type Followed,
} from '../helpers/tracking.js';
import { wsClient } from '../helpers/ws-client.js';

function fromEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value)) throw new Error(`${name} must be an integer, not ${raw}`);
  return value;
}

const RUNS = fromEnv('PROPERTY_RUNS', 16);
const SEED = fromEnv('PROPERTY_SEED', (Date.now() ^ Math.floor(Math.random() * 0x7fffffff)) | 0);
const PATH = process.env.PROPERTY_PATH || undefined;
const SHRINK = ['1', 'true'].includes(process.env.PROPERTY_SHRINK ?? '');
/** Deliveries driven side by side in each run. */
const PER_RUN = 3;
const RECONCILE_INTERVAL_MS = 100;
/**
 * Long beside the pauses between steps (at most 120 ms): a cancel or failure the
 * upstream moves on from is never confirmed final by a read that came too early.
 * A delivery that truly ends canceled or failed before pickup completes about this long after.
 */
const FINALITY_GRACE_MS = 1_000;
/** How long a subscription may take to complete once the upstream has settled (a safety net, not a wait). */
const SETTLE_MS = FINALITY_GRACE_MS + 9_000;

const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name status source stale delivery {
  trackingUrl payload estimatedDropoffAt price { amount currency } pickup { address { street } }
  dropoff { address { street } } courier { name } } } }`;
const LOCATION = `subscription($uid: ID!) { courierLocation(uid: $uid) { milestone } }`;
const READ = `query($uid: ID!) { delivery(uid: $uid) { status events { edges { node { name status source stale } } } } }`;

interface Lifecycle {
  outcome: Outcome;
  order: 'as_emitted' | 'reversed' | 'shuffled' | number[];
  drop: Array<number | string>;
  duplicate: number[];
  /** Kept back while the lifecycle goes on, released after step `releaseAt` (what is held after that, at the end). */
  hold: number[];
  releaseAt: number;
  seed: number;
  /** A merchant cancel instead of this step (before pickup), or none. */
  cancelAt: number | null;
  /** Milliseconds to wait after each step, so the facade's reads fall between milestones, or not. */
  pauses: number[];
  /** The step before which a second subscriber starts following. */
  joinAt: number;
}

/** Steps from the booking to the end: one per milestone after `created`. */
const stepsOf = (outcome: Outcome) =>
  plannedWebhooks(outcome).filter((name) => name.startsWith('delivery.')).length - 1;

const lifecycle: fc.Arbitrary<Lifecycle> = fc.constantFrom(...OUTCOMES).chain((outcome) => {
  const indexes = plannedWebhooks(outcome).map((_, index) => index);
  const steps = stepsOf(outcome);
  return fc.record({
    outcome: fc.constant(outcome),
    order: fc.oneof(
      fc.constant('as_emitted' as const),
      fc.constant('reversed' as const),
      fc.constant('shuffled' as const),
      fc.shuffledSubarray(indexes, { minLength: 1 }),
    ),
    drop: fc.oneof(
      { weight: 6, arbitrary: fc.subarray<number | string>(indexes, { maxLength: 3 }) },
      // Every status event lost (positions still come), or every event: polling alone.
      { weight: 1, arbitrary: fc.constant<Array<number | string>>(['delivery.*']) },
      { weight: 1, arbitrary: fc.constant<Array<number | string>>(['*']) },
    ),
    duplicate: fc.subarray(indexes, { maxLength: 4 }),
    hold: fc.oneof(
      { weight: 2, arbitrary: fc.constant<number[]>([]) },
      { weight: 1, arbitrary: fc.subarray(indexes, { minLength: 1, maxLength: 3 }) },
    ),
    releaseAt: fc.nat({ max: steps }),
    seed: fc.nat(),
    cancelAt: fc.oneof({ weight: 4, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.nat({ max: 3 }) }),
    pauses: fc.array(fc.constantFrom(0, 0, 5, 30, 120), { minLength: steps, maxLength: steps }),
    joinAt: fc.nat({ max: steps }),
  });
});

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Whether `seen` is a subsequence of `path`: each status one the upstream went through, after the one before it. */
function inUpstreamOrder(seen: readonly string[], path: readonly string[]): boolean {
  let at = 0;
  for (const status of seen) {
    while (at < path.length && path[at] !== status) at += 1;
    if (at === path.length) return false;
    at += 1;
  }
  return true;
}

/** What a message's delivery must keep once known (the fee "if cancelled now" is not: it ends at pickup). */
const KEPT = ['trackingUrl', 'payload', 'estimatedDropoffAt', 'price', 'pickup', 'dropoff', 'courier'] as const;

/**
 * Where a subscription's messages lose what the delivery was known to have: the tracking URL or payload missing from
 * the first, or a field an earlier message showed missing from a later one. Empty when none.
 */
function forgotten(messages: ReadonlyArray<{ name: string; delivery: Record<string, any> }>): string[] {
  const problems: string[] = [];
  const known = new Set<string>();
  const has = (delivery: Record<string, any>, field: (typeof KEPT)[number]) =>
    field === 'pickup' || field === 'dropoff' ? delivery[field]?.address != null : delivery[field] != null;
  messages.forEach(({ name, delivery }, index) => {
    if (index === 0 && (delivery.trackingUrl == null || delivery.payload == null))
      problems.push(`message 0 (${name}) has no tracking URL or payload`);
    for (const field of KEPT) {
      if (has(delivery, field)) known.add(field);
      else if (known.has(field)) problems.push(`message ${index} (${name}) lost ${field}`);
    }
  });
  return problems;
}

/** Drives one delivery through its lifecycle and checks what the facade says of it. */
async function track(stack: Stack, client: Client, plan: Lifecycle): Promise<void> {
  const uid = await bookScripted(stack, {
    sandbox_outcome: plan.outcome,
    sandbox_webhooks: {
      order: plan.order,
      drop: plan.drop,
      duplicate: plan.duplicate,
      hold: plan.hold,
      seed: plan.seed,
    },
  });
  const subscriptions: Followed[] = [];
  const start = (query: string) => {
    const followed = follow(client, stack, uid, query);
    subscriptions.push(followed);
    return followed;
  };
  try {
    const early = start(UPDATED);
    const pins = start(LOCATION);
    await early.waitFor(1);
    let late: Followed | undefined;
    for (let step = 0; !truthOf(stack, uid).finished; step += 1) {
      if (step === plan.joinAt) late = start(UPDATED);
      if (step === plan.cancelAt) await cancelThroughFacade(stack, uid);
      else await stack.sandbox.advance(uid);
      // Held events come late, in the middle of the lifecycle: resolves once the facade has answered them.
      if (step === plan.releaseAt && plan.hold.length > 0) await stack.sandbox.releaseWebhooks(uid, plan.hold);
      // Part of the schedule, not a wait for a result: reads fall between milestones, or not.
      if (plan.pauses[step]) await pause(plan.pauses[step]!);
    }
    late ??= start(UPDATED);
    // What is still held (emitted after its release, or released at the last step) comes after the end.
    if (plan.hold.length > 0) await stack.sandbox.releaseWebhooks(uid);
    // Every webhook not dropped has been answered: the facade has stored it.
    await stack.sandbox.idle();
    const truth = truthOf(stack, uid);
    const expected = asStatus(truth.status);
    const path = [
      'CREATED',
      ...truth.events.flatMap((event) => (event.read_status ? [asStatus(event.read_status)] : [])),
    ];
    const story = `${uid} ${JSON.stringify(plan)}: upstream ${expected}, sent ${JSON.stringify(truth.sent)}`;

    for (const [name, updates] of [
      ['from the booking', early],
      [`from step ${plan.joinAt}`, late],
    ] as const) {
      await settled(updates, SETTLE_MS, `deliveryUpdated ${name}, ${story}`);
      const seen = updates.items.map((item) => item.deliveryUpdated);
      const statuses = seen.map((message) => message.status as string);
      const said = `deliveryUpdated ${name} saw ${JSON.stringify(seen)}; ${story}`;
      expect(updates.errors, said).toEqual([]);
      expect(updates.completed, said).toBe(true);
      expect(statuses.at(-1), said).toBe(expected);
      expect(updates.atCompletion, said).toEqual({ status: expected, finished: true });
      expect(inUpstreamOrder(statuses, path), `${said}; upstream path ${JSON.stringify(path)}`).toBe(true);
      expect(forgotten(seen), said).toEqual([]);
    }
    await settled(pins, SETTLE_MS, `courierLocation, ${story}`);
    expect(pins.errors, `courierLocation; ${story}`).toEqual([]);
    expect(pins.atCompletion, `courierLocation; ${story}`).toEqual({ status: expected, finished: true });

    const fresh = start(UPDATED);
    await settled(fresh, SETTLE_MS, `a new subscriber, ${story}`);
    expect(
      fresh.items[0]?.deliveryUpdated.status,
      `a new subscriber saw ${JSON.stringify(fresh.items)}; ${story}`,
    ).toBe(expected);
    expect(fresh.completed, story).toBe(true);
    expect(forgotten(fresh.items.map((item) => item.deliveryUpdated)), story).toEqual([]);

    const read = (await stack.gql(READ, { uid })).data.delivery;
    const log = read.events.edges.map((edge: any) => edge.node);
    expect(read.status, story).toBe(expected);
    expect(
      log.filter((event: any) => !event.stale && event.name.startsWith('delivery.')).at(-1)?.status,
      `the log ${JSON.stringify(log)}; ${story}`,
    ).toBe(expected);
  } catch (error) {
    // What the facade stored, in the order it stored it, beside what the sandbox sent (in the message above).
    const log = await stack.gql(READ, { uid }).catch(() => undefined);
    const events = log?.data?.delivery?.events.edges.map((edge: any) => [
      edge.node.name,
      edge.node.source,
      edge.node.stale,
    ]);
    if (error instanceof Error) error.message += `\nthe facade's log of ${uid}: ${JSON.stringify(events)}`;
    throw error;
  } finally {
    for (const subscription of subscriptions) subscription.dispose();
  }
}

const stores = trackingStores('tracking-property.test.ts');
beforeAll(() => stores.setup());
afterAll(() => stores.teardown());

describe.each(stores.cases)('tracking under any order the document allows, on %s', (kind, enabled) => {
  let stack: Stack;
  let client: Client;
  beforeAll(async () => {
    if (!enabled) return;
    stack = await stores.start(kind, {
      env: { RECONCILE_INTERVAL_MS: String(RECONCILE_INTERVAL_MS), FINALITY_GRACE_MS: String(FINALITY_GRACE_MS) },
    });
    client = wsClient(stack.app.url, stack.key);
  });
  afterAll(async () => {
    await client?.dispose();
    await stack?.stop();
  });

  it.skipIf(!enabled)(
    'deliveryUpdated, a new subscriber and a read all end where the upstream ends, and nothing completes before it',
    async () => {
      console.info(
        `tracking-property (${kind}): PROPERTY_SEED=${SEED} PROPERTY_RUNS=${RUNS}${PATH ? ` PROPERTY_PATH=${PATH}` : ''}`,
      );
      await fc.assert(
        fc.asyncProperty(fc.array(lifecycle, { minLength: PER_RUN, maxLength: PER_RUN }), async (plans) => {
          const outcomes = await Promise.allSettled(plans.map((plan) => track(stack, client, plan)));
          const failed = outcomes.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
          if (failed) throw failed.reason;
        }),
        { numRuns: RUNS, seed: SEED, ...(PATH ? { path: PATH } : {}), endOnFailure: !SHRINK },
      );
    },
    // A run takes a second or two (a cancel before pickup is confirmed only after the grace).
    RUNS * 6_000 + 30_000,
  );
});
