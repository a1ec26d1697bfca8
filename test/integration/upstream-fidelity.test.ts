// What a GraphQL client sees, over real HTTP, when the upstream answers in ways
// the sandbox never does: a fault proxy between the facade and the sandbox
// answers chosen calls itself (409s with odd codes, 400/422 in every group's
// shape, a quote without a fee, one group refusing the key) and records the
// bodies the facade sent; everything else reaches the sandbox. Also the request
// rules that depend on the upstream's judgement: any vehicle size for OVERSIZE,
// styles beyond the documented four (rawStyle), item prices in the amount unit.
// And the units and dates the document leaves open, against the sandbox itself
// (a proxy records what it received): item prices in a unit of their own, quote
// amounts read in UPSTREAM_QUOTE_AMOUNT_UNIT, deliveryDate as a UTC date.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { FaultProxy } from '../helpers/fault-proxy.js';
import { deliveryInput, partnerOrderBody, startStack, type Stack } from '../helpers/stack.js';

const UID = '7d3f5a2e-9c41-4b8e-a0f6-1e2d3c4b5a69';

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

const CREATE = /* GraphQL */ `
  mutation Create($input: DeliveryInput!) {
    createDelivery(input: $input) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
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

const CANCEL = /* GraphQL */ `
  mutation Cancel($uid: ID!, $group: ApiGroup!) {
    cancelDelivery(uid: $uid, group: $group) {
      __typename
      ... on MutationCancelDeliverySuccess {
        data {
          status
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;

const AVAILABILITY = '{ availability { group service available errorCode } }';

let stack: Stack;
let proxy: FaultProxy;
/** The platform group's path prefix below the proxy, e.g. "/api/v1/<platform>". */
let platformPath: string;

beforeAll(async () => {
  stack = await startStack({ faultProxy: true });
  proxy = stack.proxy!;
  platformPath = `/api/v1/${stack.sandbox.platformId}`;
});
afterAll(async () => {
  await stack?.stop();
});
afterEach(() => {
  proxy.fault = undefined;
});

interface Sent {
  method: string;
  path: string;
  body: any;
}

/**
 * Answer a call to exactly `method path` with `status` and `body` (an object as JSON, a string as it is); record what
 * was sent.
 */
function answer(
  method: string,
  path: string,
  status: number,
  body: unknown | ((key: string) => unknown),
  on: FaultProxy = proxy,
): Sent[] {
  const sent: Sent[] = [];
  const previous = on.fault;
  on.fault = async (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== method || req.url !== path) return previous ? previous(req, res) : false;
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    sent.push({ method, path, body: text === '' ? undefined : JSON.parse(text) });
    const key = (req.headers.authorization ?? '').replace(/^Bearer /, '');
    const value = typeof body === 'function' ? (body as (key: string) => unknown)(key) : body;
    if (typeof value === 'string') res.writeHead(status, { 'content-type': 'text/html' }).end(value);
    else res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
    return true;
  };
  return sent;
}

const QUOTED = {
  message: 'Quote created.',
  data: { price: { delivery_fee: 12.5, tip: 3.5, currency: 'USD' }, distance: 4.2 },
};

/** A PARTNER-group input: no dropoff address, partner fields allowed. */
function partnerInput(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const input = deliveryInput(overrides);
  (input.dropoff as Record<string, unknown>).address = undefined;
  return input;
}

const upstreamCalls = (suffix: string) =>
  proxy.seen.filter((seen) => seen.method === 'POST' && seen.path.endsWith(suffix)).length;

// ---------------------------------------------------------------------------

describe('a 409 to a cancel is NotCancelableError, whatever its code or body', () => {
  const bodies: Array<[string, unknown]> = [
    ['an unknown platform code', { code: 'conflict', message: 'Courier already at the pickup.' }],
    ['an unknown partner code', { error: 'order_locked', message: 'The order is being picked up.' }],
    ['a validation shape', { message: 'Cannot cancel now.', errors: { status: ['is Picked Up'] } }],
    ['a body that is not JSON', '<html><body><h1>409 Conflict</h1></body></html>'],
    ['an empty body', ''],
  ];

  // A uid with no owner record is read first, and canceled only when the read finds it (graphql/cancellation.ts).
  it.each(bodies)('platform group, %s', async (_, body) => {
    answer('GET', `${platformPath}/deliveries/${UID}`, 200, { data: { uid: UID } });
    answer('POST', `${platformPath}/deliveries/${UID}/cancel`, 409, body);
    const result = await stack.gql(CANCEL, { uid: UID, group: 'PLATFORM' });
    expect(result.errors).toBeUndefined();
    expect(result.data.cancelDelivery).toEqual({
      __typename: 'NotCancelableError',
      code: 'NOT_CANCELABLE',
      message: 'The delivery can no longer be canceled.',
    });
  });

  it.each(bodies)('partner group, %s', async (_, body) => {
    answer('GET', `/api/v1/orders/${UID}`, 200, { data: { uid: UID } });
    answer('POST', `/api/v1/orders/${UID}/cancel`, 409, body);
    const result = await stack.gql(CANCEL, { uid: UID, group: 'PARTNER' });
    expect(result.errors).toBeUndefined();
    expect(result.data.cancelDelivery).toMatchObject({ __typename: 'NotCancelableError', code: 'NOT_CANCELABLE' });
  });
});

describe('any other refusal of a cancel is a typed CancelRefusedError, with the upstream’s code and words', () => {
  const CANCEL_REFUSAL = /* GraphQL */ `
    mutation Cancel($uid: ID!, $group: ApiGroup!) {
      cancelDelivery(uid: $uid, group: $group) {
        __typename
        ... on Error {
          code
          message
          upstream {
            status
            error
            message
          }
        }
      }
    }
  `;
  const refusals: Array<[number, string, Record<string, string>]> = [
    [400, 'PLATFORM', { code: 'already_canceled', message: 'The delivery was already canceled.' }],
    [403, 'PLATFORM', { code: 'forbidden', message: 'This key may not cancel deliveries.' }],
    [422, 'PLATFORM', { code: 'unprocessable', message: 'The delivery cannot be canceled in this state.' }],
    [400, 'PARTNER', { error: 'already_canceled', message: 'The order was already canceled.' }],
    [403, 'PARTNER', { error: 'forbidden', message: 'Key ${key} may not cancel.' }],
    [422, 'PARTNER', { error: 'unprocessable', message: 'The order is locked.' }],
  ];

  it.each(refusals)(
    'a %i to a %s cancel, selected as the README teaches (... on Error)',
    async (status, group, body) => {
      const cancelPath =
        group === 'PLATFORM' ? `${platformPath}/deliveries/${UID}/cancel` : `/api/v1/orders/${UID}/cancel`;
      const readPath = group === 'PLATFORM' ? `${platformPath}/deliveries/${UID}` : `/api/v1/orders/${UID}`;
      answer('GET', readPath, 200, { data: { uid: UID } });
      const sent = answer('POST', cancelPath, status, (key: string) =>
        Object.fromEntries(Object.entries(body).map(([name, text]) => [name, text.replace('${key}', key)])),
      );
      const result = await stack.gql(CANCEL_REFUSAL, { uid: UID, group });
      // Data, not a fault: no top-level error.
      expect(result.errors).toBeUndefined();
      const code = body.code ?? body.error;
      const words = body.message!.replace('${key}', '[redacted]');
      expect(result.data.cancelDelivery).toEqual({
        __typename: 'CancelRefusedError',
        code: 'CANCEL_REFUSED',
        message: `The delivery service refused to cancel the delivery: ${words}`,
        upstream: { status, error: code, message: words },
      });
      expect(JSON.stringify(result)).not.toContain(stack.key);
      // Sent once: a refusal is not retried.
      expect(sent).toHaveLength(1);
    },
  );

  it('a 401, 404 and 409 keep their own types', async () => {
    answer('GET', `${platformPath}/deliveries/${UID}`, 200, { data: { uid: UID } });
    answer('POST', `${platformPath}/deliveries/${UID}/cancel`, 404, {
      code: 'not_found',
      message: 'No such delivery.',
    });
    expect((await stack.gql(CANCEL_REFUSAL, { uid: UID, group: 'PLATFORM' })).data.cancelDelivery).toMatchObject({
      __typename: 'NotFoundError',
      upstream: { status: 404, error: 'not_found' },
    });
    proxy.fault = undefined;
    answer('GET', `${platformPath}/deliveries/${UID}`, 200, { data: { uid: UID } });
    answer('POST', `${platformPath}/deliveries/${UID}/cancel`, 409, { code: 'already_canceled', message: 'Canceled.' });
    expect((await stack.gql(CANCEL_REFUSAL, { uid: UID, group: 'PLATFORM' })).data.cancelDelivery).toMatchObject({
      __typename: 'NotCancelableError',
      upstream: { status: 409, error: 'already_canceled' },
    });
  });
});

describe('a 400/422 to a quote or a create is a ValidationError with the upstream’s message, scrubbed of the key', () => {
  // Each shape the upstream document gives, plus the platform shape under a validation status.
  const shapes: Array<[string, (key: string) => unknown, string]> = [
    [
      'platform {code, message}',
      (key) => ({ code: 'validation_error', message: `Key ${key}: pickup_phone_number is too long.` }),
      'input.pickup.phone',
    ],
    [
      'partner {error, message}',
      (key) => ({ error: 'validation_error', message: `Key ${key}: the currency must be 3 letters.` }),
      'input.currency',
    ],
    [
      'validation {message, errors}',
      (key) => ({
        message: `Key ${key}: the dropoff city is required.`,
        errors: { dropoff_address_city: [`The dropoff city is required (key ${key}).`] },
      }),
      'input.dropoff.address.city',
    ],
  ];
  const calls: Array<[string, () => string, (input: Record<string, unknown>) => Promise<any>]> = [
    [
      'platform quote',
      () => `${platformPath}/quote`,
      async (input) => (await stack.gql(QUOTE, { input, group: 'PLATFORM' })).data.quoteDelivery,
    ],
    [
      'partner quote',
      () => '/api/v1/quote',
      async (input) => (await stack.gql(QUOTE, { input: partnerInput(input), group: 'PARTNER' })).data.quoteDelivery,
    ],
    [
      'platform create',
      () => `${platformPath}/deliveries`,
      async (input) => (await stack.gql(CREATE, { input })).data.createDelivery,
    ],
  ];
  const cases = calls.flatMap(([call, path, run]) =>
    shapes.flatMap(([shape, body, field]) =>
      [400, 422].map((status) => [call, shape, status, path, run, body, field] as const),
    ),
  );

  it.each(cases)('%s, %s under %i', async (_call, _shape, status, path, run, body, field) => {
    answer('POST', path(), status, body);
    const result = await run(deliveryInput());
    expect(result.__typename).toBe('ValidationError');
    expect(result.code).toBe('VALIDATION_FAILED');
    expect(result.message).toMatch(/^Key \[redacted\]: /);
    expect(result.message).toBe((body(stack.key) as { message: string }).message.replace(stack.key, '[redacted]'));
    expect(result.fields[0].path).toBe(field);
    expect(JSON.stringify(result)).not.toContain(stack.key);
  });
});

describe('a quote is never reported as free when the upstream names no fee', () => {
  const feeless: Array<[string, unknown]> = [
    ['no delivery_fee', { message: 'ok', data: { price: { tip: 3.5, currency: 'USD' }, distance: 4.2 } }],
    [
      'a null delivery_fee',
      { message: 'ok', data: { price: { delivery_fee: null, tip: 3.5, currency: 'USD' }, distance: 4.2 } },
    ],
    [
      'a delivery_fee that is not an amount',
      { message: 'ok', data: { price: { delivery_fee: 'free', currency: 'USD' }, distance: 4.2 } },
    ],
    ['no price', { message: 'ok', data: { distance: 4.2 } }],
    ['no data', { message: 'ok' }],
  ];

  it.each(feeless)('platform quote with %s → UPSTREAM_ERROR', async (_, body) => {
    answer('POST', `${platformPath}/quote`, 200, body);
    const result = await stack.gql(QUOTE, { input: deliveryInput(), group: 'PLATFORM' });
    expect(result.data).toBeNull();
    expect(result.errors).toHaveLength(1);
    expect(result.errors![0]!.extensions?.code).toBe('UPSTREAM_ERROR');
    expect(result.errors![0]!.message).toBe('The delivery service answered a platform quote without a delivery fee.');
    expect(JSON.stringify(result)).not.toContain('0.00');
  });

  it('partner quote without delivery_fee → UPSTREAM_ERROR', async () => {
    answer('POST', '/api/v1/quote', 200, feeless[0]![1]);
    const result = await stack.gql(QUOTE, { input: partnerInput(), group: 'PARTNER' });
    expect(result.data).toBeNull();
    expect(result.errors?.[0]?.extensions?.code).toBe('UPSTREAM_ERROR');
    expect(result.errors?.[0]?.message).toBe('The delivery service answered a partner quote without a delivery fee.');
  });

  it('a quote without a tip has a null tip and its fee', async () => {
    answer('POST', `${platformPath}/quote`, 200, {
      message: 'ok',
      data: { price: { delivery_fee: 0, currency: 'USD' }, distance: 4.2 },
    });
    const result = await stack.gql(QUOTE, { input: deliveryInput({ tip: undefined }), group: 'PLATFORM' });
    expect(result.errors).toBeUndefined();
    // A fee the upstream states as 0 is a free delivery; only a missing one is an error.
    expect(result.data.quoteDelivery.data).toMatchObject({ fee: { amount: '0.00', currency: 'USD' }, tip: null });
  });
});

describe('availability when one group refuses the key', () => {
  const refuse = {
    platform: () =>
      answer('GET', `${platformPath}/availability`, 401, {
        code: 'invalid_api_key',
        message: 'The key is not valid for this platform.',
      }),
    partner: () => answer('GET', '/api/v1/availability', 401, { error: 'unauthorized', message: 'Bad token.' }),
  };

  it('the partner group refusing it reads as that entry, UNAUTHENTICATED, and the platform entry stands', async () => {
    refuse.partner();
    const result = await stack.gql(AVAILABILITY);
    expect(result.errors).toBeUndefined();
    expect(result.data.availability.map((a: any) => [a.group, a.available, a.errorCode])).toEqual([
      ['PLATFORM', true, null],
      ['PARTNER', false, 'UNAUTHENTICATED'],
    ]);
    expect(result.data.availability[1].service).toBeNull();
  });

  it('the platform group refusing it reads as that entry, UNAUTHENTICATED, and the partner entry stands', async () => {
    refuse.platform();
    const result = await stack.gql(AVAILABILITY);
    expect(result.errors).toBeUndefined();
    expect(result.data.availability.map((a: any) => [a.group, a.available, a.errorCode])).toEqual([
      ['PLATFORM', false, 'UNAUTHENTICATED'],
      ['PARTNER', true, null],
    ]);
  });

  it('a refused key beside an unavailable group gives two entries, no error', async () => {
    refuse.partner();
    answer('GET', `${platformPath}/availability`, 503, { code: 'unavailable', message: 'busy' });
    const result = await stack.gql(AVAILABILITY);
    expect(result.errors).toBeUndefined();
    expect(result.data.availability.map((a: any) => [a.group, a.available, a.errorCode])).toEqual([
      ['PLATFORM', false, 'UPSTREAM_UNAVAILABLE'],
      ['PARTNER', false, 'UNAUTHENTICATED'],
    ]);
  });

  it('both groups refusing it is one UNAUTHENTICATED error', async () => {
    refuse.platform();
    refuse.partner();
    const result = await stack.gql(AVAILABILITY);
    expect(result.data).toBeNull();
    expect(result.errors).toHaveLength(1);
    expect(result.errors![0]!.extensions?.code).toBe('UNAUTHENTICATED');
  });
});

describe('OVERSIZE takes any vehicle size: whether it is an SUV or larger is the upstream’s to judge', () => {
  it('sends a size the facade has no list for, as it was given', async () => {
    const sent = answer('POST', `${platformPath}/quote`, 200, QUOTED);
    const result = await stack.gql(QUOTE, {
      input: deliveryInput({ style: 'OVERSIZE', minimumVehicleSize: 'Box truck 7.5t' }),
      group: 'PLATFORM',
    });
    expect(result.data.quoteDelivery.__typename).toBe('MutationQuoteDeliverySuccess');
    expect(sent).toHaveLength(1);
    expect(sent[0]!.body).toMatchObject({ delivery_style: 'Oversize', package_minimum_vehicle_size: 'Box truck 7.5t' });
  });

  it('passes on the upstream’s own refusal of a size, at the field the client wrote', async () => {
    const before = upstreamCalls('/quote');
    const result = await stack.gql(QUOTE, {
      input: deliveryInput({ style: 'OVERSIZE', minimumVehicleSize: 'CAR' }),
      group: 'PLATFORM',
    });
    // The sandbox, standing in for the upstream, holds Oversize to SUV, VAN or TRUCK.
    expect(upstreamCalls('/quote')).toBe(before + 1);
    expect(result.data.quoteDelivery.__typename).toBe('ValidationError');
    expect(result.data.quoteDelivery.fields).toEqual([
      {
        path: 'input.minimumVehicleSize',
        message: 'The package_minimum_vehicle_size field must be SUV, VAN or TRUCK when delivery_style is Oversize.',
      },
    ]);
  });

  it('still requires a size before any upstream call', async () => {
    const before = upstreamCalls('/quote');
    const result = await stack.gql(QUOTE, {
      input: deliveryInput({ style: 'OVERSIZE', minimumVehicleSize: '  ' }),
      group: 'PARTNER',
    });
    expect(result.data.quoteDelivery.fields).toEqual([
      { path: 'input.minimumVehicleSize', message: 'is required for the OVERSIZE style' },
    ]);
    expect(upstreamCalls('/quote')).toBe(before);
  });
});

describe('rawStyle: a style enabled for the platform beyond the documented four', () => {
  it('is sent as delivery_style exactly as written, trimmed, on both groups', async () => {
    const platform = answer('POST', `${platformPath}/quote`, 200, QUOTED);
    const partner = answer('POST', '/api/v1/quote', 200, QUOTED);
    const a = await stack.gql(QUOTE, { input: deliveryInput({ rawStyle: '  White Glove ' }), group: 'PLATFORM' });
    const b = await stack.gql(QUOTE, { input: partnerInput({ rawStyle: 'cold_chain/2' }), group: 'PARTNER' });
    expect([a.data.quoteDelivery.__typename, b.data.quoteDelivery.__typename]).toEqual([
      'MutationQuoteDeliverySuccess',
      'MutationQuoteDeliverySuccess',
    ]);
    expect(platform[0]!.body.delivery_style).toBe('White Glove');
    expect(partner[0]!.body.delivery_style).toBe('cold_chain/2');
  });

  it('books with it', async () => {
    const sent = answer('POST', `${platformPath}/deliveries`, 201, {
      uid: UID,
      tracking_link: `https://track.example/${UID}`,
    });
    const result = await stack.gql(CREATE, { input: deliveryInput({ rawStyle: 'Same Day Plus' }) });
    expect(result.data.createDelivery).toEqual({ __typename: 'MutationCreateDeliverySuccess', data: { uid: UID } });
    expect(sent[0]!.body.delivery_style).toBe('Same Day Plus');
  });

  it.each([
    ['special handling', 'Special Handling'],
    ['SPECIAL_HANDLING', 'Special Handling'],
    ['hybrid', 'Hybrid'],
  ])('that names a documented style (%j) sends its documented spelling', async (rawStyle, wire) => {
    const sent = answer('POST', `${platformPath}/quote`, 200, QUOTED);
    await stack.gql(QUOTE, { input: deliveryInput({ rawStyle }), group: 'PLATFORM' });
    expect(sent[0]!.body.delivery_style).toBe(wire);
  });

  it('that names OVERSIZE follows its rules: a vehicle size is required', async () => {
    const before = upstreamCalls('/quote');
    const refused = await stack.gql(QUOTE, { input: deliveryInput({ rawStyle: 'oversize' }), group: 'PLATFORM' });
    expect(refused.data.quoteDelivery.fields).toEqual([
      { path: 'input.minimumVehicleSize', message: 'is required for the OVERSIZE style' },
    ]);
    expect(upstreamCalls('/quote')).toBe(before);
    const sent = answer('POST', `${platformPath}/quote`, 200, QUOTED);
    await stack.gql(QUOTE, {
      input: deliveryInput({ rawStyle: 'oversize', minimumVehicleSize: 'VAN' }),
      group: 'PLATFORM',
    });
    expect(sent[0]!.body).toMatchObject({ delivery_style: 'Oversize', package_minimum_vehicle_size: 'VAN' });
  });

  it('is refused with style, blank, or over 64 characters, before any upstream call', async () => {
    const before = upstreamCalls('/quote');
    const problems = async (input: Record<string, unknown>) =>
      (await stack.gql(QUOTE, { input, group: 'PLATFORM' })).data.quoteDelivery.fields;
    expect(await problems(deliveryInput({ style: 'STANDARD', rawStyle: 'White Glove' }))).toEqual([
      { path: 'input.rawStyle', message: 'must not be given together with style; send one of them' },
    ]);
    expect(await problems(deliveryInput({ rawStyle: '   ' }))).toEqual([
      { path: 'input.rawStyle', message: 'must not be blank' },
    ]);
    expect(await problems(deliveryInput({ rawStyle: 'x'.repeat(65) }))).toEqual([
      { path: 'input.rawStyle', message: 'must be at most 64 characters' },
    ]);
    expect(upstreamCalls('/quote')).toBe(before);
  });

  it('that the upstream has not enabled comes back as a ValidationError at input.rawStyle', async () => {
    const result = await stack.gql(QUOTE, { input: deliveryInput({ rawStyle: 'White Glove' }), group: 'PLATFORM' });
    expect(result.data.quoteDelivery.__typename).toBe('ValidationError');
    expect(result.data.quoteDelivery.fields.map((f: any) => f.path)).toEqual(['input.rawStyle']);
  });
});

describe('a partial dropoff address (addressParts)', () => {
  /** An input whose dropoff address is given part by part. */
  const withParts = (parts: Record<string, unknown>, overrides: Record<string, unknown> = {}) => {
    const input = partnerInput(overrides);
    (input.dropoff as Record<string, unknown>).addressParts = parts;
    return input;
  };

  it('is quoted on the PARTNER group, and only the parts given are sent', async () => {
    const real = await stack.gql(QUOTE, {
      input: withParts({ city: 'Springfield', postalCode: '12345' }),
      group: 'PARTNER',
    });
    expect(real.errors).toBeUndefined();
    expect(real.data.quoteDelivery.__typename).toBe('MutationQuoteDeliverySuccess');

    const sent = answer('POST', '/api/v1/quote', 200, QUOTED);
    await stack.gql(QUOTE, { input: withParts({ city: 'Springfield', postalCode: '12345' }), group: 'PARTNER' });
    const dropoffAddress = Object.fromEntries(
      Object.entries(sent[0]!.body).filter(([field]) => field.startsWith('dropoff_address_')),
    );
    expect(dropoffAddress).toEqual({ dropoff_address_city: 'Springfield', dropoff_address_postal_code: '12345' });
  });

  it("keeps the PLATFORM group's rules, checked before any call", async () => {
    const before = upstreamCalls('/quote');
    const result = await stack.gql(QUOTE, {
      input: withParts({ city: 'Springfield', postalCode: '12345' }),
      group: 'PLATFORM',
    });
    expect(result.data.quoteDelivery.fields).toEqual([
      { path: 'input.dropoff.addressParts.street', message: 'is required on the PLATFORM group' },
      { path: 'input.dropoff.addressParts.country', message: 'is required on the PLATFORM group' },
    ]);
    const whole = await stack.gql(QUOTE, {
      input: withParts({ street: 'Elm St', city: 'Springfield', country: 'US' }),
      group: 'PLATFORM',
    });
    expect(whole.data.quoteDelivery.__typename).toBe('MutationQuoteDeliverySuccess');
    expect(upstreamCalls('/quote')).toBe(before + 1);
  });

  it('refuses blank parts, parts for the pickup, and address and addressParts together', async () => {
    const before = upstreamCalls('/quote');
    const blank = await stack.gql(QUOTE, { input: withParts({ street: ' ', latitude: 91 }), group: 'PARTNER' });
    expect(blank.data.quoteDelivery.fields).toEqual([
      { path: 'input.dropoff.addressParts.street', message: 'must not be blank (leave it out instead)' },
      { path: 'input.dropoff.addressParts.latitude', message: 'must be between -90 and 90' },
    ]);
    const both = withParts({ city: 'Springfield' });
    (both.dropoff as Record<string, unknown>).address = { street: 'Elm St', city: 'Springfield', country: 'US' };
    (both.pickup as Record<string, unknown>).addressParts = { city: 'Springfield' };
    const refused = await stack.gql(QUOTE, { input: both, group: 'PARTNER' });
    expect(refused.data.quoteDelivery.fields).toEqual([
      {
        path: 'input.pickup.addressParts',
        message: 'is only for the dropoff; the pickup needs address (street, city and country)',
      },
      { path: 'input.dropoff.addressParts', message: 'must not be given together with address; send one of them' },
    ]);
    expect(upstreamCalls('/quote')).toBe(before);
  });
});

describe('item prices go out in the amount unit, like the tip', () => {
  it('sends "12.34" as 1234 cents, and checks it like the tip', async () => {
    const sent = answer('POST', `${platformPath}/deliveries`, 201, {
      uid: UID,
      tracking_link: `https://track.example/${UID}`,
    });
    const items = [
      { name: 'Atlas', quantity: 1, price: '12.34' },
      { name: 'Map', quantity: 2, price: '0.29' },
      { name: 'Pen', quantity: 3 },
    ];
    const result = await stack.gql(CREATE, { input: deliveryInput({ items }) });
    expect(result.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
    expect(sent[0]!.body.items).toEqual([
      { name: 'Atlas', quantity: 1, price: 1234 },
      { name: 'Map', quantity: 2, price: 29 },
      { name: 'Pen', quantity: 3 },
    ]);
    expect(sent[0]!.body.tip).toBe(350);

    const before = upstreamCalls('/deliveries');
    const refused = await stack.gql(CREATE, {
      input: deliveryInput({
        items: [
          { name: 'a', price: '1.5' },
          { name: 'b', price: '-2' },
          { name: 'c', price: '0.125' },
        ],
      }),
    });
    expect(refused.data.createDelivery.fields).toEqual([
      { path: 'input.items.1.price', message: 'must not be negative' },
      { path: 'input.items.2.price', message: 'must have at most two decimal places (it is sent in cents)' },
    ]);
    expect(upstreamCalls('/deliveries')).toBe(before);
  });

  it('sends major units as they are with UPSTREAM_AMOUNT_UNIT=major', async () => {
    const major = await startStack({ faultProxy: true, env: { UPSTREAM_AMOUNT_UNIT: 'major' } });
    try {
      const sent = answer('POST', `/api/v1/${major.sandbox.platformId}/quote`, 200, QUOTED, major.proxy!);
      await major.gql(QUOTE, {
        input: deliveryInput({ items: [{ name: 'Atlas', price: '12.34' }] }),
        group: 'PLATFORM',
      });
      expect(sent[0]!.body.items).toEqual([{ name: 'Atlas', price: 12.34 }]);
      expect(sent[0]!.body.tip).toBe(3.5);
    } finally {
      await major.stop();
    }
  });
});

describe("a read's delivery_date with its time of day (the sandbox's deliveryMinuteOfDay)", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ sandbox: { knobs: { deliveryMinuteOfDay: 14 * 60 + 45 } } });
  });
  afterAll(() => stack?.stop());

  it('keeps deliveryDate and gives the full timestamp as scheduledAt, on both groups', async () => {
    const booked = await stack.gql(
      `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`,
      {
        input: {
          ...deliveryInput({ deliveryDate: '2026-12-24' }),
          dropoff: { ...(deliveryInput().dropoff as object), windowStart: '2026-12-24T16:00:00Z' },
        },
      },
    );
    const uid = booked.data.createDelivery.data.uid as string;
    const read = await stack.gql(`query($uid: ID!) { delivery(uid: $uid) { deliveryDate scheduledAt } }`, { uid });
    expect(read.data.delivery).toEqual({ deliveryDate: '2026-12-24', scheduledAt: '2026-12-24T14:45:00Z' });
    // A webhook's plain date has no time of day: the event's delivery says so with null.
    await stack.sandbox.idle();
    const events = await stack.gql(
      `query($uid: ID!) { delivery(uid: $uid) { events(first: 1) { edges { node { delivery { deliveryDate scheduledAt } } } } } }`,
      { uid },
    );
    expect(events.data.delivery.events.edges[0].node.delivery).toEqual({
      deliveryDate: '2026-12-24',
      scheduledAt: null,
    });
  });
});

describe("create's answer, wherever the upstream puts uid and tracking_link (the sandbox's createAnswerShape)", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.stop());

  it.each(['top-level', 'data'] as const)('books and reads back the delivery when they are at %s', async (shape) => {
    stack.sandbox.setKnobs({ createAnswerShape: shape });
    const mark = stack.sandbox.requestCount;
    const booked = await stack.gql(
      `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid trackingUrl } } } }`,
      {
        input: deliveryInput(),
      },
    );
    const created = stack.sandbox.requestsSince(mark).find((r) => r.method === 'POST')!;
    expect(created.status).toBe(shape === 'data' ? 200 : 201);
    const { uid, trackingUrl } = booked.data.createDelivery.data;
    expect(uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(trackingUrl).toContain(uid);
    expect((await stack.gql(`query($uid: ID!) { delivery(uid: $uid) { uid } }`, { uid })).data.delivery.uid).toBe(uid);
  });
});

describe('item keys beyond the documented seven', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.stop());

  it('are kept in Item.extra, as the upstream sent them; an item with none has null', async () => {
    const body = partnerOrderBody('PO-extra-items', {
      items: [
        { name: 'Mug', quantity: 1, price: 1250, gift_wrap: true, options: { color: 'red' } },
        { name: 'Plate', quantity: 2 },
      ],
    });
    const uid = stack.sandbox.seedPartnerOrder(stack.key, body).uid as string;
    const read = await stack.gql(
      `query($uid: ID!) { delivery(uid: $uid, group: PARTNER) { package { items { name price extra } } } }`,
      { uid },
    );
    expect(read.errors).toBeUndefined();
    expect(read.data.delivery.package.items).toEqual([
      { name: 'Mug', price: '12.50', extra: { gift_wrap: true, options: { color: 'red' } } },
      { name: 'Plate', price: null, extra: null },
    ]);
  });
});

// ---------------------------------------------------------------------------
// Units and dates, against the sandbox: the proxy passes every call on and keeps what it carried.

interface Carried {
  path: string;
  sent: any;
  /** The sandbox's answer, before any rewrite. */
  answered: any;
}

/**
 * Passes every POST ending in `suffix` on to the sandbox, recording the body sent
 * and the sandbox's answer; `rewrite` may change the answer the facade gets.
 */
function carry(
  on: FaultProxy,
  origin: string,
  suffix: string,
  rewrite: (answer: any) => any = (answer) => answer,
): Carried[] {
  const carried: Carried[] = [];
  const previous = on.fault;
  on.fault = async (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== 'POST' || !req.url?.endsWith(suffix)) return previous ? previous(req, res) : false;
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const upstream = await fetch(`${origin}${req.url}`, {
      method: 'POST',
      headers: { authorization: req.headers.authorization ?? '', 'content-type': 'application/json' },
      body: text,
    });
    const answered = await upstream.json();
    carried.push({ path: req.url, sent: JSON.parse(text), answered });
    res.writeHead(upstream.status, { 'content-type': 'application/json' }).end(JSON.stringify(rewrite(answered)));
    return true;
  };
  return carried;
}

const READ_AMOUNTS = `query($uid: ID!) { delivery(uid: $uid) { tip package { declaredValue items { name price } } } }`;
const ITEMS = [
  { name: 'Atlas', quantity: 1, price: '12.34' },
  { name: 'Map', quantity: 2, price: '0.29' },
  { name: 'Pen', quantity: 3 },
];

describe('item prices in a unit of their own (UPSTREAM_ITEM_PRICE_UNIT), apart from tip and declared value', () => {
  /** Books through a stack with `env`; what the sandbox received and what a read gives back. */
  async function bookWith(env: Record<string, string>) {
    const own = await startStack({ faultProxy: true, env });
    try {
      const carried = carry(own.proxy!, own.sandbox.origin, '/deliveries');
      const booked = await own.gql(CREATE, { input: deliveryInput({ items: ITEMS }) });
      expect(booked.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
      const read = await own.gql(READ_AMOUNTS, { uid: booked.data.createDelivery.data.uid });
      expect(read.errors).toBeUndefined();
      return { sent: carried[0]!.sent, read: read.data.delivery };
    } finally {
      await own.stop();
    }
  }

  it('tip and declared value in cents, item prices in major units: the sandbox gets 350 and 12.34, and a read gives back what was booked', async () => {
    const { sent, read } = await bookWith({ UPSTREAM_AMOUNT_UNIT: 'cents', UPSTREAM_ITEM_PRICE_UNIT: 'major' });
    expect(sent.tip).toBe(350);
    expect(sent.package_value).toBe(4510);
    expect(sent.items).toEqual([
      { name: 'Atlas', quantity: 1, price: 12.34 },
      { name: 'Map', quantity: 2, price: 0.29 },
      { name: 'Pen', quantity: 3 },
    ]);
    expect(read).toEqual({
      tip: '3.50',
      package: {
        declaredValue: '45.10',
        items: [
          { name: 'Atlas', price: '12.34' },
          { name: 'Map', price: '0.29' },
          { name: 'Pen', price: null },
        ],
      },
    });
  });

  it('unset, item prices follow UPSTREAM_AMOUNT_UNIT as before: all in cents', async () => {
    const { sent, read } = await bookWith({ UPSTREAM_AMOUNT_UNIT: 'cents' });
    expect(sent.tip).toBe(350);
    expect(sent.items.map((item: { price?: number }) => item.price)).toEqual([1234, 29, undefined]);
    expect(read.package.items.map((item: { price: string | null }) => item.price)).toEqual(['12.34', '0.29', null]);
  });
});

describe('the quote amounts in UPSTREAM_QUOTE_AMOUNT_UNIT', () => {
  it('major (the default): the sandbox quotes in major units and the quote reads them as they are', async () => {
    const carried = carry(proxy, stack.sandbox.origin, '/quote');
    const result = await stack.gql(QUOTE, { input: deliveryInput(), group: 'PLATFORM' });
    expect(result.errors).toBeUndefined();
    const { delivery_fee, tip } = carried[0]!.answered.data.price;
    expect(delivery_fee).toBeGreaterThan(1);
    expect(result.data.quoteDelivery.data.fee.amount).toBe(Number(delivery_fee).toFixed(2));
    expect(result.data.quoteDelivery.data.tip.amount).toBe(Number(tip).toFixed(2));
  });

  it('cents: an upstream that quotes in cents reads as the same amounts in major units, on both groups', async () => {
    const cents = await startStack({ faultProxy: true, env: { UPSTREAM_QUOTE_AMOUNT_UNIT: 'cents' } });
    try {
      // The sandbox's quote, its delivery_fee and tip turned into cents: an upstream that quotes in cents.
      const toCents = (answer: any) => ({
        ...answer,
        data: {
          ...answer.data,
          price: {
            ...answer.data.price,
            delivery_fee: Math.round(answer.data.price.delivery_fee * 100),
            tip: Math.round(answer.data.price.tip * 100),
          },
        },
      });
      const carried = carry(cents.proxy!, cents.sandbox.origin, '/quote', toCents);
      const platform = await cents.gql(QUOTE, { input: deliveryInput(), group: 'PLATFORM' });
      const partner = await cents.gql(QUOTE, { input: partnerInput(), group: 'PARTNER' });
      for (const [result, at] of [
        [platform, 0],
        [partner, 1],
      ] as const) {
        expect(result.errors).toBeUndefined();
        const major = carried[at]!.answered.data.price;
        expect(result.data.quoteDelivery.data.fee).toEqual({
          amount: Number(major.delivery_fee).toFixed(2),
          currency: major.currency,
        });
        expect(result.data.quoteDelivery.data.tip).toEqual({ amount: '3.50', currency: major.currency });
      }
      // What went out is unchanged: the quote's unit is its own.
      expect(carried[0]!.sent.tip).toBe(350);
    } finally {
      await cents.stop();
    }
  });
});

describe('deliveryDate, a UTC date', () => {
  // A Sydney merchant's dropoff window at 09:00 on 2 May, local time: 23:00 UTC on 1 May.
  const sydney = (deliveryDate: string | undefined) => {
    const input = deliveryInput({ deliveryDate });
    (input.dropoff as Record<string, unknown>).windowStart = '2030-05-02T09:00:00+10:00';
    return input;
  };

  it.each([
    [
      'quote',
      async (input: Record<string, unknown>) =>
        (await stack.gql(QUOTE, { input, group: 'PLATFORM' })).data.quoteDelivery,
    ],
    ['create', async (input: Record<string, unknown>) => (await stack.gql(CREATE, { input })).data.createDelivery],
  ])('%s: a local date beside the window is a ValidationError naming both fields, before any call', async (_, run) => {
    const before = proxy.seen.length;
    const result = await run(sydney('2030-05-02'));
    expect(result.__typename).toBe('ValidationError');
    expect(result.fields).toEqual([
      {
        path: 'input.deliveryDate',
        message: 'is 2030-05-02, but dropoff.windowStart falls on 2030-05-01 in UTC; deliveryDate is a UTC date',
      },
      {
        path: 'input.dropoff.windowStart',
        message:
          'falls on 2030-05-01 in UTC, not on deliveryDate 2030-05-02; send deliveryDate 2030-05-01, or leave it out',
      },
    ]);
    expect(proxy.seen.length).toBe(before);
  });

  it('the UTC date is sent as given; left out, the window start gives it: the sandbox gets 2030-05-01 beside 2030-05-01T23:00:00Z', async () => {
    const carried = carry(proxy, stack.sandbox.origin, '/deliveries');
    for (const deliveryDate of ['2030-05-01', undefined]) {
      const booked = await stack.gql(CREATE, { input: sydney(deliveryDate) });
      expect(booked.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
      const read = await stack.gql(`query($uid: ID!) { delivery(uid: $uid) { deliveryDate } }`, {
        uid: booked.data.createDelivery.data.uid,
      });
      expect(read.data.delivery.deliveryDate).toBe('2030-05-01');
    }
    expect(carried.map(({ sent }) => [sent.delivery_date, sent.dropoff_start_time])).toEqual([
      ['2030-05-01', '2030-05-01T23:00:00Z'],
      ['2030-05-01', '2030-05-01T23:00:00Z'],
    ]);
  });
});
