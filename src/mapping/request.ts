// DeliveryInput → the upstream request body, after checking every rule of the
// chosen group (all problems at once, each with its input path). The upstream
// rejects what these rules reject; checking first saves a round trip and gives
// the client GraphQL paths instead of REST field names.
import { BOOKING_MARKER_FIELD } from '../domain/booking-marker.js';
import { Decimal } from 'decimal.js';
import type { AmountUnit, UpstreamConfig } from '../config.js';
import { ValidationError, type FieldProblem, UpstreamValidationError } from '../errors.js';
import type { WireDeliveryRequest, WireItem } from '../upstream/wire.js';
import { scrubSecrets } from '../upstream/refusal.js';
import type { ApiGroup, DeliveryMode, DeliveryStyle } from './model.js';
import { INPUT_LIMITS, nestsDeeperThan } from '../domain/limits.js';
import { isJsonObject, utcDateTime } from './scalars.js';
import { deliveryStyle, WIRE_STYLE } from './status.js';

export interface AddressInput {
  street: string;
  city: string;
  country: string;
  number?: string | null;
  secondaryNumber?: string | null;
  county?: string | null;
  state?: string | null;
  postalCode?: string | null;
  latitude?: number | null;
  longitude?: number | null;
}

/**
 * An address of which any part may be missing: the partner group's dropoff (its document makes those fields optional).
 */
export type AddressPartsInput = { [K in keyof AddressInput]?: AddressInput[K] | null };

export interface StopInput {
  name: string;
  phone?: string | null;
  email?: string | null;
  instructions?: string | null;
  address?: AddressInput | null;
  /** The dropoff's address part by part, instead of `address`. */
  addressParts?: AddressPartsInput | null;
  /** Already UTC "YYYY-MM-DDTHH:MM:SSZ" (the DateTime scalar converts offsets). */
  windowStart?: string | null;
}

export interface ItemInput {
  name?: string | null;
  quantity?: number | null;
  description?: string | null;
  externalId?: string | null;
  externalInstanceId?: string | null;
  price?: string | null;
  barcode?: string | null;
}

export interface DeliveryInput {
  pickup: StopInput;
  dropoff: StopInput;
  mode?: DeliveryMode | null;
  deliveryDate?: string | null;
  deliveryStartTime?: string | null;
  deliveryEndTime?: string | null;
  style?: DeliveryStyle | null;
  /** The style as the upstream spells it, for a style enabled for the platform beyond the documented four. */
  rawStyle?: string | null;
  minimumVehicleSize?: string | null;
  description?: string | null;
  requirements?: string[] | null;
  items?: ItemInput[] | null;
  itemsCount?: number | null;
  weight?: number | null;
  declaredValue?: string | null;
  tip?: string | null;
  currency?: string | null;
  payload?: unknown;
  partnerReference?: string | null;
}

/** Largest tip, declared value or item price: its cents stay far inside the exact range of a JSON number. */
const MAX_AMOUNT = new Decimal('1000000000000');
const RAW_STYLE_MAX = 64;
const PICKUP_PHONE_MAX = 15;
const PICKUP_INSTRUCTIONS_MAX = 512;

/** Input path of each upstream body field, to report upstream validation errors where the client wrote the value. */
const INPUT_PATH_OF_WIRE_FIELD: Record<string, string> = {
  pickup_name: 'input.pickup.name',
  pickup_phone_number: 'input.pickup.phone',
  email: 'input.pickup.email',
  pickup_instructions: 'input.pickup.instructions',
  pickup_start_time: 'input.pickup.windowStart',
  dropoff_name: 'input.dropoff.name',
  dropoff_phone_number: 'input.dropoff.phone',
  dropoff_email: 'input.dropoff.email',
  dropoff_instructions: 'input.dropoff.instructions',
  dropoff_start_time: 'input.dropoff.windowStart',
  delivery_date: 'input.deliveryDate',
  delivery_start_time: 'input.deliveryStartTime',
  delivery_end_time: 'input.deliveryEndTime',
  package_delivery_mode: 'input.mode',
  package_minimum_vehicle_size: 'input.minimumVehicleSize',
  delivery_style: 'input.style',
  weight: 'input.weight',
  package_description: 'input.description',
  package_requirements: 'input.requirements',
  items: 'input.items',
  items_count: 'input.itemsCount',
  package_value: 'input.declaredValue',
  tip: 'input.tip',
  currency: 'input.currency',
  platform_payload: 'input.payload',
  partner_payload: 'input.payload',
  partner_reference: 'input.partnerReference',
};

const ADDRESS_FIELDS: Record<string, keyof AddressInput> = {
  street: 'street',
  city: 'city',
  country: 'country',
  number: 'number',
  secondary_number: 'secondaryNumber',
  county: 'county',
  state: 'state',
  postal_code: 'postalCode',
  latitude: 'latitude',
  longitude: 'longitude',
};

export function inputPathOfWireField(field: string): string {
  const direct = INPUT_PATH_OF_WIRE_FIELD[field];
  if (direct) return direct;
  const match = /^(pickup|dropoff)_address_(.+)$/.exec(field);
  if (match && ADDRESS_FIELDS[match[2]!]) return `input.${match[1]}.address.${ADDRESS_FIELDS[match[2]!]}`;
  return `input.${field}`;
}

/**
 * An upstream validation failure as the same ValidationError the facade's own
 * checks give. The upstream's words are passed on (they name the field), with
 * the caller's key scrubbed from them in case the upstream echoes its header.
 */
export function validationErrorFromUpstream(
  error: UpstreamValidationError,
  key: string,
  input?: DeliveryInput,
): ValidationError {
  const scrub = (text: string) => scrubSecrets(text, key);
  // The client wrote delivery_style as rawStyle when it sent that field.
  const pathOf = (field: string) => {
    if (field === 'delivery_style' && input?.rawStyle != null) return 'input.rawStyle';
    const path = inputPathOfWireField(field);
    // The client wrote the dropoff address as addressParts when it sent that.
    return input?.dropoff.addressParts != null
      ? path.replace(/^input\.dropoff\.address\./, 'input.dropoff.addressParts.')
      : path;
  };
  // A message without a field (the partner group's, or a bare list of messages) names the field when it can.
  const pathFromWords = (message: string) => {
    const named = /\b([a-z]+(?:_[a-z]+)+|email|currency|weight|tip|items)\b/.exec(message)?.[1];
    return named ? pathOf(named) : 'input';
  };
  const fields: FieldProblem[] = [];
  for (const [field, messages] of Object.entries(error.errors)) {
    const list = Array.isArray(messages) ? messages : [messages];
    for (const text of list) {
      const message = scrub(String(text));
      fields.push({ path: field === '' ? pathFromWords(message) : scrub(pathOf(field)), message });
    }
  }
  const message = scrub(error.message);
  if (fields.length === 0) fields.push({ path: pathFromWords(message), message });
  const result = new ValidationError(fields, message);
  result.upstream = error.upstream;
  return result;
}

/**
 * The documented style a request asks for (from `style`, or from a `rawStyle`
 * that spells a documented one in any case or separators) and the string sent
 * as delivery_style: the documented spelling, or rawStyle trimmed and otherwise
 * unchanged for a style enabled beyond the four. Nothing asked: both undefined.
 */
export function requestedStyle(input: Pick<DeliveryInput, 'style' | 'rawStyle'>): {
  style: DeliveryStyle | undefined;
  wire: string | undefined;
} {
  if (input.style != null)
    return { style: input.style, wire: input.style === 'OTHER' ? undefined : WIRE_STYLE[input.style] };
  const raw = input.rawStyle?.trim();
  if (!raw) return { style: undefined, wire: undefined };
  const style = deliveryStyle(raw) ?? undefined;
  return { style, wire: style && style !== 'OTHER' ? WIRE_STYLE[style] : raw };
}

function blank(value: string | null | undefined): boolean {
  return value === undefined || value === null || value.trim() === '';
}

/** Where a check reports a problem: its input path below `input.`, and what is wrong. */
type Report = (path: string, message: string) => void;

/** Checks the input against the rules of `group`; returns every problem found. */
export function validateDeliveryInput(input: DeliveryInput, group: ApiGroup): FieldProblem[] {
  const problems: FieldProblem[] = [];
  const problem: Report = (path, message) => problems.push({ path: `input.${path}`, message });
  checkStops(input, group, problem);
  if (group === 'PARTNER' && blank(input.currency)) problem('currency', 'is required');
  if (!blank(input.currency) && !/^[A-Za-z]{3}$/.test(input.currency!))
    problem('currency', 'must be a three-letter ISO 4217 code');
  checkSchedule(input, problem);
  checkStyle(input, problem);
  if (group === 'PLATFORM') {
    for (const field of ['deliveryStartTime', 'deliveryEndTime', 'partnerReference'] as const) {
      if (input[field] != null) problem(field, 'is only accepted on the PARTNER group');
    }
  }
  if (input.payload != null && !isJsonObject(input.payload)) problem('payload', 'must be a JSON object');
  // The facade marks bookings there (src/domain/booking-marker.ts); a client's own mark would pass for one.
  else if (input.payload != null && BOOKING_MARKER_FIELD in input.payload)
    problem('payload', `may not use the key ${BOOKING_MARKER_FIELD}: the facade reserves it`);
  checkAmounts(input, problem);
  checkCounts(input, problem);
  checkSizes(input, problem);
  return problems;
}

/** The pickup and the dropoff: names, addresses (or the dropoff's address parts), emails, the pickup's own bounds. */
function checkStops({ pickup, dropoff }: DeliveryInput, group: ApiGroup, problem: Report): void {
  if (blank(pickup.name)) problem('pickup.name', 'is required');
  if (blank(dropoff.name)) problem('dropoff.name', 'is required');
  if (pickup.address) checkAddress('pickup.address', pickup.address, 'is required', problem);
  else problem('pickup.address', 'is required');
  if (pickup.addressParts != null)
    problem('pickup.addressParts', 'is only for the dropoff; the pickup needs address (street, city and country)');
  if (dropoff.address && dropoff.addressParts)
    problem('dropoff.addressParts', 'must not be given together with address; send one of them');
  else if (dropoff.address) checkAddress('dropoff.address', dropoff.address, 'is required', problem);
  // The partner group's dropoff address fields are all optional; the platform group's street, city and country are not.
  else if (dropoff.addressParts)
    checkAddress(
      'dropoff.addressParts',
      dropoff.addressParts,
      group === 'PLATFORM' ? 'is required on the PLATFORM group' : null,
      problem,
    );
  else if (group === 'PLATFORM') problem('dropoff.address', 'is required on the PLATFORM group');
  if (blank(pickup.email)) problem('pickup.email', 'is required (the contact email of the pickup)');
  for (const [side, email] of [
    ['pickup', pickup.email],
    ['dropoff', dropoff.email],
  ] as const) {
    if (!blank(email) && !/^[^\s@]+@[^\s@]+$/.test(email!)) problem(`${side}.email`, 'must be an email address');
  }
  if (pickup.phone != null && pickup.phone.length > PICKUP_PHONE_MAX)
    problem('pickup.phone', `must be at most ${PICKUP_PHONE_MAX} characters`);
  if (pickup.instructions != null && pickup.instructions.length > PICKUP_INSTRUCTIONS_MAX) {
    problem('pickup.instructions', `must be at most ${PICKUP_INSTRUCTIONS_MAX} characters`);
  }
}

/**
 * One address; `at` is its input path (`address`, or the dropoff's `addressParts`). `streetCityCountry` is the problem
 * when one of those is missing, or null where each may be left out (but not sent blank).
 */
function checkAddress(at: string, address: AddressPartsInput, streetCityCountry: string | null, problem: Report): void {
  for (const part of ['street', 'city', 'country'] as const) {
    if (streetCityCountry !== null) {
      if (blank(address[part])) problem(`${at}.${part}`, streetCityCountry);
    } else if (address[part] != null && blank(address[part])) {
      problem(`${at}.${part}`, 'must not be blank (leave it out instead)');
    }
  }
  if (address.latitude != null && !(address.latitude >= -90 && address.latitude <= 90))
    problem(`${at}.latitude`, 'must be between -90 and 90');
  if (address.longitude != null && !(address.longitude >= -180 && address.longitude <= 180))
    problem(`${at}.longitude`, 'must be between -180 and 180');
}

/** When: the dropoff window a scheduled delivery needs, and a delivery date that agrees with it. */
function checkSchedule(input: DeliveryInput, problem: Report): void {
  const { dropoff } = input;
  const mode = input.mode ?? 'SCHEDULED';
  if (mode !== 'NOW' && !dropoff.windowStart) problem('dropoff.windowStart', 'is required unless mode is NOW');
  // Without a window start there is nothing to take the date from (see deliveryDateOf).
  if (mode === 'SCHEDULED' && !input.deliveryDate && !dropoff.windowStart) {
    problem(
      'deliveryDate',
      'is required when mode is SCHEDULED or not given (or give dropoff.windowStart, whose UTC date it then is)',
    );
  }
  // The upstream reads delivery_date and dropoff_start_time both in UTC ("does not infer local time"):
  // a local date beside a UTC instant would schedule a day off, so a contradiction is refused, not guessed at.
  const windowDate = utcDateOf(dropoff.windowStart);
  if (input.deliveryDate && windowDate && input.deliveryDate !== windowDate) {
    problem(
      'deliveryDate',
      `is ${input.deliveryDate}, but dropoff.windowStart falls on ${windowDate} in UTC; deliveryDate is a UTC date`,
    );
    problem(
      'dropoff.windowStart',
      `falls on ${windowDate} in UTC, not on deliveryDate ${input.deliveryDate}; send deliveryDate ${windowDate}, or leave it out`,
    );
  }
}

/** The style asked for: `style` or `rawStyle`, never both, and the vehicle size OVERSIZE needs. */
function checkStyle(input: DeliveryInput, problem: Report): void {
  if (input.style === 'OTHER')
    problem('style', 'OTHER is only read, never requested; send a style enabled for your platform as rawStyle');
  if (input.rawStyle != null) {
    if (input.style != null) problem('rawStyle', 'must not be given together with style; send one of them');
    const raw = input.rawStyle.trim();
    if (raw === '') problem('rawStyle', 'must not be blank');
    else if (raw.length > RAW_STYLE_MAX) problem('rawStyle', `must be at most ${RAW_STYLE_MAX} characters`);
  }
  // Which sizes are "an SUV or larger" is the upstream's to judge: the document names no list.
  if (requestedStyle(input).style === 'OVERSIZE' && blank(input.minimumVehicleSize))
    problem('minimumVehicleSize', 'is required for the OVERSIZE style');
}

/**
 * The tip, the declared value and item prices. Every request amount may go out in cents (UPSTREAM_AMOUNT_UNIT,
 * UPSTREAM_ITEM_PRICE_UNIT), so each obeys the same rules.
 */
function checkAmounts(input: DeliveryInput, problem: Report): void {
  const amounts: Array<[string, string | null | undefined]> = [
    ['tip', input.tip],
    ['declaredValue', input.declaredValue],
    ...(input.items ?? []).map((item, index): [string, string | null | undefined] => [
      `items.${index}.price`,
      item.price,
    ]),
  ];
  for (const [path, value] of amounts) {
    if (value == null) continue;
    let amount: Decimal;
    try {
      amount = new Decimal(value);
    } catch {
      problem(path, 'must be a decimal amount');
      continue;
    }
    if (amount.isNegative()) problem(path, 'must not be negative');
    if (amount.decimalPlaces() > 2) problem(path, 'must have at most two decimal places (it is sent in cents)');
    // Cents must stay an exact JSON integer.
    if (amount.abs().greaterThan(MAX_AMOUNT)) problem(path, `must be at most ${MAX_AMOUNT.toFixed(2)}`);
  }
}

/** The item count, the weight and each item's quantity: finite, not negative. */
function checkCounts(input: DeliveryInput, problem: Report): void {
  const finite = (path: string, value: number | null | undefined, nonNegative = true) => {
    if (value == null) return;
    if (!Number.isFinite(value)) problem(path, 'must be a finite number');
    else if (nonNegative && value < 0) problem(path, 'must not be negative');
  };
  finite('itemsCount', input.itemsCount);
  finite('weight', input.weight);
  input.items?.forEach((item, index) => finite(`items.${index}.quantity`, item.quantity));
}

/**
 * Bounds on how much a booking may carry (INPUT_LIMITS): the upstream echoes its
 * fields in every webhook, whose token travels in one HTTP header, and the facade
 * stores each event. Each oversized field is named; nothing is truncated.
 */
function checkSizes(input: DeliveryInput, problem: Report): void {
  const text = (path: string, value: string | null | undefined, max: number) => {
    if (value != null && value.length > max) problem(path, `must be at most ${max} characters (got ${value.length})`);
  };
  for (const side of ['pickup', 'dropoff'] as const) {
    const stop = input[side];
    text(`${side}.name`, stop.name, INPUT_LIMITS.shortText);
    text(`${side}.email`, stop.email, INPUT_LIMITS.shortText);
    text(`${side}.phone`, stop.phone, INPUT_LIMITS.shortText);
    // Pickup instructions have the upstream's own, tighter bound (checked above).
    if (side === 'dropoff') text(`${side}.instructions`, stop.instructions, INPUT_LIMITS.longText);
    for (const field of [
      'street',
      'number',
      'secondaryNumber',
      'city',
      'county',
      'state',
      'postalCode',
      'country',
    ] as const) {
      text(`${side}.address.${field}`, stop.address?.[field], INPUT_LIMITS.shortText);
      text(`${side}.addressParts.${field}`, stop.addressParts?.[field], INPUT_LIMITS.shortText);
    }
  }
  text('description', input.description, INPUT_LIMITS.longText);
  text('minimumVehicleSize', input.minimumVehicleSize, INPUT_LIMITS.shortText);
  text('partnerReference', input.partnerReference, INPUT_LIMITS.shortText);
  text('currency', input.currency, INPUT_LIMITS.shortText);
  const requirements = input.requirements ?? [];
  if (requirements.length > INPUT_LIMITS.requirements)
    problem('requirements', `must list at most ${INPUT_LIMITS.requirements} requirements (got ${requirements.length})`);
  requirements
    .slice(0, INPUT_LIMITS.requirements)
    .forEach((requirement, index) => text(`requirements.${index}`, requirement, INPUT_LIMITS.requirementText));
  const items = input.items ?? [];
  if (items.length > INPUT_LIMITS.items)
    problem('items', `must list at most ${INPUT_LIMITS.items} items (got ${items.length})`);
  items.slice(0, INPUT_LIMITS.items).forEach((item, index) => {
    for (const field of ['name', 'externalId', 'externalInstanceId', 'barcode'] as const)
      text(`items.${index}.${field}`, item[field], INPUT_LIMITS.itemText);
    text(`items.${index}.description`, item.description, INPUT_LIMITS.itemDescription);
  });
  if (input.payload != null && isJsonObject(input.payload)) {
    // Depth first: a deeply nested value is refused before anything serializes it.
    if (nestsDeeperThan(input.payload, INPUT_LIMITS.payloadDepth))
      problem('payload', `must nest at most ${INPUT_LIMITS.payloadDepth} levels deep`);
    else {
      const bytes = Buffer.byteLength(JSON.stringify(input.payload));
      if (bytes > INPUT_LIMITS.payloadBytes)
        problem('payload', `must be at most ${INPUT_LIMITS.payloadBytes} bytes as JSON (got ${bytes})`);
    }
  }
}

/**
 * The units request amounts are sent in: `tip` and `package_value` in
 * UPSTREAM_AMOUNT_UNIT, item prices in UPSTREAM_ITEM_PRICE_UNIT (an upstream may
 * take one in cents and the other in major units). One unit alone is both.
 */
export type RequestAmountUnits = AmountUnit | Pick<UpstreamConfig, 'amountUnit' | 'itemPriceUnit'>;

/**
 * The `YYYY-MM-DD` sent as delivery_date: the one given, or where the mode needs
 * one and none was given, the UTC date of the dropoff window's start (the
 * document's times are all UTC, so its date is a UTC date too).
 */
export function deliveryDateOf(input: Pick<DeliveryInput, 'mode' | 'deliveryDate' | 'dropoff'>): string | undefined {
  if (input.deliveryDate) return input.deliveryDate;
  if ((input.mode ?? 'SCHEDULED') !== 'SCHEDULED') return undefined;
  return utcDateOf(input.dropoff.windowStart) ?? undefined;
}

/**
 * The UTC calendar date of an instant in any offset (the DateTime scalar hands it over in UTC already); unreadable:
 * null.
 */
function utcDateOf(instant: string | null | undefined): string | null {
  return instant ? (utcDateTime(instant)?.slice(0, 10) ?? null) : null;
}

/** Validates, then builds the upstream body. Throws ValidationError with every problem. */
export function toWireRequest(input: DeliveryInput, group: ApiGroup, units: RequestAmountUnits): WireDeliveryRequest {
  const problems = validateDeliveryInput(input, group);
  if (problems.length > 0) throw new ValidationError(problems);
  const amountUnit = typeof units === 'string' ? units : units.amountUnit;
  const itemPriceUnit = typeof units === 'string' ? units : units.itemPriceUnit;

  const body: WireDeliveryRequest = {
    pickup_name: input.pickup.name,
    dropoff_name: input.dropoff.name,
    email: input.pickup.email!,
  };
  const set = <K extends keyof WireDeliveryRequest>(field: K, value: WireDeliveryRequest[K] | null | undefined) => {
    if (value !== null && value !== undefined) body[field] = value;
  };
  const setAddress = (side: 'pickup' | 'dropoff', address: AddressPartsInput | null | undefined) => {
    if (!address) return;
    for (const [wire, key] of Object.entries(ADDRESS_FIELDS)) {
      const value = address[key];
      if (value !== null && value !== undefined)
        (body as unknown as Record<string, unknown>)[`${side}_address_${wire}`] = value;
    }
  };
  setAddress('pickup', input.pickup.address);
  setAddress('dropoff', input.dropoff.address ?? input.dropoff.addressParts);
  set('pickup_phone_number', input.pickup.phone);
  set('dropoff_phone_number', input.dropoff.phone);
  set('pickup_instructions', input.pickup.instructions);
  set('dropoff_instructions', input.dropoff.instructions);
  set('dropoff_email', input.dropoff.email);
  set('pickup_start_time', input.pickup.windowStart);
  set('dropoff_start_time', input.dropoff.windowStart);
  set('delivery_date', deliveryDateOf(input));
  set('package_delivery_mode', input.mode);
  set('package_minimum_vehicle_size', input.minimumVehicleSize);
  set('delivery_style', requestedStyle(input).wire);
  set('weight', input.weight);
  set('package_description', input.description);
  set('package_requirements', input.requirements);
  set(
    'items',
    input.items?.map((item) => wireItem(item, itemPriceUnit)),
  );
  set('items_count', input.itemsCount);
  set('package_value', amountForUpstream(input.declaredValue, amountUnit));
  set('tip', amountForUpstream(input.tip, amountUnit));
  set('currency', input.currency?.toUpperCase());
  if (group === 'PLATFORM') {
    set('platform_payload', input.payload as WireDeliveryRequest['platform_payload']);
  } else {
    set('partner_payload', input.payload as WireDeliveryRequest['partner_payload']);
    set('partner_reference', input.partnerReference);
    set('delivery_start_time', input.deliveryStartTime);
    set('delivery_end_time', input.deliveryEndTime);
  }
  // Each field is within its bound; the whole must be too (see INPUT_LIMITS.bodyBytes).
  const bytes = Buffer.byteLength(JSON.stringify(body));
  if (bytes > INPUT_LIMITS.bodyBytes) {
    throw new ValidationError([
      {
        path: 'input',
        message: `the booking is ${bytes} bytes as JSON; at most ${INPUT_LIMITS.bodyBytes} are accepted (shorten items, payload or text)`,
      },
    ]);
  }
  return body;
}

/** A request amount in major units as the upstream takes it in `unit` (cents: 12.34 → 1234). */
export function amountForUpstream(amount: string | null | undefined, unit: AmountUnit): number | undefined {
  if (amount === null || amount === undefined) return undefined;
  const decimal = new Decimal(amount);
  return unit === 'cents' ? decimal.mul(100).toNumber() : decimal.toNumber();
}

function wireItem(item: ItemInput, priceUnit: AmountUnit): WireItem {
  const wire: WireItem = {};
  if (item.name != null) wire.name = item.name;
  if (item.quantity != null) wire.quantity = item.quantity;
  if (item.description != null) wire.description = item.description;
  if (item.externalId != null) wire.external_id = item.externalId;
  if (item.externalInstanceId != null) wire.external_instance_id = item.externalInstanceId;
  if (item.price != null) wire.price = amountForUpstream(item.price, priceUnit);
  if (item.barcode != null) wire.barcode = item.barcode;
  return wire;
}

/**
 * Runs an upstream call whose validation failure should read like the facade's
 * own; with the input, each problem is placed on the field the client wrote.
 */
export async function asValidation<T>(key: string, call: () => Promise<T>, input?: DeliveryInput): Promise<T> {
  try {
    return await call();
  } catch (error) {
    throw error instanceof UpstreamValidationError ? validationErrorFromUpstream(error, key, input) : error;
  }
}
