// A delivery's webhooks as a test scripts them: out of order (reversed, seeded
// shuffle, an explicit order), some lost beyond the retries, some twice, some
// held back until released; the global dropRate and webhookOrder knobs; and the
// history that says what the upstream really did. Against a real receiver over
// real HTTP; the read always tells the true state, whatever the webhooks said.
import fc from 'fast-check';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  OUTCOMES,
  plannedWebhooks,
  startSandbox,
  type DeliveryHistory,
  type Outcome,
  type Sandbox,
  type SandboxKnobs,
} from '../src/index.js';
import {
  startWebhookReceiver,
  type ReceivedEvent,
  type WebhookReceiver,
} from '../../../test/helpers/webhook-receiver.js';

const QUIET: Partial<SandboxKnobs> = {
  stepMs: 0,
  locationTicks: 3,
  duplicateRate: 0,
  reorderRate: 0,
  dropRate: 0,
  webhookOrder: 'as_emitted',
  returnRate: 0,
  seed: null,
  retryBaseMs: 10,
  webhookTimeoutMs: 1000,
};

let sandbox: Sandbox;
let receiver: WebhookReceiver;
let key: string;

beforeAll(async () => {
  sandbox = await startSandbox({ knobs: QUIET });
  key = sandbox.merchants[0]!.key;
  receiver = await startWebhookReceiver({ publicKeyPem: sandbox.publicKeyPem, issuer: sandbox.issuer });
  sandbox.setWebhookUrl(receiver.url);
});
afterEach(() => {
  sandbox.setKnobs(QUIET);
  sandbox.setWebhookUrl(receiver.url);
});
afterAll(async () => {
  await sandbox.stop();
  await receiver.close();
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${sandbox.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

const booking = (payload: Record<string, unknown>) => ({
  pickup_address_street: 'E 10th St',
  pickup_address_city: 'New York',
  pickup_address_country: 'US',
  pickup_name: 'Corner Deli',
  email: 'deli@example.com',
  dropoff_address_street: 'W 42nd St',
  dropoff_address_city: 'New York',
  dropoff_address_country: 'US',
  dropoff_name: 'Grace Hopper',
  package_delivery_mode: 'NOW',
  platform_payload: payload,
});

async function createDelivery(payload: Record<string, unknown> = {}): Promise<string> {
  const res = await call('POST', `/${sandbox.platformId}/deliveries`, booking(payload));
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.uid as string;
}

const read = async (uid: string) => (await call('GET', `/${sandbox.platformId}/deliveries/${uid}`)).body.data;

async function history(uid: string): Promise<DeliveryHistory> {
  const res = await fetch(`${sandbox.origin}/sandbox/deliveries/${uid}/history`);
  expect(res.status).toBe(200);
  return (await res.json()) as DeliveryHistory;
}

async function release(uid: string, events?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${sandbox.origin}/sandbox/deliveries/${uid}/webhooks/release`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: events === undefined ? '' : JSON.stringify({ events }),
  });
  return { status: res.status, body: await res.json() };
}

async function advance(uid: string, steps: number): Promise<void> {
  for (let i = 0; i < steps; i++) await sandbox.advance(uid);
}

/** Advances until the delivery ends, then waits for every webhook to be answered. */
async function finish(uid: string): Promise<void> {
  while (!(await history(uid)).finished) await sandbox.advance(uid);
  await sandbox.idle();
}

/** The names the receiver acknowledged for one delivery, in arrival order. */
const seen = (uid: string) =>
  receiver
    .events()
    .filter((e: ReceivedEvent) => e.uid === uid)
    .map((e) => e.event_name);

/** The reordered cancel, before and after the retried pickup. */
const CANCEL_AFTER_PICKUP = 'canceled_after_pickup_then_returned';

describe('holding webhooks back and releasing them', () => {
  it("delivers canceled before the retried pickup_complete, then the return: the issue's reordered cancel, step by step", async () => {
    const uid = await createDelivery({
      sandbox_outcome: CANCEL_AFTER_PICKUP,
      sandbox_webhooks: { hold: ['delivery.pickup_complete', 'location.pickup_complete'] },
    });
    // assigned, pickup_enroute, pickup_arrived, pickup_complete (held), canceled
    await advance(uid, 5);
    await sandbox.idle();
    expect(seen(uid)).toEqual([
      'delivery.created',
      'delivery.assigned',
      'location.assigned_driver',
      'delivery.pickup_enroute',
      'location.pickup_enroute',
      'delivery.pickup_arrived',
      'location.pickup_arrived',
      'delivery.canceled',
    ]);
    // The upstream knows better all along.
    expect((await read(uid)).status).toBe('Canceled');
    const before = await history(uid);
    expect(before.events.filter((e) => e.fate === 'held').map((e) => [e.index, e.event_name])).toEqual([
      [7, 'delivery.pickup_complete'],
      [8, 'location.pickup_complete'],
    ]);
    expect(before.events.map((e) => e.read_status)).toEqual([
      'CREATED',
      'ASSIGNED',
      'ASSIGNED',
      'PICKUP_ENROUTE',
      'PICKUP_ENROUTE',
      'PICKUP_ARRIVED',
      'PICKUP_ARRIVED',
      'PICKUP_COMPLETE',
      'PICKUP_COMPLETE',
      'Canceled',
    ]);
    expect(sandbox.webhookStats().held).toBeGreaterThanOrEqual(2);

    // Over HTTP: answered once the receiver has it.
    const released = await release(uid, ['delivery.pickup_complete']);
    expect(released).toEqual({ status: 200, body: { uid, released: [7] } });
    expect(seen(uid).at(-1)).toBe('delivery.pickup_complete');

    await advance(uid, 2);
    await sandbox.idle();
    // The library call releases whatever is still held.
    expect(await sandbox.releaseWebhooks(uid)).toEqual([8]);
    expect(seen(uid).slice(8)).toEqual([
      'delivery.pickup_complete',
      'delivery.return_in_progress',
      'location.return_in_progress',
      'delivery.returned',
      'location.pickup_complete',
    ]);
    const after = await history(uid);
    expect(after).toMatchObject({
      outcome: CANCEL_AFTER_PICKUP,
      status: 'RETURNED',
      finished: true,
      scripted: true,
      sent: [0, 1, 2, 3, 4, 5, 6, 9, 7, 10, 11, 12, 8],
    });
    expect(after.events.every((e) => e.fate === 'delivered')).toBe(true);
    expect((await read(uid)).status).toBe('RETURNED');
  });

  it('holds every event with "*", releases in the order the selectors give, and refuses bad releases', async () => {
    const uid = await createDelivery({ sandbox_webhooks: { hold: ['*'] } });
    await advance(uid, 2);
    await sandbox.idle();
    expect(seen(uid)).toEqual([]);
    expect(await sandbox.releaseWebhooks(uid, ['delivery.pickup_enroute', 'location.*', 0])).toEqual([3, 2, 4, 0]);
    expect(seen(uid)).toEqual([
      'delivery.pickup_enroute',
      'location.assigned_driver',
      'location.pickup_enroute',
      'delivery.created',
    ]);
    // Releasing what is not held sends nothing.
    expect(await sandbox.releaseWebhooks(uid, [0, 'delivery.dropoff_complete'])).toEqual([]);
    expect((await history(uid)).events.find((e) => e.index === 1)!.fate).toBe('held');

    expect((await release(uid, ['delivery.picked_up'])).status).toBe(400);
    expect((await release(uid, 'all')).status).toBe(400);
    expect((await release('no-such-delivery')).status).toBe(404);
    await expect(sandbox.releaseWebhooks('no-such-delivery')).rejects.toThrow(/no delivery/);
    expect((await fetch(`${sandbox.origin}/sandbox/deliveries/no-such-delivery/history`)).status).toBe(404);
  });
});

describe('ordering a delivery’s webhooks', () => {
  it('gathers them until the delivery ends, then sends them reversed', async () => {
    const uid = await createDelivery({ sandbox_webhooks: { order: 'reversed' } });
    await advance(uid, 4);
    await sandbox.idle();
    expect(seen(uid)).toEqual([]);
    expect((await history(uid)).events.every((e) => e.fate === 'waiting')).toBe(true);
    await finish(uid);
    expect(seen(uid)).toEqual([...plannedWebhooks('delivered')].reverse());
    expect((await read(uid)).status).toBe('DROPOFF_COMPLETE');
  });

  it('shuffles the same way for the same seed, and shows the seed it used when none was given', async () => {
    const orders: string[][] = [];
    for (let i = 0; i < 2; i++) {
      const uid = await createDelivery({
        sandbox_outcome: 'failed_then_returned',
        sandbox_webhooks: { order: 'shuffled', seed: 2024 },
      });
      await finish(uid);
      orders.push(seen(uid));
      expect((await history(uid)).seed).toBe(2024);
    }
    expect(orders[1]).toEqual(orders[0]);
    expect(orders[0]).not.toEqual(plannedWebhooks('failed_then_returned'));
    expect([...orders[0]!].sort()).toEqual([...plannedWebhooks('failed_then_returned')].sort());

    const unseeded = await createDelivery({ sandbox_webhooks: { order: 'shuffled' } });
    await finish(unseeded);
    const { seed } = await history(unseeded);
    expect(seed).toEqual(expect.any(Number));
    // Its seed replays its order.
    const replay = await createDelivery({ sandbox_webhooks: { order: 'shuffled', seed } });
    await finish(replay);
    expect(seen(replay)).toEqual(seen(unseeded));
  });

  it("sends an explicit order: the issue's reordered cancel in one batch, without location events", async () => {
    const order = [
      'delivery.created',
      'delivery.assigned',
      'delivery.pickup_enroute',
      'delivery.pickup_arrived',
      'delivery.canceled',
      'delivery.pickup_complete',
    ];
    const uid = await createDelivery({
      sandbox_outcome: CANCEL_AFTER_PICKUP,
      sandbox_webhooks: { order, drop: ['location.*'] },
    });
    await finish(uid);
    // Listed first, then the rest (return_in_progress, returned) in true order.
    expect(seen(uid)).toEqual([...order, 'delivery.return_in_progress', 'delivery.returned']);
    const story = await history(uid);
    expect(story.events.filter((e) => e.fate === 'dropped').map((e) => e.event_name)).toEqual(
      plannedWebhooks(CANCEL_AFTER_PICKUP).filter((n) => n.startsWith('location.')),
    );
    expect(story.status).toBe('RETURNED');
  });

  it('sends an event listed twice twice, by index', async () => {
    const uid = await createDelivery({
      sandbox_outcome: 'canceled_before_pickup',
      sandbox_webhooks: { order: [7, 0, 7] },
    });
    await finish(uid);
    expect(seen(uid)).toEqual([
      'delivery.canceled',
      'delivery.created',
      'delivery.canceled',
      ...plannedWebhooks('canceled_before_pickup').slice(1, 7),
    ]);
  });
});

describe('losing and repeating webhooks', () => {
  it('drops events for good, the final one included, while the read ends where the upstream ends', async () => {
    const before = sandbox.webhookStats();
    const uid = await createDelivery({
      sandbox_webhooks: { drop: ['delivery.pickup_complete', 'location.pickup_complete', 'delivery.dropoff_complete'] },
    });
    await finish(uid);
    expect(seen(uid)).toEqual(
      plannedWebhooks('delivered').filter(
        (n) => !['delivery.pickup_complete', 'location.pickup_complete', 'delivery.dropoff_complete'].includes(n),
      ),
    );
    expect(sandbox.webhookStats().dropped - before.dropped).toBe(3);
    const story = await history(uid);
    expect(story.events.filter((e) => e.fate === 'dropped').map((e) => e.index)).toEqual([7, 8, 13]);
    expect(story.events.filter((e) => e.fate === 'dropped').every((e) => e.copies === 0 && e.acknowledged === 0)).toBe(
      true,
    );
    expect((await read(uid)).status).toBe('DROPOFF_COMPLETE');
    expect(story).toMatchObject({ status: 'DROPOFF_COMPLETE', finished: true });
  });

  it('picks the n-th occurrence with name#n: the second attempt’s dropoff_enroute lost, the first kept', async () => {
    const uid = await createDelivery({
      sandbox_outcome: 'failed_then_delivered',
      sandbox_webhooks: { drop: ['delivery.dropoff_enroute#2'] },
    });
    await finish(uid);
    const names = seen(uid);
    expect(names.filter((n) => n === 'delivery.dropoff_enroute')).toHaveLength(1);
    expect(names.indexOf('delivery.dropoff_enroute')).toBeLessThan(names.indexOf('delivery.failed'));
    expect(names.filter((n) => n === 'delivery.dropoff_arrived')).toHaveLength(2);
  });

  it('sends duplicates right after the first copy, and the script leaves the global fault knobs out', async () => {
    sandbox.setKnobs({ duplicateRate: 1, dropRate: 1 });
    const uid = await createDelivery({
      sandbox_outcome: 'canceled_before_pickup',
      sandbox_webhooks: { duplicate: ['delivery.canceled', 0] },
    });
    await finish(uid);
    const planned = plannedWebhooks('canceled_before_pickup');
    expect(seen(uid)).toEqual([planned[0], ...planned.slice(0, -1), planned.at(-1), planned.at(-1)]);
    const story = await history(uid);
    expect(story.events.map((e) => e.acknowledged)).toEqual(
      planned.map((_, i) => (i === 0 || i === planned.length - 1 ? 2 : 1)),
    );
  });
});

describe('the global knobs', () => {
  it('dropRate 1 loses every webhook of unscripted deliveries; the read still moves on', async () => {
    sandbox.setKnobs({ dropRate: 1 });
    const uid = await createDelivery();
    await finish(uid);
    expect(seen(uid)).toEqual([]);
    expect((await history(uid)).events.every((e) => e.fate === 'dropped')).toBe(true);
    expect((await read(uid)).status).toBe('DROPOFF_COMPLETE');
  });

  it('webhookOrder applies to deliveries booked after it is set, with the seed knob making the shuffle replayable', async () => {
    sandbox.setKnobs({ webhookOrder: 'reversed' });
    const reversed = await createDelivery();
    sandbox.setKnobs({ webhookOrder: 'as_emitted' });
    await finish(reversed);
    expect(seen(reversed)).toEqual([...plannedWebhooks('delivered')].reverse());

    const shuffledWith = async (seed: number) => {
      const fresh = await startSandbox({ knobs: { ...QUIET, webhookOrder: 'shuffled', seed } });
      const own = await startWebhookReceiver({ publicKeyPem: fresh.publicKeyPem, issuer: fresh.issuer });
      fresh.setWebhookUrl(own.url);
      try {
        const res = await fetch(`${fresh.url}/${fresh.platformId}/deliveries`, {
          method: 'POST',
          headers: { authorization: `Bearer ${fresh.merchants[0]!.key}`, 'content-type': 'application/json' },
          body: JSON.stringify(booking({})),
        });
        const { uid } = (await res.json()) as { uid: string };
        while (!fresh.history(uid)!.finished) await fresh.advance(uid);
        await fresh.idle();
        const planned = plannedWebhooks('delivered');
        expect(own.events().map((e) => e.event_name)).toEqual(fresh.history(uid)!.sent.map((i) => planned[i]));
        return fresh.history(uid)!.sent;
      } finally {
        await fresh.stop();
        await own.close();
      }
    };
    const first = await shuffledWith(77);
    expect(await shuffledWith(77)).toEqual(first);
    expect([...first].sort((a, b) => a - b)).toEqual(plannedWebhooks('delivered').map((_, i) => i));
    expect(first).not.toEqual(plannedWebhooks('delivered').map((_, i) => i));
  });

  it('takes dropRate, webhookOrder and seed over the control route and refuses bad values', async () => {
    const knobs = (body: unknown) =>
      fetch(`${sandbox.origin}/sandbox/knobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect((await knobs({ dropRate: 0.5, webhookOrder: 'shuffled', seed: 3 })).status).toBe(200);
    expect(sandbox.knobs).toMatchObject({ dropRate: 0.5, webhookOrder: 'shuffled', seed: 3 });
    for (const bad of [{ dropRate: 2 }, { webhookOrder: 'sideways' }, { seed: 2 ** 32 }])
      expect((await knobs(bad)).status, JSON.stringify(bad)).toBe(400);
    const info = (await (await fetch(`${sandbox.origin}/sandbox/info`)).json()) as { knobs: SandboxKnobs };
    expect(info.knobs).toMatchObject({ dropRate: 0.5, webhookOrder: 'shuffled', seed: 3 });
  });
});

describe('polling only', () => {
  it('sends nothing with no URL on file, records every event as not sent, and the read tells the state', async () => {
    sandbox.setWebhookUrl(undefined);
    const sent = sandbox.webhookStats().sent;
    const uid = await createDelivery({
      sandbox_outcome: CANCEL_AFTER_PICKUP,
      sandbox_webhooks: { hold: ['delivery.pickup_complete'] },
    });
    await advance(uid, 5);
    expect((await read(uid)).status).toBe('Canceled');
    await finish(uid);
    expect(sandbox.webhookStats().sent).toBe(sent);
    expect(seen(uid)).toEqual([]);
    const story = await history(uid);
    expect(story.events.every((e) => e.fate === 'not_sent')).toBe(true);
    expect(story.events.map((e) => e.event_name)).toEqual(plannedWebhooks(CANCEL_AFTER_PICKUP));
    expect((await read(uid)).status).toBe('RETURNED');
  });
});

describe('the script is checked at booking', () => {
  it('refuses a bad sandbox_webhooks on both groups, naming the entry', async () => {
    for (const [script, pattern] of [
      ['shuffled', /sandbox_webhooks field must be an object/],
      [{ order: 'sideways' }, /sandbox_webhooks\.order field must be one of as_emitted, reversed, shuffled/],
      [{ drop: ['delivery.picked_up'] }, /sandbox_webhooks\.drop field has "delivery.picked_up": not an event name/],
      [{ hold: [-1] }, /sandbox_webhooks\.hold field has -1/],
      [{ duplicate: 'delivery.created' }, /sandbox_webhooks\.duplicate field must be a list/],
      [{ drop: ['delivery.failed#0'] }, /occurrence after # counts from 1/],
      [{ seed: 1.5 }, /sandbox_webhooks\.seed field must be an integer/],
      [{ reorder: true }, /sandbox_webhooks\.reorder field is not known/],
    ] as const) {
      const res = await call('POST', `/${sandbox.platformId}/deliveries`, booking({ sandbox_webhooks: script }));
      expect(res.status, JSON.stringify(script)).toBe(422);
      expect(res.body.errors.platform_payload.join(' ')).toMatch(pattern);
    }
    expect(() =>
      sandbox.seedPartnerOrder(key, {
        partner_reference: 'bad-script',
        partner_payload: { sandbox_webhooks: { order: 'sideways' } },
      }),
    ).toThrow(/sandbox_webhooks/);
    // A partner order takes a script in its partner_payload.
    const order = sandbox.seedPartnerOrder(key, {
      partner_reference: `script-${Date.now()}`,
      partner_payload: { sandbox_webhooks: { drop: [0] } },
    });
    await sandbox.advance(order.uid);
    await sandbox.idle();
    expect(seen(order.uid)).toEqual(['delivery.assigned', 'location.assigned_driver']);
  });
});

describe('any lifecycle in any order (property)', () => {
  /**
   * An outcome, and a script over its planned events: an explicit order or a seeded shuffle, with drops and duplicates.
   */
  const scripted = fc.constantFrom(...OUTCOMES).chain((outcome) => {
    const indexes = plannedWebhooks(outcome).map((_, i) => i);
    return fc.record({
      outcome: fc.constant(outcome as Outcome),
      order: fc.oneof(
        fc.shuffledSubarray(indexes),
        fc.constantFrom('shuffled' as const, 'as_emitted' as const, 'reversed' as const),
      ),
      seed: fc.nat(),
      drop: fc.subarray(indexes),
      duplicate: fc.subarray(indexes),
    });
  });

  it('delivers exactly what the script says, in that order, and the read ends where the history ends', async () => {
    await fc.assert(
      fc.asyncProperty(scripted, async ({ outcome, order, seed, drop, duplicate }) => {
        const uid = await createDelivery({
          sandbox_outcome: outcome,
          sandbox_webhooks: { order, seed, drop, duplicate },
        });
        await finish(uid);
        const planned = plannedWebhooks(outcome);
        const story = await history(uid);
        const kept = planned.map((_, i) => i).filter((i) => !drop.includes(i));
        const copies = (i: number) => (duplicate.includes(i) ? 2 : 1);

        // The true order, whatever was sent.
        expect(story.events.map((e) => e.event_name)).toEqual(planned);
        // What the receiver saw is what the history says was sent.
        expect(seen(uid)).toEqual(story.sent.map((i) => planned[i]));
        // Every kept event as many times as its copies, no dropped one.
        for (const i of planned.keys())
          expect(story.sent.filter((s) => s === i).length, `event ${i}`).toBe(drop.includes(i) ? 0 : copies(i));
        // An explicit order: the listed events first, each followed by its duplicate, then the rest in true order.
        if (Array.isArray(order)) {
          const listed = order.filter((i) => kept.includes(i));
          const expected = [...listed, ...kept.filter((i) => !listed.includes(i))].flatMap((i) =>
            Array(copies(i)).fill(i),
          );
          expect(story.sent).toEqual(expected);
        }
        if (order === 'as_emitted') expect(story.sent).toEqual(kept.flatMap((i) => Array(copies(i)).fill(i)));
        if (order === 'reversed')
          expect(story.sent).toEqual([...kept].reverse().flatMap((i) => Array(copies(i)).fill(i)));
        // The read, the history's status and its last event's read status agree: the upstream's final state.
        const status = (await read(uid)).status;
        expect(story.status).toBe(status);
        expect(story.events.at(-1)!.read_status).toBe(status);
        expect(story.finished).toBe(true);
      }),
      { numRuns: 25 },
    );
  });
});
