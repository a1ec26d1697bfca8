// Idempotency when a booking's answer is lost. The sandbox books, then answers
// later than UPSTREAM_TIMEOUT_MS (createAnswerDelayMs): the facade times out while
// the booking exists. A retry with the same key must book nothing new; it gets
// the first booking once that booking's webhook has arrived (it carries the
// facade's marker in platform_payload), BOOKING_OUTCOME_UNKNOWN until then.
// Upstream bookings are counted in the sandbox's request log.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BOOKING_MARKER_FIELD } from '../../src/domain/booking-marker.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';

const CREATE = /* GraphQL */ `
  mutation Book($input: DeliveryInput!, $key: String) {
    createDelivery(input: $input, idempotencyKey: $key) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
          trackingUrl
          payload
        }
      }
      ... on Error {
        code
        message
      }
      ... on BookingOutcomeUnknownError {
        since
      }
    }
  }
`;

const TIMEOUT_MS = 1000;

/**
 * Stands between the sandbox's webhooks and the facade: holds every webhook
 * until opened, then forwards each as it came (headers and body) and answers
 * with the facade's status.
 */
interface WebhookGate {
  url: string;
  /** Webhooks received so far. */
  received: number;
  open(): void;
  close(): Promise<void>;
}

async function startGate(target: () => string): Promise<WebhookGate> {
  let opened!: () => void;
  const isOpen = new Promise<void>((resolve) => (opened = resolve));
  const read = async (req: IncomingMessage) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  };
  const gate = { received: 0 } as WebhookGate;
  const server: Server = createServer((req, res) => {
    gate.received += 1;
    void (async () => {
      const body = await read(req);
      await isOpen;
      const answer = await fetch(target(), {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: req.headers.authorization ?? '' },
        body,
      });
      res.writeHead(answer.status, { 'content-type': 'application/json' }).end(await answer.text());
    })().catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  gate.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`;
  gate.open = opened;
  gate.close = () => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return gate;
}

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    env: { UPSTREAM_TIMEOUT_MS: String(TIMEOUT_MS) },
    // A held webhook is not given up on while the gate is shut.
    sandbox: { knobs: { createAnswerDelayMs: TIMEOUT_MS * 3, webhookTimeoutMs: 60_000 } },
  });
});
afterAll(async () => {
  await stack?.stop();
});

const book = (key: string, input = deliveryInput()) => stack.gql(CREATE, { input, key });
/** Bookings the sandbox was asked for since `mark` and has answered (the log records a request once answered). */
const bookingsSince = (mark: number) =>
  stack.sandbox.requestsSince(mark).filter((r) => r.method === 'POST' && /\/deliveries$/.test(r.path));
/** The bookings since `mark`, once the late answer of the first has been given. */
async function answeredBookings(mark: number) {
  await vi.waitFor(() => expect(bookingsSince(mark).some((r) => r.status === 201)).toBe(true), {
    timeout: 10_000,
    interval: 50,
  });
  return bookingsSince(mark);
}

describe('a booking whose answer is lost', () => {
  it('books once: concurrent and later retries book nothing, get BOOKING_OUTCOME_UNKNOWN, then the first booking once its webhook arrived', async () => {
    const gate = await startGate(() => stack.app.webhookUrl);
    stack.sandbox.setWebhookUrl(gate.url);
    try {
      const mark = stack.sandbox.requestCount;
      // The first request and a concurrent retry while it is still waiting for its answer.
      const first = book('lost-answer');
      const concurrent = book('lost-answer');
      const [firstResult, concurrentResult] = await Promise.all([first, concurrent]);
      expect(firstResult.errors?.[0]?.extensions?.code).toBe('UPSTREAM_TIMEOUT');
      expect(concurrentResult.data?.createDelivery).toMatchObject({
        __typename: 'BookingOutcomeUnknownError',
        code: 'BOOKING_OUTCOME_UNKNOWN',
      });

      // A later retry: the same, with what to do.
      const later = (await book('lost-answer')).data?.createDelivery;
      expect(later).toMatchObject({ __typename: 'BookingOutcomeUnknownError', code: 'BOOKING_OUTCOME_UNKNOWN' });
      expect(later.message).toMatch(/same key/);
      expect(later.message).toMatch(/new key/);
      expect(Date.parse(later.since)).toBeLessThanOrEqual(Date.now());
      // The booking exists upstream, its delivery.created is held at the gate (one per booking; its answer is still on
      // its way): one booking.
      expect(gate.received).toBe(1);

      // Other input with the key is still a conflict.
      const other = (await book('lost-answer', deliveryInput({ description: 'Something else' }))).data?.createDelivery;
      expect(other).toMatchObject({ code: 'IDEMPOTENCY_CONFLICT' });

      // The booking's delivery.created arrives: the retry returns that booking.
      gate.open();
      let booked: any;
      await vi.waitFor(
        async () => {
          booked = (await book('lost-answer')).data?.createDelivery;
          expect(booked.__typename).toBe('MutationCreateDeliverySuccess');
        },
        { timeout: 10_000, interval: 50 },
      );
      const { uid, trackingUrl, payload } = booked.data;
      expect(trackingUrl).toContain(uid);
      // The facade's marker went to the upstream but never comes back out.
      expect(payload).toEqual(deliveryInput().payload);
      expect(gate.received).toBe(1);
      expect(await answeredBookings(mark)).toHaveLength(1);

      // The key owns the booking (learned from the webhook); the other merchant does not see it.
      const read = /* GraphQL */ `
        query ($uid: ID!) {
          delivery(uid: $uid) {
            uid
            payload
            events(first: 10) {
              edges {
                node {
                  name
                  delivery {
                    payload
                  }
                }
              }
            }
          }
        }
      `;
      const mine = await stack.gql(read, { uid });
      expect(mine.data.delivery.payload).toEqual(deliveryInput().payload);
      const events = mine.data.delivery.events.edges.map((edge: any) => edge.node);
      expect(events.map((event: any) => event.name)).toContain('delivery.created');
      for (const event of events) expect(event.delivery.payload).toEqual(deliveryInput().payload);
      expect(JSON.stringify(mine)).not.toContain(BOOKING_MARKER_FIELD);
      expect((await stack.gql(read, { uid }, stack.otherKey)).data.delivery).toBeNull();
    } finally {
      stack.sandbox.setWebhookUrl(stack.app.webhookUrl);
      await gate.close();
    }
  });

  it('returns the booking at once when its webhook came before the timeout', async () => {
    const mark = stack.sandbox.requestCount;
    const first = await book('webhook-first');
    // The webhook went straight to the facade, long before the answer: the first request may already have it.
    await stack.sandbox.idle();
    const retry = (await book('webhook-first')).data?.createDelivery;
    expect(retry.__typename).toBe('MutationCreateDeliverySuccess');
    if (!first.errors) expect(first.data.createDelivery.data.uid).toBe(retry.data.uid);
    else expect(first.errors[0]?.extensions?.code).toBe('UPSTREAM_TIMEOUT');
    expect(await answeredBookings(mark)).toHaveLength(1);
  });
});

describe('a refusal that booked nothing', () => {
  beforeAll(() => stack.sandbox.setKnobs({ createAnswerDelayMs: 0 }));
  afterAll(() => stack.sandbox.setKnobs({ createAnswerDelayMs: TIMEOUT_MS * 3, errorRate: 0 }));

  it('frees the key after the upstream refuses the input (422): the corrected input books with the same key', async () => {
    const mark = stack.sandbox.requestCount;
    // The facade leaves "SUV or larger" to the upstream, which refuses a bike.
    const refused = (await book('refused-422', deliveryInput({ style: 'OVERSIZE', minimumVehicleSize: 'BIKE' }))).data
      ?.createDelivery;
    expect(refused).toMatchObject({ __typename: 'ValidationError', code: 'VALIDATION_FAILED' });
    const corrected = (await book('refused-422', deliveryInput({ style: 'OVERSIZE', minimumVehicleSize: 'VAN' }))).data
      ?.createDelivery;
    expect(corrected.__typename).toBe('MutationCreateDeliverySuccess');
    expect(bookingsSince(mark).map((r) => r.status)).toEqual([422, 201]);
  });

  it('frees the key after a 503 (the upstream did not handle the request): the retry books', async () => {
    const mark = stack.sandbox.requestCount;
    stack.sandbox.setKnobs({ errorRate: 1 });
    const failed = await book('refused-503');
    expect(failed.errors?.[0]?.extensions?.code).toBe('UPSTREAM_UNAVAILABLE');
    stack.sandbox.setKnobs({ errorRate: 0 });
    const retry = (await book('refused-503')).data?.createDelivery;
    expect(retry.__typename).toBe('MutationCreateDeliverySuccess');
    expect(bookingsSince(mark).map((r) => r.status)).toEqual([503, 201]);
  });
});
