// The GraphQL API over real HTTP against the sandbox: every query and mutation
// on both groups, batching proven by counting upstream requests, tenancy, and
// the error table of CONTRACT.md.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FaultProxy } from '../helpers/fault-proxy.js';
import { deliveryInput, partnerOrderBody, startStack, type Stack } from '../helpers/stack.js';
import { waitUntil } from '../helpers/wait.js';

const FULL_DELIVERY = /* GraphQL */ `
  fragment Full on Delivery {
    id
    uid
    group
    status
    rawStatus
    price {
      amount
      currency
    }
    tip
    distance {
      value
      unit
    }
    pickup {
      name
      phone
      email
      instructions
      windowStart
      address {
        street
        number
        secondaryNumber
        city
        county
        state
        postalCode
        country
        latitude
        longitude
      }
    }
    dropoff {
      name
      phone
      email
      instructions
      windowStart
      address {
        street
        number
        city
        country
        latitude
        longitude
      }
    }
    deliveryDate
    deliveryStartTime
    deliveryEndTime
    estimatedDropoffAt
    mode
    style
    rawStyle
    package {
      description
      minimumVehicleSize
      requirements
      itemsCount
      items {
        name
        quantity
        price
      }
      weight
      dimensions {
        height
        length
        width
      }
      declaredValue
    }
    courier {
      name
      pickupPhone
      dropoffPhone
      vehicle {
        make
        model
        year
      }
      location {
        lat
        lng
      }
    }
    proofOfDelivery {
      photoUrl
      signatureUrl
    }
    cancellationReason
    expectedCancellationFee {
      amount
      currency
    }
    trackingUrl
    payload
    partnerReference
  }
`;

const CREATE = /* GraphQL */ `
  mutation Create($input: DeliveryInput!, $key: String) {
    createDelivery(input: $input, idempotencyKey: $key) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
          trackingUrl
        }
      }
      ... on Error {
        code
        message
      }
      ... on ValidationError {
        fields {
          path
          message
        }
      }
    }
  }
`;

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});
beforeEach(() => {
  stack.sandbox.setKnobs({ latencyMs: 0, errorRate: 0 });
});

async function book(key = stack.key, input = deliveryInput()): Promise<string> {
  const result = await stack.gql(CREATE, { input }, key);
  expect(result.errors).toBeUndefined();
  expect(result.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
  return result.data.createDelivery.data.uid;
}

const gets = () => stack.sandbox.requests.filter((r) => r.method === 'GET' && r.path.includes('/deliveries/'));
const posts = (suffix: string) => stack.sandbox.requests.filter((r) => r.method === 'POST' && r.path.endsWith(suffix));

describe('availability', () => {
  it('reports both groups from one query', async () => {
    const result = await stack.gql('{ availability { group service available checkedAt errorCode } }');
    expect(result.errors).toBeUndefined();
    const groups = result.data.availability.map((a: any) => [a.group, a.available, a.errorCode]);
    expect(groups).toEqual([
      ['PLATFORM', true, null],
      ['PARTNER', true, null],
    ]);
    expect(result.data.availability[0].checkedAt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
  });

  it('refuses a missing key with UNAUTHENTICATED before any upstream call', async () => {
    stack.sandbox.resetRequests();
    const result = await stack.gql('{ availability { available } }', undefined, null);
    expect(result.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('turns an upstream 401 from both groups into UNAUTHENTICATED', async () => {
    const result = await stack.gql('{ availability { available } }', undefined, 'sk_not_a_real_key');
    expect(result.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
    expect(JSON.stringify(result)).not.toContain('sk_not_a_real_key');
  });
});

describe('quoteDelivery', () => {
  const QUOTE = /* GraphQL */ `
    mutation Quote($input: DeliveryInput!, $group: ApiGroup!) {
      quoteDelivery(input: $input, group: $group) {
        __typename
        ... on MutationQuoteDeliverySuccess {
          data {
            group
            fee {
              amount
              currency
            }
            tip {
              amount
              currency
            }
            distance {
              value
              unit
            }
            message
          }
        }
        ... on ValidationError {
          code
          message
          fields {
            path
            message
          }
        }
      }
    }
  `;

  it('prices on the platform group with exact decimals', async () => {
    const result = await stack.gql(QUOTE, { input: deliveryInput(), group: 'PLATFORM' });
    const quote = result.data.quoteDelivery.data;
    expect(quote.group).toBe('PLATFORM');
    expect(quote.fee.amount).toMatch(/^\d+\.\d{2}$/);
    expect(quote.fee.currency).toBe('USD');
    expect(quote.tip).toEqual({ amount: '3.50', currency: 'USD' });
    expect(quote.distance.value).toBeGreaterThan(0);
    expect(quote.distance.unit).toBeNull();
  });

  it('prices on the partner group, where the dropoff address may be absent', async () => {
    const input = deliveryInput({ partnerReference: 'quote-ref-1' });
    (input.dropoff as any).address = undefined;
    const result = await stack.gql(QUOTE, { input, group: 'PARTNER' });
    expect(result.data.quoteDelivery.__typename).toBe('MutationQuoteDeliverySuccess');
    expect(result.data.quoteDelivery.data.group).toBe('PARTNER');
  });

  it('reports every problem at once, per group, before any upstream call', async () => {
    stack.sandbox.resetRequests();
    const input = deliveryInput({
      currency: undefined,
      deliveryDate: undefined,
      style: 'OVERSIZE',
      minimumVehicleSize: ' ',
    });
    (input.pickup as any).phone = '+1555010012345678';
    (input.pickup as any).instructions = 'x'.repeat(513);
    (input.dropoff as any).windowStart = undefined;
    const result = await stack.gql(QUOTE, { input, group: 'PARTNER' });
    const error = result.data.quoteDelivery;
    expect(error.__typename).toBe('ValidationError');
    expect(error.code).toBe('VALIDATION_FAILED');
    expect(error.fields.map((f: any) => f.path).sort()).toEqual(
      [
        'input.currency',
        'input.deliveryDate',
        'input.dropoff.windowStart',
        'input.minimumVehicleSize',
        'input.pickup.instructions',
        'input.pickup.phone',
      ].sort(),
    );
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('refuses partner-only fields and a missing dropoff address on the platform group', async () => {
    const input = deliveryInput({ partnerReference: 'nope', deliveryEndTime: '2030-05-01T18:00:00Z' });
    (input.dropoff as any).address = undefined;
    const result = await stack.gql(QUOTE, { input, group: 'PLATFORM' });
    expect(result.data.quoteDelivery.fields.map((f: any) => f.path).sort()).toEqual([
      'input.deliveryEndTime',
      'input.dropoff.address',
      'input.partnerReference',
    ]);
  });

  it('accepts NOW without a dropoff window or date', async () => {
    const input = deliveryInput({ mode: 'NOW', deliveryDate: undefined });
    (input.dropoff as any).windowStart = undefined;
    const result = await stack.gql(QUOTE, { input, group: 'PLATFORM' });
    expect(result.data.quoteDelivery.__typename).toBe('MutationQuoteDeliverySuccess');
  });
});

describe('createDelivery and reads', () => {
  it('books, returns uid and trackingUrl without a read, and reads the rest once when selected', async () => {
    stack.sandbox.resetRequests();
    const result = await stack.gql(CREATE, { input: deliveryInput() });
    const created = result.data.createDelivery.data;
    expect(created.uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(created.trackingUrl).toContain(created.uid);
    expect(gets()).toHaveLength(0);

    stack.sandbox.resetRequests();
    const full = await stack.gql(
      `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid status pickup { name } dropoff { name } price { amount } package { description } } } } }`,
      { input: deliveryInput() },
    );
    const data = full.data.createDelivery.data;
    expect(data.status).toBe('CREATED');
    expect(data.pickup.name).toBe('Ada Shop');
    expect(data.package.description).toBe('Two books');
    expect(posts('/deliveries')).toHaveLength(1);
    expect(gets()).toHaveLength(1);
  });

  it('reads every field back in the documented forms', async () => {
    const uid = await book();
    const result = await stack.gql(`${FULL_DELIVERY} query($uid: ID!) { delivery(uid: $uid) { ...Full } }`, { uid });
    expect(result.errors).toBeUndefined();
    const d = result.data.delivery;
    expect(d.uid).toBe(uid);
    expect(d.group).toBe('PLATFORM');
    expect(d.status).toBe('CREATED');
    expect(d.rawStatus).toBe('CREATED');
    expect(d.tip).toBe('3.50');
    expect(d.package.declaredValue).toBe('45.10');
    // 16:00+02:00 reached the upstream as 14:00Z and reads back in UTC.
    expect(d.dropoff.windowStart).toBe('2030-05-01T14:00:00Z');
    expect(d.deliveryDate).toBe('2030-05-01');
    expect(d.style).toBe('STANDARD');
    expect(d.payload).toEqual({ orderId: 'A-1', nested: { ok: true } });
    expect(d.pickup.address.street).toBe('Main St');
    expect(typeof d.pickup.address.latitude).toBe('number');
    expect(d.courier).toBeNull();
    // price.value is null until pricing settles (in the sandbox, when a courier takes the job).
    expect(d.price).toBeNull();
    expect(d.expectedCancellationFee.amount).toMatch(/^\d+\.\d{2}$/);
  });

  it('shows the courier once one is assigned', async () => {
    const uid = await book();
    await stack.sandbox.advance(uid);
    const result = await stack.gql(
      'query($uid: ID!) { delivery(uid: $uid) { status price { amount currency } courier { name vehicle { make year } location { lat lng } } } }',
      { uid },
    );
    expect(result.data.delivery.status).toBe('ASSIGNED');
    expect(result.data.delivery.price).toEqual({ amount: expect.stringMatching(/^\d+\.\d{2}$/), currency: 'USD' });
    expect(result.data.delivery.courier.name).toBeTruthy();
    expect(typeof result.data.delivery.courier.location.lat).toBe('number');
  });

  it('reads an unknown uid as null without an error', async () => {
    const result = await stack.gql('{ delivery(uid: "00000000-0000-4000-8000-000000000000") { uid } }');
    expect(result).toEqual({ data: { delivery: null } });
  });

  it('refetches a delivery through node(id:)', async () => {
    const uid = await book();
    const first = await stack.gql('query($uid: ID!) { delivery(uid: $uid) { id } }', { uid });
    const again = await stack.gql('query($id: ID!) { node(id: $id) { __typename ... on Delivery { uid group } } }', {
      id: first.data.delivery.id,
    });
    expect(again.data.node).toEqual({ __typename: 'Delivery', uid, group: 'PLATFORM' });
  });
});

describe('deliveries (batch)', () => {
  let uids: string[];
  beforeAll(async () => {
    uids = [];
    for (let i = 0; i < 50; i += 1) uids.push(await book());
  });

  it('reads 100 uids with duplicates in exactly one request per distinct uid, in order', async () => {
    const list = [...uids, ...uids].sort(() => Math.random() - 0.5);
    stack.sandbox.resetRequests();
    const result = await stack.gql('query($uids: [ID!]!) { deliveries(uids: $uids) { uid status } }', { uids: list });
    expect(result.errors).toBeUndefined();
    expect(result.data.deliveries.map((d: any) => d.uid)).toEqual(list);
    expect(gets()).toHaveLength(50);
    expect(new Set(gets().map((r) => r.path)).size).toBe(50);
  });

  it('runs the reads concurrently: 50 distinct reads are at the upstream at once', async () => {
    const gated = await startStack({ faultProxy: true });
    try {
      const unknown = Array.from({ length: 50 }, () => randomUUID());
      // A key is tried one request at a time until the upstream has accepted it once.
      expect((await gated.gql('query($uid: ID!) { delivery(uid: $uid) { uid } }', { uid: randomUUID() })).data).toEqual(
        { delivery: null },
      );
      // Every read is held at the upstream until all 50 are there: read one after another, the first would never be
      // answered.
      let arrived = 0;
      let allArrived!: () => void;
      const together = new Promise<void>((resolve) => (allArrived = resolve));
      gated.proxy!.fault = async (req) => {
        if (!unknown.some((uid) => req.url?.endsWith(`/deliveries/${uid}`))) return false;
        arrived += 1;
        if (arrived === unknown.length) allArrived();
        await together;
        return false;
      };
      const result = await gated.gql('query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }', { uids: unknown });
      expect(result.errors).toBeUndefined();
      expect(result.data.deliveries).toEqual(unknown.map(() => null));
      expect(arrived).toBe(50);
    } finally {
      await gated.stop();
    }
  });

  it('gives null for unknown uids and for other merchants’ uids', async () => {
    const theirs = await book(stack.otherKey);
    const result = await stack.gql('query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }', {
      uids: [uids[0], '00000000-0000-4000-8000-000000000000', theirs, uids[1]],
    });
    expect(result.errors).toBeUndefined();
    expect(result.data.deliveries).toEqual([{ uid: uids[0] }, null, null, { uid: uids[1] }]);
  });

  it('refuses a list over the maximum with BAD_USER_INPUT', async () => {
    stack.sandbox.resetRequests();
    const many = Array.from({ length: 101 }, (_, i) => `uid-${i}`);
    const result = await stack.gql('query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }', { uids: many });
    expect(result.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
    expect(result.data).toBeNull();
    expect(stack.sandbox.requests).toHaveLength(0);
  });
});

describe('a failing uid fails only its own entry', () => {
  let proxy: FaultProxy;
  let faulty: Stack;
  beforeAll(async () => {
    faulty = await startStack({ faultProxy: true });
    proxy = faulty.proxy!;
  });
  afterAll(() => faulty?.stop());

  it('answers the others and puts an error at the failing path', async () => {
    const good = [];
    for (let i = 0; i < 3; i += 1) {
      const r = await faulty.gql(CREATE, { input: deliveryInput() });
      good.push(r.data.createDelivery.data.uid);
    }
    const broken = '11111111-1111-4111-8111-111111111111';
    proxy.fault = (req, res) => {
      if (!req.url?.includes(broken)) return false;
      res.writeHead(500, { 'content-type': 'application/json' }).end('{"code":"boom","message":"internal"}');
      return true;
    };
    const result = await faulty.gql('query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }', {
      uids: [good[0], broken, good[1], good[2]],
    });
    expect(result.data.deliveries).toEqual([{ uid: good[0] }, null, { uid: good[1] }, { uid: good[2] }]);
    expect(result.errors).toHaveLength(1);
    expect(result.errors![0]!.path).toEqual(['deliveries', 1]);
    expect(result.errors![0]!.extensions?.code).toBe('UPSTREAM_UNAVAILABLE');
  });

  it('keeps one entry per uid, in order, when an early uid fails after later ones were answered', async () => {
    const good: string[] = [];
    for (let i = 0; i < 2; i += 1)
      good.push((await faulty.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid);
    const slow = '44444444-4444-4444-8444-444444444444';
    // The early uid fails only once the proxy has answered both later ones.
    let answeredLater = 0;
    proxy.fault = async (req, res) => {
      if (good.some((uid) => req.url?.includes(uid))) {
        res.once('finish', () => (answeredLater += 1));
        return false;
      }
      if (!req.url?.includes(slow)) return false;
      await waitUntil(() => answeredLater === good.length, 'the later uids to be answered');
      res.writeHead(500, { 'content-type': 'application/json' }).end('{"code":"boom","message":"internal"}');
      return true;
    };
    const result = await faulty.gql('query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }', {
      uids: [slow, good[0], slow, good[1]],
    });
    proxy.fault = undefined;
    expect(result.data.deliveries).toEqual([null, { uid: good[0] }, null, { uid: good[1] }]);
    expect(result.errors!.map((error) => error.path)).toEqual([
      ['deliveries', 0],
      ['deliveries', 2],
    ]);
  });

  it('refuses an empty uid as BAD_USER_INPUT, in its own entry, without asking the upstream', async () => {
    const good = (await faulty.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid;
    const before = proxy.seen.length;
    const list = await faulty.gql('query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }', {
      uids: ['', good, ' '],
    });
    expect(list.data.deliveries).toEqual([null, { uid: good }, null]);
    expect(list.errors!.map((error) => [error.path, error.extensions?.code, error.message])).toEqual([
      [['deliveries', 0], 'BAD_USER_INPUT', 'uid must not be empty.'],
      [['deliveries', 2], 'BAD_USER_INPUT', 'uid must not be empty.'],
    ]);
    const one = await faulty.gql('{ delivery(uid: "") { uid } }');
    expect(one.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
    const byReference = await faulty.gql('{ deliveryByReference(partnerReference: "") { uid } }');
    expect(byReference.errors?.[0]?.extensions?.code).toBe('BAD_USER_INPUT');
    expect(
      proxy.seen
        .slice(before)
        .map((seen) => seen.path)
        .filter((path) => /\/(deliveries|orders(\/partner)?)\/?$/.test(path)),
    ).toEqual([]);
  });

  it('stops its upstream reads when the client goes away, and only its own', async () => {
    const uids = Array.from({ length: 8 }, (_, i) => `55555555-5555-4555-8555-00000000000${i}`);
    let cut = 0;
    let answered = 0;
    let clientGone!: () => void;
    const gone = new Promise<'answer'>((resolve) => (clientGone = () => resolve('answer')));
    proxy.fault = async (req, res) => {
      if (!req.url?.includes('/deliveries/55555555-')) return false;
      const closed = new Promise<'cut'>((resolve) => res.once('close', () => resolve('cut')));
      // The read the other request shares is answered once the first client has gone (unless it was cut);
      // the others are answered never: only being cut ends them.
      const outcome = req.url.endsWith(uids[0]!) ? await Promise.race([closed, gone]) : await closed;
      if (outcome === 'cut') cut += 1;
      else {
        answered += 1;
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"code":"not_found","message":"no"}');
      }
      return true;
    };
    const started = proxy.seen.length;
    const controller = new AbortController();
    const leaving = fetch(`${faulty.app.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${faulty.key}` },
      body: JSON.stringify({ query: 'query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }', variables: { uids } }),
      signal: controller.signal,
    }).catch(() => 'gone');
    // Another request reads the first uid at the same moment: it shares that read, so that one must go on.
    const staying = faulty.gql('query($uid: ID!) { delivery(uid: $uid) { uid } }', { uid: uids[0] });
    await waitUntil(() => proxy.seen.length - started >= uids.length, 'every read to reach the upstream');
    controller.abort();
    expect(await leaving).toBe('gone');
    clientGone();
    const stayed = await staying;
    expect(stayed.data).toEqual({ delivery: null });
    await waitUntil(() => cut === uids.length - 1, 'the reads only the gone client wanted to be cut');
    proxy.fault = undefined;
    expect(answered).toBe(1); // the shared read
    expect(cut).toBe(uids.length - 1);
  });

  it('maps a non-JSON answer to UPSTREAM_ERROR without leaking the body', async () => {
    proxy.fault = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' }).end('<html>secret-internal-page</html>');
      return true;
    };
    const result = await faulty.gql('{ delivery(uid: "22222222-2222-4222-8222-222222222222") { uid } }');
    expect(result.errors?.[0]?.extensions?.code).toBe('UPSTREAM_ERROR');
    expect(JSON.stringify(result)).not.toContain('secret-internal-page');
    expect(JSON.stringify(result)).not.toMatch(/stack|at .*\.ts/);
    proxy.fault = undefined;
  });
});

describe('deliveryByReference and the partner group', () => {
  it('reads a partner order by reference with its style, and by uid', async () => {
    const order = stack.sandbox.seedPartnerOrder(
      stack.key,
      partnerOrderBody('PO-1001', { delivery_style: 'Special Handling', partner_payload: { po: 1001 } }),
    );
    const byRef = await stack.gql(
      '{ deliveryByReference(partnerReference: "PO-1001") { uid group partnerReference style rawStyle payload } }',
    );
    expect(byRef.data.deliveryByReference).toEqual({
      uid: order.uid,
      group: 'PARTNER',
      partnerReference: 'PO-1001',
      style: 'SPECIAL_HANDLING',
      rawStyle: 'Special Handling',
      payload: { po: 1001 },
    });
    const byUid = await stack.gql(
      'query($uid: ID!) { delivery(uid: $uid, group: PARTNER) { uid partnerReference style } }',
      { uid: order.uid },
    );
    // The read by uid carries no delivery_style (upstream-api.md): the style comes from the read by reference.
    expect(byUid.data.delivery).toEqual({ uid: order.uid, partnerReference: 'PO-1001', style: 'SPECIAL_HANDLING' });
  });

  it('reads an unknown reference as null', async () => {
    const result = await stack.gql('{ deliveryByReference(partnerReference: "nope") { uid } }');
    expect(result).toEqual({ data: { deliveryByReference: null } });
  });
});

describe('cancelDelivery', () => {
  const CANCEL = /* GraphQL */ `
    mutation ($uid: ID!, $group: ApiGroup!) {
      cancelDelivery(uid: $uid, group: $group) {
        __typename
        ... on MutationCancelDeliverySuccess {
          data {
            uid
            group
            status
            rawStatus
            fee {
              amount
              currency
            }
            partnerReference
            message
          }
        }
        ... on Error {
          code
          message
        }
      }
    }
  `;

  it('cancels before pickup on the platform group and states the fee', async () => {
    const uid = await book();
    const result = await stack.gql(CANCEL, { uid, group: 'PLATFORM' });
    const data = result.data.cancelDelivery.data;
    expect(data).toMatchObject({
      uid,
      group: 'PLATFORM',
      status: 'CANCELED',
      rawStatus: 'Canceled',
      partnerReference: null,
    });
    expect(data.fee.amount).toMatch(/^\d+\.\d{2}$/);
    const read = await stack.gql('query($uid: ID!) { delivery(uid: $uid) { status } }', { uid });
    expect(read.data.delivery.status).toBe('CANCELED');
  });

  it('refuses after pickup with NotCancelableError', async () => {
    const uid = await book();
    for (let i = 0; i < 4; i += 1) await stack.sandbox.advance(uid);
    const result = await stack.gql(CANCEL, { uid, group: 'PLATFORM' });
    expect(result.data.cancelDelivery).toMatchObject({ __typename: 'NotCancelableError', code: 'NOT_CANCELABLE' });
  });

  it('answers NotFoundError for an unknown uid and for another merchant’s delivery', async () => {
    const theirs = await book(stack.otherKey);
    for (const uid of ['00000000-0000-4000-8000-000000000000', theirs]) {
      const result = await stack.gql(CANCEL, { uid, group: 'PLATFORM' });
      expect(result.data.cancelDelivery).toMatchObject({ __typename: 'NotFoundError', code: 'NOT_FOUND' });
    }
    const still = await stack.gql(
      'query($uid: ID!) { delivery(uid: $uid) { status } }',
      { uid: theirs },
      stack.otherKey,
    );
    expect(still.data.delivery.status).toBe('CREATED');
  });

  it('cancels a partner order with its reference and fee', async () => {
    const order = stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody('PO-2002'));
    const result = await stack.gql(CANCEL, { uid: order.uid, group: 'PARTNER' });
    expect(result.data.cancelDelivery.data).toMatchObject({
      uid: order.uid,
      group: 'PARTNER',
      status: 'CANCELED',
      partnerReference: 'PO-2002',
    });
    expect(result.data.cancelDelivery.data.fee.currency).toBe('EUR');
  });
});

describe('idempotent create', () => {
  it('returns the first result for a repeat and books nothing', async () => {
    stack.sandbox.resetRequests();
    const first = await stack.gql(CREATE, { input: deliveryInput(), key: 'order-77' });
    const again = await stack.gql(CREATE, { input: deliveryInput(), key: 'order-77' });
    expect(again.data.createDelivery.data).toEqual(first.data.createDelivery.data);
    expect(posts('/deliveries')).toHaveLength(1);
  });

  it('books once for concurrent repeats', async () => {
    stack.sandbox.setKnobs({ latencyMs: 50 });
    stack.sandbox.resetRequests();
    const results = await Promise.all(
      Array.from({ length: 10 }, () => stack.gql(CREATE, { input: deliveryInput(), key: 'order-concurrent' })),
    );
    const uids = new Set(results.map((r) => r.data.createDelivery.data.uid));
    expect(uids.size).toBe(1);
    expect(posts('/deliveries')).toHaveLength(1);
  });

  it('answers IdempotencyConflictError for the same key with other input, booking nothing', async () => {
    await stack.gql(CREATE, { input: deliveryInput(), key: 'order-88' });
    stack.sandbox.resetRequests();
    const other = await stack.gql(CREATE, { input: deliveryInput({ description: 'Three books' }), key: 'order-88' });
    expect(other.data.createDelivery).toMatchObject({
      __typename: 'IdempotencyConflictError',
      code: 'IDEMPOTENCY_CONFLICT',
    });
    expect(posts('/deliveries')).toHaveLength(0);
  });

  it('keeps keys per merchant: the same key for another merchant books anew', async () => {
    const mine = await stack.gql(CREATE, { input: deliveryInput(), key: 'shared-key' });
    const theirs = await stack.gql(CREATE, { input: deliveryInput(), key: 'shared-key' }, stack.otherKey);
    expect(theirs.data.createDelivery.data.uid).not.toBe(mine.data.createDelivery.data.uid);
  });

  it('survives a restart of the facade', async () => {
    const first = await stack.gql(CREATE, { input: deliveryInput(), key: 'order-restart' });
    await stack.restart();
    stack.sandbox.resetRequests();
    const again = await stack.gql(CREATE, { input: deliveryInput(), key: 'order-restart' });
    expect(again.data.createDelivery.data.uid).toBe(first.data.createDelivery.data.uid);
    expect(posts('/deliveries')).toHaveLength(0);
  });
});

describe('tenancy', () => {
  it('never mixes results across hundreds of concurrent requests with interleaved keys', async () => {
    const mine = await book(stack.key);
    const theirs = await book(stack.otherKey);
    const requests = Array.from({ length: 300 }, (_, i) => {
      const key = i % 2 === 0 ? stack.key : stack.otherKey;
      return stack
        .gql(
          'query($a: ID!, $b: ID!) { a: delivery(uid: $a) { uid } b: delivery(uid: $b) { uid } }',
          { a: mine, b: theirs },
          key,
        )
        .then((r) => ({ key, r }));
    });
    for (const { key, r } of await Promise.all(requests)) {
      expect(r.errors).toBeUndefined();
      if (key === stack.key) expect(r.data).toEqual({ a: { uid: mine }, b: null });
      else expect(r.data).toEqual({ a: null, b: { uid: theirs } });
    }
  });
});

describe('upstream failures', () => {
  it('answers UPSTREAM_TIMEOUT when the upstream is slower than the budget', async () => {
    const slow = await startStack({ env: { UPSTREAM_TIMEOUT_MS: '300' }, sandbox: { knobs: { latencyMs: 2000 } } });
    try {
      const result = await slow.gql('{ delivery(uid: "00000000-0000-4000-8000-000000000000") { uid } }');
      expect(result.errors?.[0]?.extensions?.code).toBe('UPSTREAM_TIMEOUT');
    } finally {
      await slow.stop();
    }
  });

  it('answers UPSTREAM_UNAVAILABLE when the upstream keeps answering 503', async () => {
    stack.sandbox.setKnobs({ errorRate: 1 });
    const result = await stack.gql('{ delivery(uid: "00000000-0000-4000-8000-000000000000") { uid } }');
    expect(result.errors?.[0]?.extensions?.code).toBe('UPSTREAM_UNAVAILABLE');
    expect(result.errors?.[0]?.message).not.toMatch(/Bearer|sk_/);
  });

  it('degrades only the failing group in availability', async () => {
    stack.sandbox.setKnobs({ errorRate: 1 });
    const result = await stack.gql('{ availability { group available errorCode } }');
    expect(result.errors).toBeUndefined();
    expect(result.data.availability).toEqual([
      { group: 'PLATFORM', available: false, errorCode: 'UPSTREAM_UNAVAILABLE' },
      { group: 'PARTNER', available: false, errorCode: 'UPSTREAM_UNAVAILABLE' },
    ]);
  });
});

describe('in process', () => {
  it('serves the same API through yoga.fetch', async () => {
    const response = await stack.app.yoga.fetch('http://localhost/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.key}` },
      body: JSON.stringify({ query: '{ availability { group available } }' }),
    });
    const body = await response.json();
    expect(body.data.availability).toHaveLength(2);
  });
});
