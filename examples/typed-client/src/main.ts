// A typed delivery-graph client: book a delivery, then follow it live until it
// ends. Every operation below is written with graphql(`...`) from ./gql, which
// `npm run codegen` generates from ../../schema.graphql, so results and
// variables are checked by TypeScript against the schema.
//
//   DG_URL         the facade's GraphQL endpoint (default http://127.0.0.1:4000/graphql)
//   DG_KEY         a merchant key (default: the embedded sandbox's demo key)
//   DG_TIMEOUT_MS  give up after this long (default 120000)
import { randomUUID } from 'node:crypto';
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { graphql } from './gql/index.js';
import type { DeliveryStatus, TypedDocumentString } from './gql/graphql.js';

const url = process.env.DG_URL ?? 'http://127.0.0.1:4000/graphql';
const key = process.env.DG_KEY ?? 'sk_test_demo_merchant';
const timeoutMs = Number(process.env.DG_TIMEOUT_MS ?? 120_000);
if (!Number.isInteger(timeoutMs) || timeoutMs <= 0)
  fail(`DG_TIMEOUT_MS must be a positive whole number of milliseconds, got "${process.env.DG_TIMEOUT_MS}"`);

// --- The operations -----------------------------------------------------------

// createDelivery returns a union: the booked delivery, or an expected failure
// as data (every failure type implements the Error interface).
const BookDelivery = graphql(`
  mutation BookDelivery($input: DeliveryInput!, $idempotencyKey: String) {
    createDelivery(input: $input, idempotencyKey: $idempotencyKey) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
          status
          trackingUrl
        }
      }
      ... on ValidationError {
        fields {
          path
          message
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`);

// First the current state, then one event per milestone; the server completes
// the subscription after a terminal one.
const FollowDelivery = graphql(`
  subscription FollowDelivery($uid: ID!) {
    deliveryUpdated(uid: $uid) {
      status
      name
      receivedAt
      courierLocation {
        lat
        lng
      }
    }
  }
`);

// What each status means for this program. A Record over the generated union
// is exhaustive: when the schema gains a status, this stops compiling until
// the new status is placed here.
const OUTCOME: Record<DeliveryStatus, 'delivered' | 'ended' | 'ongoing'> = {
  CREATED: 'ongoing',
  ASSIGNED: 'ongoing',
  PICKUP_ENROUTE: 'ongoing',
  PICKUP_ARRIVED: 'ongoing',
  PICKUP_COMPLETE: 'ongoing',
  DROPOFF_ENROUTE: 'ongoing',
  DROPOFF_ARRIVED: 'ongoing',
  DROPOFF_COMPLETE: 'delivered',
  RETURN_IN_PROGRESS: 'ongoing',
  RETURNED: 'ended',
  CANCELED: 'ended',
  FAILED: 'ended',
  UNKNOWN: 'ongoing',
};

// --- Two small typed transports -----------------------------------------------

interface GraphQLErrorBody {
  message: string;
  extensions?: { code?: string };
}

/** One query or mutation over HTTP: the result type comes from the document. */
async function execute<TResult, TVariables>(
  document: TypedDocumentString<TResult, TVariables>,
  variables: TVariables,
): Promise<TResult> {
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/graphql-response+json, application/json',
      authorization: `Bearer ${key}`,
    },
    // A TypedDocumentString is a String: its text is the query.
    body: JSON.stringify({ query: document.toString(), variables }),
  });
  const text = await response.text();
  let body: { data?: TResult | null; errors?: GraphQLErrorBody[] };
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    throw new Error(`${url} answered HTTP ${response.status} with no GraphQL response: ${text.slice(0, 200)}`);
  }
  if (body.errors?.length) throw new Error(describeErrors(body.errors));
  if (!body.data) throw new Error(`${url} answered HTTP ${response.status} with no data`);
  return body.data;
}

// graphql-ws over the `ws` package (Node 20 has no global WebSocket); the key
// travels in the connection_init payload. Lazy: it connects on first subscribe.
const ws = createClient({
  url: url.replace(/^http/, 'ws'),
  webSocketImpl: WebSocket,
  connectionParams: { authorization: `Bearer ${key}` },
});

/** One subscription over WebSocket: each result is typed from the document. */
function subscribe<TResult, TVariables extends Record<string, unknown>>(
  document: TypedDocumentString<TResult, TVariables>,
  variables: TVariables,
) {
  return ws.iterate<TResult>({ query: document.toString(), variables });
}

// --- The program ----------------------------------------------------------------

async function main(): Promise<void> {
  const timer = setTimeout(() => fail(`timed out after ${timeoutMs} ms (DG_TIMEOUT_MS)`), timeoutMs);

  // 1. Book. The idempotency key makes a retry of this very call book nothing new.
  const { createDelivery: booking } = await execute(BookDelivery, {
    idempotencyKey: randomUUID(),
    input: {
      mode: 'NOW',
      pickup: {
        name: 'Ada Shop',
        email: 'shop@example.com',
        address: { street: '1 Main St', city: 'San Francisco', country: 'US' },
      },
      dropoff: {
        name: 'Grace Hopper',
        address: { street: '9 Elm St', city: 'San Francisco', country: 'US' },
      },
      // The sandbox sends back a share of its deliveries after pickup (SANDBOX_RETURN_RATE);
      // this entry makes this one arrive, so the run ends the same way every time. A real
      // upstream stores the payload untouched and ignores it.
      payload: { orderId: 'typed-client', sandbox_outcome: 'delivered' },
    },
  });

  // The union, narrowed by __typename. `never` in the default branch makes the
  // switch exhaustive: a new member in the schema is a compile error here.
  let uid: string;
  switch (booking.__typename) {
    case 'MutationCreateDeliverySuccess':
      uid = booking.data.uid;
      console.log(`booked ${uid} (${booking.data.status}); tracking page: ${booking.data.trackingUrl ?? 'none'}`);
      break;
    case 'ValidationError':
      return fail(
        `not booked, ${booking.code}: ${booking.message}\n${booking.fields.map((f) => `  ${f.path}: ${f.message}`).join('\n')}`,
      );
    case 'IdempotencyConflictError':
    case 'BookingOutcomeUnknownError':
      return fail(`not booked, ${booking.code}: ${booking.message}`);
    default: {
      const unexpected: never = booking;
      return fail(`unexpected result ${JSON.stringify(unexpected)}`);
    }
  }

  // 2. Follow it live, one line per event, until the server completes the stream.
  let last: DeliveryStatus | undefined;
  for await (const result of subscribe(FollowDelivery, { uid })) {
    if (result.errors?.length) fail(describeErrors(result.errors));
    if (!result.data) continue;
    const { status, name, receivedAt, courierLocation } = result.data.deliveryUpdated;
    const where = courierLocation
      ? `courier at ${courierLocation.lat.toFixed(5)},${courierLocation.lng.toFixed(5)}`
      : '';
    console.log(`${receivedAt}  ${status.padEnd(18)} ${name.padEnd(28)} ${where}`.trimEnd());
    last = status;
    // No break: the server completes the stream after the final event. A cancel or a
    // failure after pickup is not final: the return (RETURN_IN_PROGRESS, RETURNED) follows.
  }

  clearTimeout(timer);
  await ws.dispose();
  if (last === undefined) fail('the subscription ended without any event');
  if (OUTCOME[last] !== 'delivered') fail(`the delivery ended as ${last}, not DROPOFF_COMPLETE`);
  console.log('delivered');
}

// --- Errors ---------------------------------------------------------------------

function describeErrors(errors: readonly GraphQLErrorBody[]): string {
  return errors.map((e) => (e.extensions?.code ? `${e.extensions.code}: ${e.message}` : e.message)).join('; ');
}

/** graphql-ws rejects with an Error, a list of GraphQL errors, or a socket close event. */
function describe(error: unknown): string {
  if (error instanceof Error)
    return error.cause instanceof Error ? `${error.message} (${error.cause.message})` : error.message;
  if (Array.isArray(error)) return describeErrors(error as GraphQLErrorBody[]);
  if (error && typeof error === 'object' && 'code' in error) {
    const { code, reason } = error as { code: unknown; reason?: unknown };
    return `the WebSocket closed with ${String(code)}${reason ? ` ${String(reason)}` : ''}`;
  }
  return String(error);
}

function fail(message: string): never {
  console.error(`typed-client: ${message}`);
  process.exit(1);
}

main().catch((error: unknown) => fail(describe(error)));
