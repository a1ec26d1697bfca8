// Property-based tests (fast-check) of everything that reads untrusted input:
// DeliveryInput validation and the request body built from it, the three
// REST/webhook → Delivery mappings, and the DateTime, Date and Decimal scalars.
// Random input must give a ValidationError / GraphQLError or a well-formed
// result, never any other exception and never a malformed value.
import { Decimal } from 'decimal.js';
import fc from 'fast-check';
import { GraphQLError, Kind, type GraphQLScalarType, type ValueNode } from 'graphql';
import { describe, expect, it } from 'vitest';
import type { AmountUnit } from '../../src/config.js';
import { ValidationError } from '../../src/errors.js';
import { toSchema } from '../../src/graphql/schema.js';
import { fromPartnerOrder, fromPlatformDelivery, fromWebhookEvent } from '../../src/mapping/delivery.js';
import { DELIVERY_STATUSES, DELIVERY_STYLES, type ApiGroup, type Delivery } from '../../src/mapping/model.js';
import { toWireRequest, validateDeliveryInput, type DeliveryInput } from '../../src/mapping/request.js';
import { utcDateTime } from '../../src/mapping/scalars.js';
import type { WireDelivery, WireDeliveryRequest, WireOrder, WireWebhookEvent } from '../../src/upstream/wire.js';

const RUNS = 1000;
const MONEY = /^-?\d+\.\d{2,}$/;
const UTC_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/;
/** What the mapping writes: UTC_TIME, with the fraction of a second the upstream gave, if any. */
const UTC_OUTPUT_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const CALENDAR_DATE = /^\d{4}-\d{2}-\d{2}$/;

const schema = toSchema();
const scalar = (name: string) => schema.getType(name) as GraphQLScalarType;
const DateTime = scalar('DateTime');
const DateScalar = scalar('Date');
const DecimalScalar = scalar('Decimal');

// ------------------------------------------------------------------ shared arbitraries

const pad = (n: number, width: number) => String(n).padStart(width, '0');

/**
 * Text of every kind a client or the upstream may send: empty, blank, control, astral, combining, lone surrogates,
 * huge.
 */
const anyText: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.string() },
  { weight: 3, arbitrary: fc.string({ unit: 'binary' }) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme' }) },
  {
    weight: 1,
    arbitrary: fc.string({ unit: fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)) }),
  },
  { weight: 1, arbitrary: fc.string({ minLength: 400, maxLength: 2000 }) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '',
      ' ',
      '\t\n ',
      '\u0000',
      '😀',
      'e\u0301',
      '\u202e',
      'null',
      'undefined',
      '__proto__',
      'x'.repeat(100_000),
      ' '.repeat(600),
    ),
  },
);

/** Every double, NaN, the infinities and -0 included. */
const anyNumber: fc.Arbitrary<number> = fc.oneof(
  fc.double(),
  fc.integer(),
  fc.constantFrom(
    NaN,
    Infinity,
    -Infinity,
    -0,
    -1,
    Number.MAX_VALUE,
    Number.MIN_VALUE,
    Number.MAX_SAFE_INTEGER + 2,
    2 ** 31,
  ),
);
/** What GraphQL's Float lets through: finite doubles only. */
const graphqlFloat = fc.double({ noNaN: true, noDefaultInfinity: true });
/** What GraphQL's Int lets through: 32-bit integers. */
const graphqlInt = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });

/**
 * Date-times in every shape the readers meet: calendar and clock parts out of
 * range, `T`/`t`/space, seconds and fractions optional, offsets `Z`, `+hh:mm`,
 * `-hhmm` or none. Years 0001–9998 (see the `it.fails` below for 0000 and 9999).
 */
/** Valid wall-clock times on 0000-01-01 or 9999-12-31 with an offset: about half name an instant outside 0000–9999. */
const edgeDateTimeText: fc.Arbitrary<string> = fc
  .record({
    end: fc.boolean(),
    hour: fc.integer({ min: 0, max: 23 }),
    minute: fc.integer({ min: 0, max: 59 }),
    second: fc.integer({ min: 0, max: 59 }),
    offsetHours: fc.integer({ min: 0, max: 23 }),
    offsetMinutes: fc.integer({ min: 0, max: 59 }),
    sign: fc.constantFrom('+', '-'),
  })
  .map(
    (p) =>
      `${p.end ? '9999-12-31' : '0000-01-01'}T${pad(p.hour, 2)}:${pad(p.minute, 2)}:${pad(p.second, 2)}${p.sign}${pad(p.offsetHours, 2)}:${pad(p.offsetMinutes, 2)}`,
  );

const dateTimeText = (years: fc.Arbitrary<number> = fc.integer({ min: 1, max: 9998 })): fc.Arbitrary<string> =>
  fc
    .record({
      year: years,
      month: fc.integer({ min: 0, max: 13 }),
      day: fc.integer({ min: 0, max: 32 }),
      sep: fc.constantFrom('T', 't', ' '),
      hour: fc.integer({ min: 0, max: 25 }),
      minute: fc.integer({ min: 0, max: 61 }),
      second: fc.option(fc.integer({ min: 0, max: 61 }), { nil: undefined }),
      fraction: fc.option(fc.stringMatching(/^\.\d{1,9}$/), { nil: undefined }),
      offset: fc.oneof(
        fc.constantFrom('', 'Z', 'z', '+00:00', '-00:00'),
        fc
          .tuple(
            fc.constantFrom('+', '-'),
            fc.integer({ min: 0, max: 23 }),
            fc.integer({ min: 0, max: 59 }),
            fc.constantFrom(':', ''),
          )
          .map(([sign, h, m, colon]) => `${sign}${pad(h, 2)}${colon}${pad(m, 2)}`),
      ),
    })
    .map(
      (p) =>
        `${pad(p.year, 4)}-${pad(p.month, 2)}-${pad(p.day, 2)}${p.sep}${pad(p.hour, 2)}:${pad(p.minute, 2)}` +
        `${p.second === undefined ? '' : `:${pad(p.second, 2)}${p.fraction ?? ''}`}${p.offset}`,
    );

/** Candidate decimal texts: plain, signed, long, exponents in a sane range, float renderings, junk. */
const decimalText: fc.Arbitrary<string> = fc.oneof(
  fc.stringMatching(/^-?\d{1,30}(\.\d{0,8})?$/),
  fc.stringMatching(/^\s?-?\d{1,4}\.\d{1,2}\s?$/),
  fc
    .tuple(
      fc.stringMatching(/^-?\d{1,6}(\.\d{1,4})?$/),
      fc.constantFrom('e', 'E'),
      fc.constantFrom('', '+', '-'),
      fc.integer({ min: 0, max: 400 }),
    )
    .map(([mantissa, e, sign, exponent]) => `${mantissa}${e}${sign}${exponent}`),
  fc.double().map(String),
  fc.constantFrom(
    '0',
    '-0',
    '0.00',
    '.5',
    '5.',
    '1e21',
    '1e308',
    '1e309',
    '-1e-7',
    'NaN',
    'Infinity',
    '0x10',
    '1_000',
    '١٢٣',
  ),
  anyText,
);

/** Objects JSON.parse can build that trip code calling String() or valueOf() on them. */
const hostileObjects = [
  '{"toString":false}',
  '{"valueOf":null,"toString":1}',
  '{"__proto__":{"x":1}}',
  '{"constructor":{"name":"GraphQLError"}}',
].map((text) => JSON.parse(text) as unknown);

/** Anything at all, as JSON.parse or a GraphQL variable could hold it, plus what JSON cannot. */
const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue(),
  fc.anything(),
  anyNumber,
  anyText,
  fc.constantFrom(undefined, null, true, [], {}, ...hostileObjects),
);

// ------------------------------------------------------------------ validateDeliveryInput / toWireRequest

/** The scalar's answer, or null where the scalar refuses it (GraphQL never lets that value through). */
function throughScalar(type: GraphQLScalarType, value: unknown): string | null {
  try {
    return type.parseValue(value) as string;
  } catch (error) {
    if (error instanceof GraphQLError) return null;
    throw error;
  }
}

interface InputArbitraries {
  number: fc.Arbitrary<number>;
  int: fc.Arbitrary<number>;
  decimal: fc.Arbitrary<string>;
  dateTime: fc.Arbitrary<string>;
}

/** Whatever the Decimal scalar accepts. */
const scalarDecimal = decimalText
  .map((text) => throughScalar(DecimalScalar, text))
  .filter((value): value is string => value !== null);

/**
 * Values exactly as the GraphQL layer hands them to resolvers: scalars already
 * parsed, numbers finite. Amounts stay under 10^13 major units (cents under 2^53):
 * larger ones are the `it.fails` on exact amounts below.
 */
const reachable: InputArbitraries = {
  number: graphqlFloat,
  int: graphqlInt,
  decimal: scalarDecimal.filter((value) => Math.abs(Number(value)) < 1e13),
  dateTime: fc.oneof(dateTimeText(), anyText).map((text) => throughScalar(DateTime, text) ?? '2030-05-01T14:00:00Z'),
};

/** Beyond what GraphQL lets through: NaN, the infinities, unparsed date-time text. */
const raw: InputArbitraries = {
  number: anyNumber,
  int: anyNumber,
  decimal: reachable.decimal,
  dateTime: fc.oneof(dateTimeText(), anyText),
};

function deliveryInputArbitrary(a: InputArbitraries): fc.Arbitrary<DeliveryInput> {
  const opt = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: null, freq: 3 });
  const maybe = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined, freq: 3 });
  const text = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom('Main St', 'Springfield', 'US', 'Ada') },
    { weight: 2, arbitrary: anyText },
  );
  const email = fc.oneof(fc.emailAddress(), anyText, fc.constantFrom('a@b', '@', 'a@', 'x y@z'));
  const address = fc.record(
    {
      street: text,
      city: text,
      country: text,
      number: opt(anyText),
      secondaryNumber: opt(anyText),
      county: opt(anyText),
      state: opt(anyText),
      postalCode: opt(anyText),
      latitude: opt(fc.oneof(a.number, fc.double({ min: -90, max: 90, noNaN: true }))),
      longitude: opt(fc.oneof(a.number, fc.double({ min: -180, max: 180, noNaN: true }))),
    },
    { requiredKeys: ['street', 'city', 'country'] },
  );
  const stop = fc.record(
    {
      name: text,
      phone: opt(fc.oneof(anyText, fc.stringMatching(/^\+?\d{0,20}$/))),
      email: opt(email),
      instructions: opt(fc.oneof(anyText, fc.string({ minLength: 500, maxLength: 530 }))),
      address: opt(address),
      windowStart: opt(a.dateTime),
    },
    { requiredKeys: ['name'] },
  );
  const item = fc.record({
    name: opt(anyText),
    quantity: opt(a.int),
    description: opt(anyText),
    externalId: opt(anyText),
    externalInstanceId: opt(anyText),
    price: opt(a.decimal),
    barcode: opt(anyText),
  });
  return fc.record(
    {
      pickup: stop,
      dropoff: stop,
      mode: opt(fc.constantFrom('NOW', 'SCHEDULED') as fc.Arbitrary<'NOW' | 'SCHEDULED'>),
      deliveryDate: opt(fc.oneof(fc.constant('2030-05-01'), anyText)),
      deliveryStartTime: opt(a.dateTime),
      deliveryEndTime: opt(a.dateTime),
      style: opt(fc.constantFrom(...DELIVERY_STYLES)),
      rawStyle: opt(
        fc.oneof(
          fc.constantFrom(
            'White Glove',
            'oversize',
            'SPECIAL-HANDLING',
            ' Standard ',
            'Other',
            '',
            '   ',
            'x'.repeat(65),
          ),
          anyText,
        ),
      ),
      minimumVehicleSize: opt(fc.oneof(fc.constantFrom('CAR', 'SUV', 'van', ' truck ', 'BIKE', ' '), anyText)),
      description: opt(anyText),
      requirements: opt(fc.array(anyText, { maxLength: 5 })),
      items: opt(fc.array(item, { maxLength: 4 })),
      itemsCount: opt(a.int),
      weight: opt(a.number),
      declaredValue: opt(a.decimal),
      tip: opt(a.decimal),
      currency: opt(fc.oneof(fc.constantFrom('USD', 'eur', 'US', 'USDT', '€€€'), anyText)),
      payload: maybe(fc.oneof(fc.jsonValue(), fc.dictionary(fc.string(), fc.jsonValue()))),
      partnerReference: opt(anyText),
    },
    { requiredKeys: ['pickup', 'dropoff'] },
  ) as fc.Arbitrary<DeliveryInput>;
}

/** Inputs built to pass the rules, with random text, numbers and amounts where the rules allow anything. */
function validishInput(a: InputArbitraries): fc.Arbitrary<DeliveryInput> {
  // Filters written as "not out of bounds", so NaN (which compares false) stays in the raw variant.
  const amount = a.decimal.filter((value) => !value.startsWith('-') && new Decimal(value).decimalPlaces() <= 2);
  const count = a.int.filter((n) => !(n < 0));
  return fc
    .record({
      names: fc.tuple(anyText, anyText).filter(([p, d]) => p.trim() !== '' && d.trim() !== ''),
      street: anyText.filter((s) => s.trim() !== ''),
      tip: fc.option(amount, { nil: null }),
      declaredValue: fc.option(amount, { nil: null }),
      itemPrice: fc.option(amount, { nil: null }),
      quantity: fc.option(count, { nil: null }),
      itemsCount: fc.option(count, { nil: null }),
      weight: fc.option(
        a.number.filter((n) => !(n < 0)),
        { nil: null },
      ),
      latitude: fc.option(
        a.number.filter((n) => !(n < -90 || n > 90)),
        { nil: null },
      ),
      windowStart: a.dateTime,
      // Within the payload bounds (16 levels, 32 KiB) most of the time.
      payload: fc.option(
        fc.oneof(
          { weight: 4, arbitrary: fc.dictionary(anyText, fc.jsonValue({ maxDepth: 4 })) },
          { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 4 }) },
        ),
        { nil: null },
      ),
      description: fc.option(anyText, { nil: null }),
      // Around the limits: 15 characters of phone, 512 of instructions.
      phone: fc.option(fc.string({ minLength: 12, maxLength: 18 }), { nil: null }),
      instructions: fc.option(fc.string({ minLength: 508, maxLength: 516 }), { nil: null }),
    })
    .map((r): DeliveryInput => ({
      pickup: {
        name: r.names[0],
        email: 'shop@example.com',
        phone: r.phone,
        instructions: r.instructions,
        address: { street: r.street, city: 'Springfield', country: 'US', latitude: r.latitude },
      },
      dropoff: {
        name: r.names[1],
        address: { street: r.street, city: 'Springfield', country: 'US' },
        windowStart: r.windowStart,
      },
      // deliveryDate is the window's UTC date (a contradiction is refused); unparsed text, as the raw variant has, is
      // never compared.
      deliveryDate: utcDateTime(r.windowStart)?.slice(0, 10) ?? '2030-05-01',
      currency: 'usd',
      tip: r.tip,
      declaredValue: r.declaredValue,
      weight: r.weight,
      itemsCount: r.itemsCount,
      description: r.description,
      payload: r.payload,
      items: [{ name: 'book', quantity: r.quantity, price: r.itemPrice }],
    }));
}

const groupArb = fc.constantFrom<ApiGroup>('PLATFORM', 'PARTNER');
const unitArb = fc.constantFrom<AmountUnit>('cents', 'major');

/** The paths of every `undefined` (or function) value inside `value`. */
function undefinedPaths(value: unknown, at = 'body'): string[] {
  if (value === undefined || typeof value === 'function') return [at];
  if (Array.isArray(value)) return value.flatMap((inner, index) => undefinedPaths(inner, `${at}[${index}]`));
  if (value && typeof value === 'object')
    return Object.entries(value).flatMap(([key, inner]) => undefinedPaths(inner, `${at}.${key}`));
  return [];
}

const nonBlank = (value: unknown) => typeof value === 'string' && value.trim() !== '';

/** The structural promises of a body that passed validation; returns what is broken. */
function bodyProblems(body: WireDeliveryRequest, input: DeliveryInput, group: ApiGroup, unit: AmountUnit): string[] {
  const problems: string[] = [];
  const check = (ok: boolean, what: string) => {
    if (!ok) problems.push(what);
  };
  const fields = body as unknown as Record<string, unknown>;
  for (const path of undefinedPaths(body)) problems.push(`${path} is undefined`);
  check(
    nonBlank(body.pickup_name) && nonBlank(body.dropoff_name) && nonBlank(body.email),
    'a required name or the email is blank',
  );
  check(body.pickup_name === input.pickup.name, 'pickup_name is not the input name');
  check(/^[^\s@]+@[^\s@]+$/.test(body.email), `email ${JSON.stringify(body.email)} is not an address`);
  for (const side of group === 'PLATFORM' ? ['pickup', 'dropoff'] : ['pickup']) {
    for (const part of ['street', 'city', 'country'])
      check(nonBlank(fields[`${side}_address_${part}`]), `${side}_address_${part} is blank`);
  }
  if (group === 'PARTNER') check(body.currency !== undefined, 'currency missing on PARTNER');
  if (body.currency !== undefined) check(/^[A-Z]{3}$/.test(body.currency), `currency ${JSON.stringify(body.currency)}`);
  const partnerOnly = ['partner_reference', 'partner_payload', 'delivery_start_time', 'delivery_end_time'];
  for (const field of group === 'PLATFORM' ? partnerOnly : ['platform_payload'])
    check(!(field in body), `${field} sent on ${group}`);
  if (body.pickup_phone_number !== undefined)
    check(body.pickup_phone_number.length <= 15, 'pickup_phone_number over 15 characters');
  if (body.pickup_instructions !== undefined)
    check(body.pickup_instructions.length <= 512, 'pickup_instructions over 512 characters');
  const mode = input.mode ?? 'SCHEDULED';
  if (mode !== 'NOW') check(Boolean(body.dropoff_start_time), 'dropoff_start_time missing');
  if (mode === 'SCHEDULED') check(Boolean(body.delivery_date), 'delivery_date missing');
  // delivery_date is a UTC date: never another day than the dropoff window's start.
  const windowDay = utcDateTime(body.dropoff_start_time)?.slice(0, 10);
  if (body.delivery_date !== undefined && windowDay !== undefined)
    check(
      body.delivery_date === windowDay,
      `delivery_date ${body.delivery_date} is not the UTC date of dropoff_start_time ${body.dropoff_start_time}`,
    );
  // A documented style in its documented spelling, or a style enabled beyond them exactly as rawStyle wrote it
  // (trimmed).
  const documented = ['Standard', 'Hybrid', 'Special Handling', 'Oversize'];
  if (body.delivery_style !== undefined) {
    check(
      documented.includes(body.delivery_style) || body.delivery_style === input.rawStyle?.trim(),
      `delivery_style ${JSON.stringify(body.delivery_style)}`,
    );
    check(
      body.delivery_style.trim() !== '' && body.delivery_style.length <= 64,
      `delivery_style ${JSON.stringify(body.delivery_style)} is blank or long`,
    );
  }
  check(input.style == null || input.rawStyle == null, 'both style and rawStyle were accepted');
  if (body.delivery_style === 'Oversize')
    check(nonBlank(body.package_minimum_vehicle_size), 'Oversize without a vehicle size');
  for (const field of ['platform_payload', 'partner_payload'] as const) {
    const payload = body[field];
    if (payload !== undefined)
      check(
        payload !== null && typeof payload === 'object' && !Array.isArray(payload),
        `${field} is not a JSON object`,
      );
  }
  const amounts: Array<[string, number | undefined]> = [
    ['tip', body.tip],
    ['package_value', body.package_value],
    ...(body.items ?? []).map((item, index): [string, number | undefined] => [`items[${index}].price`, item.price]),
  ];
  for (const [field, amount] of amounts) {
    if (amount === undefined) continue;
    check(
      typeof amount === 'number' && Number.isFinite(amount) && amount >= 0,
      `${field} ${amount} is not a finite non-negative number`,
    );
    if (unit === 'cents') check(Number.isInteger(amount), `${field} ${amount} is not whole cents`);
  }
  return problems;
}

/** ValidationError with every problem, or a well-formed body; anything else fails. */
function checkInput(input: DeliveryInput, group: ApiGroup, unit: AmountUnit): WireDeliveryRequest | ValidationError {
  const problems = validateDeliveryInput(input, group);
  let body: WireDeliveryRequest;
  try {
    body = toWireRequest(input, group, unit);
  } catch (error) {
    if (!(error instanceof ValidationError)) throw error;
    const wrong = error.fields.filter((field) => !/^input\.[A-Za-z]/.test(field.path) || field.message.length === 0);
    if (error.fields.length === 0 || wrong.length > 0 || JSON.stringify(error.fields) !== JSON.stringify(problems)) {
      expect({ fields: error.fields, wrong }).toEqual({ fields: problems, wrong: [] });
      expect(error.fields.length).toBeGreaterThan(0);
    }
    return error;
  }
  if (problems.length > 0) expect(problems).toEqual([]);
  const broken = bodyProblems(body, input, group, unit);
  if (broken.length > 0) expect(broken).toEqual([]);
  return body;
}

describe('validateDeliveryInput and toWireRequest under random input', () => {
  it('give a ValidationError or a well-formed body for anything the GraphQL layer can deliver', () => {
    let successes = 0;
    let failures = 0;
    fc.assert(
      fc.property(deliveryInputArbitrary(reachable), groupArb, unitArb, (input, group, unit) => {
        if (checkInput(input, group, unit) instanceof ValidationError) failures += 1;
        else successes += 1;
      }),
      { numRuns: RUNS },
    );
    // Both outcomes were exercised, or the property proved little.
    expect(failures).toBeGreaterThan(RUNS / 4);
    expect(successes + failures).toBe(RUNS);
  });

  it('give a ValidationError or a well-formed body for inputs built to pass the rules', () => {
    let successes = 0;
    fc.assert(
      fc.property(validishInput(reachable), groupArb, unitArb, (input, group, unit) => {
        const result = checkInput(input, group, unit);
        if (result instanceof ValidationError) return;
        successes += 1;
        // Amounts go out in the configured unit: 12.34 → 1234 cents.
        if (input.tip != null && unit === 'cents' && Math.abs(Number(input.tip)) < 1e12)
          expect(result.tip).toBe(Math.round(Number(input.tip) * 100));
        if (input.tip != null && unit === 'major') expect(result.tip).toBe(Number(input.tip));
        // Item prices the same way as the tip.
        const price = input.items?.[0]?.price;
        if (price != null)
          expect(result.items![0]!.price).toBe(
            unit === 'cents' ? new Decimal(price).mul(100).toNumber() : Number(price),
          );
      }),
      { numRuns: RUNS },
    );
    // Phone and instructions straddle their bounds (about half pass each): about a quarter pass in all.
    expect(successes).toBeGreaterThan(RUNS / 8);
  });

  it('never throw anything but ValidationError, even for NaN, infinities and unparsed times', () => {
    fc.assert(
      fc.property(
        fc.oneof(deliveryInputArbitrary(raw), validishInput(raw)),
        groupArb,
        unitArb,
        (input, group, unit) => {
          let body: WireDeliveryRequest;
          try {
            body = toWireRequest(input, group, unit);
          } catch (error) {
            expect(error).toBeInstanceOf(ValidationError);
            return;
          }
          // The structure holds whatever the numbers were.
          expect(undefinedPaths(body)).toEqual([]);
          if (!(nonBlank(body.pickup_name) && nonBlank(body.dropoff_name) && nonBlank(body.email)))
            expect(body).toMatchObject({ pickup_name: expect.any(String) });
        },
      ),
      { numRuns: RUNS },
    );
  });

  // PRODUCT BUG (low severity, defence in depth): validateDeliveryInput compares numbers
  // with `<`/`>` only, so NaN passes every bound (NaN < 0 is false) and +Infinity
  // passes the non-negative checks: `weight: NaN`, `itemsCount: Infinity`,
  // `items[0].quantity: NaN`, `latitude: NaN` reach the wire body (JSON turns them
  // into null). GraphQL's Float/Int refuse these today, so a client cannot send
  // them; any other caller of toWireRequest can. Expected: a ValidationError.
  it('refuses non-finite numbers instead of putting them into the wire body', () => {
    const finite = (value: unknown): boolean =>
      typeof value === 'number'
        ? Number.isFinite(value)
        : Array.isArray(value)
          ? value.every(finite)
          : value && typeof value === 'object'
            ? Object.values(value).every(finite)
            : true;
    fc.assert(
      fc.property(
        fc.oneof(validishInput(raw), deliveryInputArbitrary(raw)),
        groupArb,
        unitArb,
        (input, group, unit) => {
          let body: WireDeliveryRequest;
          try {
            body = toWireRequest(input, group, unit);
          } catch (error) {
            if (error instanceof ValidationError) return;
            throw error;
          }
          expect(finite(body)).toBe(true);
        },
      ),
      { numRuns: RUNS },
    );
  });

  // PRODUCT BUG: the Decimal scalar accepts any amount below ~1.8e308, and
  // amountForUpstream converts with Decimal.mul(100).toNumber(). Cents beyond 2^53 are
  // silently rounded (tip "12345678901234567.89" is sent as 1234567890123456800 cents,
  // 11 cents off), and from ~1.8e306 up the amount becomes Infinity, which JSON sends
  // as `"tip": null` (declaredValue "1e307" → package_value Infinity). All reachable
  // through GraphQL. Expected: the wire amount is exactly amount × 100, or a ValidationError.
  it('sends tip, declaredValue and item prices exactly, or refuses them', () => {
    const amount = fc
      .oneof(
        fc.stringMatching(/^\d{14,40}\.\d{2}$/),
        fc.integer({ min: 13, max: 308 }).map((exponent) => `1e${exponent}`),
      )
      .map((text) => throughScalar(DecimalScalar, text))
      .filter((value): value is string => value !== null);
    fc.assert(
      fc.property(amount, (tip) => {
        const input: DeliveryInput = {
          pickup: { name: 'a', email: 'a@b.c', address: { street: 's', city: 'c', country: 'US' } },
          dropoff: { name: 'b', address: { street: 's', city: 'c', country: 'US' } },
          mode: 'NOW',
          tip,
          items: [{ name: 'crate', price: tip }],
        };
        let body: WireDeliveryRequest;
        try {
          body = toWireRequest(input, 'PLATFORM', 'cents');
        } catch (error) {
          if (error instanceof ValidationError) return;
          throw error;
        }
        for (const sent of [body.tip, body.items![0]!.price]) {
          expect(Number.isFinite(sent)).toBe(true);
          expect(new Decimal(sent!).equals(new Decimal(tip).mul(100))).toBe(true);
        }
      }),
      { numRuns: 200 },
    );
  });
});

// ------------------------------------------------------------------ REST and webhook shapes → Delivery

const FLAT_ADDRESS_FIELDS = [
  'street',
  'city',
  'country',
  'number',
  'secondary_number',
  'county',
  'state',
  'postal_code',
  'latitude',
  'longitude',
].flatMap((part) => [`pickup_address_${part}`, `dropoff_address_${part}`]);
const COMMON_FIELDS = [
  'status',
  'price',
  'distance',
  'pickup_name',
  'dropoff_name',
  'delivery_date',
  'driver_id',
  'driver_name',
  'driver_location',
  'driver_pickup_phone_number',
  'driver_dropoff_phone_number',
  'driver_vehicle_make',
  'driver_vehicle_model',
  'driver_vehicle_year',
  'dropoff_time_estimated',
  'pickup_phone_number',
  'dropoff_phone_number',
  'pickup_instructions',
  'dropoff_instructions',
  'email',
  'dropoff_email',
  'package_description',
  'package_minimum_vehicle_size',
  'package_delivery_mode',
  'package_requirements',
  'items_count',
  'items',
  'weight',
  'package_value',
  'pickup_start_time',
  'dropoff_start_time',
  'delivery_start_time',
  'delivery_end_time',
  'dropoff_verification_image_url',
  'dropoff_signature_image_url',
  'cancellation_reason',
  'tip',
  'delivery_style',
  // Both groups' spellings, so each reader meets the other's too.
  'dimensions',
  'dimentions',
  'platform_payload',
  'partner_payload',
  'partner_reference',
  'tracking_link',
  'tracking_url',
  'expected_cancellation_fee',
  'expected_cancelation_fee',
];

/** A value for any field: junk, or the shape the field should have with junk inside. */
function fieldValue(dateTimes: fc.Arbitrary<string>): fc.Arbitrary<unknown> {
  const amount = fc.oneof(
    anyNumber,
    decimalText,
    fc.stringMatching(/^-?\d{1,20}(\.\d{1,12})?$/),
    fc.constantFrom(0.1 + 0.2, 17.35, 1e21, 5e-324, -0),
  );
  const coordinate = fc.oneof(anyNumber, fc.double().map(String), anyValue);
  const address = fc.record(
    Object.fromEntries(
      [
        'street',
        'number',
        'secondary_number',
        'city',
        'county',
        'state',
        'postal_code',
        'country',
        'latitude',
        'longitude',
      ].map((k) => [k, fc.oneof(anyText, coordinate)]),
    ),
    { requiredKeys: [] },
  );
  return fc.oneof(
    { weight: 3, arbitrary: anyValue },
    { weight: 2, arbitrary: amount },
    { weight: 3, arbitrary: fc.oneof(dateTimes, fc.stringMatching(/^\d{4}-\d{2}-\d{2}$/)) },
    {
      weight: 2,
      arbitrary: fc.record(
        {
          value: fc.oneof(amount, anyValue),
          currency: fc.oneof(anyText, anyValue),
          unit: anyValue,
          amount: fc.oneof(amount, anyValue),
        },
        { requiredKeys: [] },
      ),
    },
    { weight: 1, arbitrary: fc.record({ lat: coordinate, lng: coordinate }, { requiredKeys: [] }) },
    {
      weight: 1,
      arbitrary: fc.record({ height: coordinate, length: coordinate, width: coordinate }, { requiredKeys: [] }),
    },
    {
      weight: 1,
      arbitrary: fc.array(
        fc.oneof(
          fc.record({ name: anyText, quantity: coordinate, price: amount, barcode: anyValue }, { requiredKeys: [] }),
          anyValue,
        ),
        { maxLength: 4 },
      ),
    },
    { weight: 1, arbitrary: address },
  );
}

/** An object with the real field names of `fields`, each present or not, with random values; uid always there. */
function wireObject(
  fields: string[],
  extra: Record<string, fc.Arbitrary<unknown>> = {},
  dateTimes = dateTimeText(),
): fc.Arbitrary<Record<string, unknown>> {
  const value = fieldValue(fc.oneof(dateTimes, dateTimeText()));
  return fc
    .tuple(
      fc.oneof(
        fc.uuid(),
        anyText.filter((s) => s !== ''),
      ),
      fc.record(Object.fromEntries(fields.map((field) => [field, value])), { requiredKeys: [] }),
      fc.record(extra, { requiredKeys: Object.keys(extra) }),
      // And now and then a field nobody documented.
      fc.dictionary(fc.string(), anyValue, { maxKeys: 3 }),
    )
    .map(([uid, known, required, unknown]) => ({ ...unknown, ...known, ...required, uid }));
}

const isNullableString = (value: unknown) => value === null || typeof value === 'string';
const isNullableFinite = (value: unknown) => value === null || (typeof value === 'number' && Number.isFinite(value));

/**
 * Every promise the Delivery model makes to the GraphQL types that serialize it;
 * returns what is broken (checked by hand: thousands of `expect` calls would be slow).
 */
function deliveryProblems(delivery: Delivery, raw: Record<string, unknown>): string[] {
  const problems: string[] = [];
  const check = (ok: boolean, what: string, value: unknown) => {
    if (!ok) problems.push(`${what}: ${JSON.stringify(value)?.slice(0, 200)}`);
  };
  const money = (what: string, value: string | null | undefined) => {
    if (value == null) return;
    check(MONEY.test(value), `${what} is not a decimal string`, value);
    check(DecimalScalar.serialize(value) === value, `${what} does not serialize as itself`, value);
  };
  const time = (what: string, value: string | null) => {
    if (value === null) return;
    check(UTC_OUTPUT_TIME.test(value), `${what} is not YYYY-MM-DDTHH:MM:SS[.fff]Z`, value);
    // A real instant, not a rolled-over one such as "2026-02-30T24:00:00Z".
    const date = new Date(`${value.slice(0, 19)}Z`);
    check(
      !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 19) === value.slice(0, 19),
      `${what} is not a real instant`,
      value,
    );
    let serialized: unknown;
    try {
      serialized = DateTime.serialize(value);
    } catch (error) {
      serialized = error;
    }
    check(serialized === value, `${what} does not serialize as itself`, value);
  };
  check(delivery.uid === String(raw.uid), 'uid', delivery.uid);
  check(delivery.group === 'PLATFORM' || delivery.group === 'PARTNER', 'group', delivery.group);
  check((DELIVERY_STATUSES as readonly string[]).includes(delivery.status), 'status', delivery.status);
  check(
    delivery.style === null || (DELIVERY_STYLES as readonly string[]).includes(delivery.style),
    'style',
    delivery.style,
  );
  check(delivery.mode === null || delivery.mode === 'NOW' || delivery.mode === 'SCHEDULED', 'mode', delivery.mode);

  money('price.amount', delivery.price?.amount);
  money('tip', delivery.tip);
  money('package.declaredValue', delivery.package.declaredValue);
  money('expectedCancellationFee.amount', delivery.expectedCancellationFee?.amount);
  (delivery.package.items ?? []).forEach((item, i) => money(`items.${i}.price`, item.price));
  for (const m of [delivery.price, delivery.expectedCancellationFee])
    if (m) check(typeof m.currency === 'string', 'currency', m.currency);

  time('pickup.windowStart', delivery.pickup.windowStart);
  time('dropoff.windowStart', delivery.dropoff.windowStart);
  time('deliveryStartTime', delivery.deliveryStartTime);
  time('deliveryEndTime', delivery.deliveryEndTime);
  time('estimatedDropoffAt', delivery.estimatedDropoffAt);
  if (delivery.deliveryDate !== null) {
    check(CALENDAR_DATE.test(delivery.deliveryDate), 'deliveryDate is not YYYY-MM-DD', delivery.deliveryDate);
    const date = new Date(`${delivery.deliveryDate}T00:00:00Z`);
    check(
      !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 10) === delivery.deliveryDate,
      'deliveryDate is not a real day',
      delivery.deliveryDate,
    );
  }

  const numbers = {
    'distance.value': delivery.distance?.value ?? null,
    'package.weight': delivery.package.weight,
    'package.itemsCount': delivery.package.itemsCount,
    ...Object.fromEntries(Object.entries(delivery.package.dimensions ?? {}).map(([k, v]) => [`dimensions.${k}`, v])),
    ...Object.fromEntries((delivery.package.items ?? []).map((item, i) => [`items.${i}.quantity`, item.quantity])),
    'courier.location.lat': delivery.courier?.location?.lat ?? null,
    'courier.location.lng': delivery.courier?.location?.lng ?? null,
    'courier.vehicle.year': delivery.courier?.vehicle?.year ?? null,
    'pickup.address.latitude': delivery.pickup.address?.latitude ?? null,
    'pickup.address.longitude': delivery.pickup.address?.longitude ?? null,
    'dropoff.address.latitude': delivery.dropoff.address?.latitude ?? null,
    'dropoff.address.longitude': delivery.dropoff.address?.longitude ?? null,
  };
  for (const [what, n] of Object.entries(numbers))
    check(isNullableFinite(n), `${what} is not a finite number or null`, n);
  if (delivery.package.itemsCount !== null)
    check(Number.isInteger(delivery.package.itemsCount), 'itemsCount is not an integer', delivery.package.itemsCount);

  const strings = [
    delivery.rawStatus,
    delivery.rawStyle,
    delivery.trackingUrl,
    delivery.partnerReference,
    delivery.cancellationReason,
    delivery.package.description,
    delivery.package.minimumVehicleSize,
    delivery.distance?.unit ?? null,
    ...[delivery.pickup, delivery.dropoff].flatMap((s) => [s.name, s.phone, s.email, s.instructions]),
    ...[delivery.pickup.address, delivery.dropoff.address].flatMap((a) =>
      a ? [a.street, a.number, a.secondaryNumber, a.city, a.county, a.state, a.postalCode, a.country] : [],
    ),
    ...(delivery.courier
      ? [
          delivery.courier.name,
          delivery.courier.pickupPhone,
          delivery.courier.dropoffPhone,
          delivery.courier.vehicle?.make ?? null,
          delivery.courier.vehicle?.model ?? null,
        ]
      : []),
  ];
  strings.forEach((s, i) => check(isNullableString(s), `string field #${i} is not a string or null`, s));
  check(
    delivery.package.requirements.every((r) => typeof r === 'string'),
    'requirements',
    delivery.package.requirements,
  );
  return problems;
}

const MAPPERS = {
  fromPlatformDelivery: (raw: Record<string, unknown>) => fromPlatformDelivery(raw as unknown as WireDelivery),
  fromPartnerOrder: (raw: Record<string, unknown>) => fromPartnerOrder(raw as unknown as WireOrder),
  fromWebhookEvent: (raw: Record<string, unknown>) => fromWebhookEvent(raw as unknown as WireWebhookEvent),
};
const WEBHOOK_EXTRA = {
  event_name: fc.oneof(fc.constantFrom('delivery.created', 'location.pickup_enroute'), anyText),
  pickup_address: fieldValue(dateTimeText()),
  dropoff_address: fieldValue(dateTimeText()),
};

describe('REST and webhook shapes → Delivery under random input', () => {
  for (const [name, map] of Object.entries(MAPPERS)) {
    it(`${name} never throws and yields exact money, UTC times and finite numbers or null`, () => {
      const fields = [...COMMON_FIELDS, ...FLAT_ADDRESS_FIELDS];
      fc.assert(
        fc.property(wireObject(fields, name === 'fromWebhookEvent' ? WEBHOOK_EXTRA : {}), (raw) => {
          expect(deliveryProblems(map(raw), raw)).toEqual([]);
        }),
        { numRuns: RUNS / 2 },
      );
    });
  }

  it('reads the documented shapes with random values as the same Delivery, field by field', () => {
    // Money and time fields given in their documented form must come out, not as null.
    const shape = fc.record({
      uid: fc.uuid(),
      tip: fc.integer({ min: 0, max: 10_000_000 }).map((cents) => cents / 100),
      price: fc.record({
        value: fc.integer({ min: 0, max: 10_000_000 }).map((cents) => cents / 100),
        currency: fc.constantFrom('USD', 'EUR'),
      }),
      pickup_start_time: fc
        .date({ min: new Date('0001-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59Z'), noInvalidDate: true })
        .map((d) => `${d.toISOString().slice(0, 19)}+00:00`),
    });
    fc.assert(
      fc.property(shape, fc.constantFrom(...Object.values(MAPPERS)), (raw, map) => {
        const delivery = map(raw);
        expect(delivery.tip).toBe(raw.tip.toFixed(2));
        expect(delivery.price).toEqual({ amount: raw.price.value.toFixed(2), currency: raw.price.currency });
        expect(delivery.pickup.windowStart).toBe(`${raw.pickup_start_time.slice(0, 19)}Z`);
      }),
      { numRuns: RUNS },
    );
  });

  // PRODUCT BUG: utcDateTime (src/mapping/scalars.ts) formats with
  // `new Date(ms).toISOString().slice(0, 19)`, which breaks for instants outside
  // years 0000–9999: "0000-01-01T00:00:00+01:00" becomes "-000001-12-31T23:00Z" and
  // "9999-12-31T23:59:59-01:00" becomes "+010000-01-01T00:59Z". The mapping then holds a
  // time that is not "YYYY-MM-DDTHH:MM:SSZ", and the DateTime scalar refuses to serialize
  // it (the whole field errors). Expected: null for an instant that cannot be written.
  it('yields a UTC time or null for instants an offset pushes out of years 0000–9999', () => {
    const edge = edgeDateTimeText;
    fc.assert(
      fc.property(
        wireObject(['pickup_start_time', 'dropoff_time_estimated'], { pickup_start_time: edge }, edge),
        (raw) => {
          expect(deliveryProblems(fromPlatformDelivery(raw as unknown as WireDelivery), raw)).toEqual([]);
        },
      ),
      { numRuns: RUNS },
    );
  });
});

// ------------------------------------------------------------------ GraphQL scalars

/** The scalar's parse: a GraphQLError for junk, otherwise a value matching `shape`. */
function expectParsedOrGraphQLError(parse: () => unknown, shape: RegExp): void {
  let value: unknown;
  try {
    value = parse();
  } catch (error) {
    if (!(error instanceof GraphQLError)) throw error;
    return;
  }
  expect(value).toMatch(shape);
}

/** AST literals of every kind, holding random text. */
const literal: fc.Arbitrary<ValueNode> = fc.oneof(
  fc.oneof(decimalText, dateTimeText(), anyText).map((value): ValueNode => ({ kind: Kind.STRING, value })),
  fc.integer().map((n): ValueNode => ({ kind: Kind.INT, value: String(n) })),
  fc
    .stringMatching(/^-?\d{1,20}\.\d{1,20}([eE][+-]?\d{1,3})?$/)
    .map((value): ValueNode => ({ kind: Kind.FLOAT, value })),
  fc.boolean().map((value): ValueNode => ({ kind: Kind.BOOLEAN, value })),
  fc.constant<ValueNode>({ kind: Kind.NULL }),
  anyText.map((value): ValueNode => ({ kind: Kind.ENUM, value })),
  fc.constant<ValueNode>({ kind: Kind.LIST, values: [] }),
  fc.constant<ValueNode>({ kind: Kind.OBJECT, fields: [] }),
);

describe('GraphQL scalars under random input', () => {
  const junk = fc.oneof(
    anyValue,
    decimalText,
    dateTimeText(),
    fc.date().map((d) => d.toString()),
  );

  it('DateTime.parseValue gives "YYYY-MM-DDTHH:MM:SSZ" or a GraphQLError', () => {
    let accepted = 0;
    fc.assert(
      fc.property(fc.oneof(junk, dateTimeText()), (value) => {
        expectParsedOrGraphQLError(() => DateTime.parseValue(value), UTC_TIME);
        try {
          DateTime.parseValue(value);
          accepted += 1;
        } catch {
          // counted above
        }
      }),
      { numRuns: RUNS * 2 },
    );
    expect(accepted).toBeGreaterThan(RUNS / 20);
  });

  it('DateTime converts any offset to the same instant in UTC', () => {
    const instant = fc.record({
      date: fc.date({
        min: new Date('0002-01-01T00:00:00Z'),
        max: new Date('9998-12-31T00:00:00Z'),
        noInvalidDate: true,
      }),
      offsetMinutes: fc.integer({ min: -(23 * 60 + 59), max: 23 * 60 + 59 }),
    });
    fc.assert(
      fc.property(instant, ({ date, offsetMinutes }) => {
        const utcSeconds = Math.floor(date.getTime() / 1000) * 1000;
        const local = new Date(utcSeconds + offsetMinutes * 60_000).toISOString().slice(0, 19);
        const abs = Math.abs(offsetMinutes);
        const text = `${local}${offsetMinutes < 0 ? '-' : '+'}${pad(Math.floor(abs / 60), 2)}:${pad(abs % 60, 2)}`;
        expect(DateTime.parseValue(text)).toBe(`${new Date(utcSeconds).toISOString().slice(0, 19)}Z`);
      }),
      { numRuns: RUNS },
    );
  });

  it('DateTime.parseLiteral gives "YYYY-MM-DDTHH:MM:SSZ" or a GraphQLError for literals of any kind', () => {
    fc.assert(
      fc.property(literal, (ast) => expectParsedOrGraphQLError(() => DateTime.parseLiteral(ast, undefined), UTC_TIME)),
      { numRuns: RUNS },
    );
  });

  it('Date (graphql-scalars LocalDate) gives "YYYY-MM-DD" or an error graphql-js reports', () => {
    // LocalDate throws a TypeError, not a GraphQLError, for {"toString": false}; graphql-js
    // reports any Error a parseValue throws as a GraphQLError, so only non-errors would escape.
    fc.assert(
      fc.property(junk, (value) => {
        let parsed: unknown;
        try {
          parsed = DateScalar.parseValue(value);
        } catch (error) {
          expect(error).toBeInstanceOf(Error);
          return;
        }
        expect(parsed).toMatch(CALENDAR_DATE);
      }),
      { numRuns: RUNS },
    );
  });

  it('Decimal.parseValue gives an exact decimal string or a GraphQLError', () => {
    let accepted = 0;
    fc.assert(
      fc.property(fc.oneof(junk, decimalText, fc.double()), (value) => {
        expectParsedOrGraphQLError(() => DecimalScalar.parseValue(value), MONEY);
        if (typeof value === 'string' && /^\s*-?\d{1,18}(\.\d{1,10})?\s*$/.test(value)) {
          // A plain decimal text within the documented bounds (18 integer, 10 fractional digits) keeps its exact value.
          const parsed = DecimalScalar.parseValue(value) as string;
          expect(new Decimal(parsed).equals(new Decimal(value.trim()))).toBe(true);
          accepted += 1;
        }
      }),
      { numRuns: RUNS * 2 },
    );
    expect(accepted).toBeGreaterThan(RUNS / 20);
  });

  it('Decimal.parseLiteral gives an exact decimal string or a GraphQLError for literals of any kind', () => {
    fc.assert(
      fc.property(literal, (ast) =>
        expectParsedOrGraphQLError(() => DecimalScalar.parseLiteral(ast, undefined), MONEY),
      ),
      { numRuns: RUNS },
    );
  });

  // PRODUCT BUG (severe: one request can kill the process): parseDecimal in
  // src/graphql/scalars.ts checks finiteness with Number(text), which is 0 for a tiny
  // exponent, then expands the value with toFixed(decimalPlaces). "1e-100000" (9
  // characters) becomes a 100,002-character string; "1e-10000000" takes 1.6 s of CPU
  // and 10 MB; "1e-600000000" — as a variable or as a literal (`tip: 1e-600000000`) —
  // exhausts the heap and the whole Node process dies with "FATAL ERROR: Reached heap
  // limit" (observed after ~90 s at 4 GB). Expected: a GraphQLError for exponents or
  // scale beyond a sane bound, so the answer stays proportional to the input.
  it('Decimal.parseValue answers in proportion to its input (no exponent blow-up)', () => {
    const tinyExponent = fc
      .tuple(fc.integer({ min: 1, max: 9 }), fc.integer({ min: 20_000, max: 200_000 }))
      .map(([digit, exponent]) => `${digit}e-${exponent}`);
    fc.assert(
      fc.property(tinyExponent, (text) => {
        let parsed: string;
        try {
          parsed = DecimalScalar.parseValue(text) as string;
        } catch (error) {
          if (!(error instanceof GraphQLError)) throw error;
          return;
        }
        expect(parsed.length).toBeLessThanOrEqual(10 * text.length + 100);
      }),
      { numRuns: 20 },
    );
  });

  // PRODUCT BUG: the same year-range fault as utcDateTime, at the input side:
  // DateTime.parseValue("0000-01-01T00:00:00+01:00") returns "-000001-12-31T23:00Z"
  // and "9999-12-31T23:59:59-01:00" returns "+010000-01-01T00:59Z", which would be sent
  // upstream as pickup_start_time. Expected: a GraphQLError.
  it('DateTime.parseValue refuses instants an offset pushes out of years 0000–9999', () => {
    const edge = edgeDateTimeText;
    fc.assert(
      fc.property(edge, (value) => expectParsedOrGraphQLError(() => DateTime.parseValue(value), UTC_TIME)),
      { numRuns: RUNS },
    );
  });
});
