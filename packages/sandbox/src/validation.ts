// The request rules of upstream-api.md for quote and create, per group. Every
// problem is collected (the platform group reports them all in `errors`); the
// order of FIELDS decides which problem the top-level message names.
import type { JsonObject, WireDeliveryRequest } from './wire.js';
import { OUTCOME_PAYLOAD_FIELD, OUTCOMES, outcomeInPayload, type Group } from './state.js';
import { WEBHOOKS_PAYLOAD_FIELD, webhookScriptInPayload, webhookScriptProblems } from './webhook-script.js';

export interface FieldProblem {
  field: string;
  message: string;
}

export const DELIVERY_STYLES = ['Standard', 'Hybrid', 'Special Handling', 'Oversize'] as const;
const DELIVERY_MODES = ['NOW', 'SCHEDULED'];
const OVERSIZE_VEHICLES = ['SUV', 'VAN', 'TRUCK'];

type Kind = 'string' | 'number' | 'object' | 'string[]' | 'items';

interface FieldRule {
  name: string;
  kind: Kind;
  /** Groups that may send the field; the other group gets "prohibited". */
  groups?: readonly Group[];
  required?: readonly Group[];
  maxLength?: number;
  format?: 'datetime' | 'date';
}

const BOTH: readonly Group[] = ['platform', 'partner'];
const address = (end: 'pickup' | 'dropoff', part: string, kind: Kind = 'string'): FieldRule => ({
  name: `${end}_address_${part}`,
  kind,
});

// Required fields first, in the doc's order, then the optional table's order.
const FIELDS: readonly FieldRule[] = [
  { ...address('pickup', 'street'), required: BOTH },
  { ...address('pickup', 'city'), required: BOTH },
  { ...address('pickup', 'country'), required: BOTH },
  { name: 'pickup_name', kind: 'string', required: BOTH },
  // The partner group makes the dropoff address optional.
  { ...address('dropoff', 'street'), required: ['platform'] },
  { ...address('dropoff', 'city'), required: ['platform'] },
  { ...address('dropoff', 'country'), required: ['platform'] },
  { name: 'dropoff_name', kind: 'string', required: BOTH },
  { name: 'email', kind: 'string', required: BOTH },
  { name: 'currency', kind: 'string', required: ['partner'] },
  ...(['number', 'secondary_number', 'county', 'state', 'postal_code'] as const).flatMap((p) => [
    address('pickup', p),
    address('dropoff', p),
  ]),
  address('pickup', 'latitude', 'number'),
  address('pickup', 'longitude', 'number'),
  address('dropoff', 'latitude', 'number'),
  address('dropoff', 'longitude', 'number'),
  { name: 'pickup_phone_number', kind: 'string', maxLength: 15 },
  { name: 'dropoff_phone_number', kind: 'string' },
  { name: 'pickup_instructions', kind: 'string', maxLength: 512 },
  { name: 'dropoff_instructions', kind: 'string' },
  { name: 'pickup_start_time', kind: 'string', format: 'datetime' },
  { name: 'dropoff_start_time', kind: 'string', format: 'datetime' },
  { name: 'delivery_date', kind: 'string', format: 'date' },
  { name: 'package_delivery_mode', kind: 'string' },
  { name: 'package_minimum_vehicle_size', kind: 'string' },
  { name: 'delivery_style', kind: 'string' },
  { name: 'weight', kind: 'number' },
  { name: 'dropoff_email', kind: 'string' },
  { name: 'package_description', kind: 'string' },
  { name: 'package_requirements', kind: 'string[]' },
  { name: 'items', kind: 'items' },
  { name: 'items_count', kind: 'number' },
  { name: 'package_value', kind: 'number' },
  { name: 'tip', kind: 'number' },
  { name: 'platform_payload', kind: 'object', groups: ['platform'] },
  { name: 'delivery_start_time', kind: 'string', format: 'datetime', groups: ['partner'] },
  { name: 'delivery_end_time', kind: 'string', format: 'datetime', groups: ['partner'] },
  { name: 'partner_reference', kind: 'string', groups: ['partner'] },
  { name: 'partner_payload', kind: 'object', groups: ['partner'] },
];

const ITEM_FIELDS: Record<string, 'string' | 'number'> = {
  name: 'string',
  quantity: 'number',
  description: 'string',
  external_id: 'string',
  external_instance_id: 'string',
  price: 'number',
  barcode: 'string',
};

// `YYYY-MM-DDTHH:MM:SSZ`, fractional seconds allowed; numeric offsets are not.
const UTC_DATETIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?Z$/;
const DATE_ONLY = /^(\d{4})-(\d{2})-(\d{2})$/;

export interface ValidationOutcome {
  problems: FieldProblem[];
  /** The body with null/empty optional values dropped; only meaningful when `problems` is empty. */
  request: WireDeliveryRequest;
}

/** Validates a quote/create body for one group. Unknown fields are ignored, as Laravel-style APIs do. */
export function validateDeliveryRequest(group: Group, body: JsonObject): ValidationOutcome {
  const problems: FieldProblem[] = [];
  const present: JsonObject = {};
  const problem = (field: string, message: string) => problems.push({ field, message });

  for (const rule of FIELDS) {
    const value = body[rule.name];
    // Absent, null and blank strings all count as "not sent".
    const missing = value === undefined || value === null || (typeof value === 'string' && value.trim() === '');
    if (missing) {
      if (rule.required?.includes(group)) problem(rule.name, `The ${rule.name} field is required.`);
      continue;
    }
    if (rule.groups && !rule.groups.includes(group)) {
      problem(rule.name, `The ${rule.name} field is prohibited on this endpoint.`);
      continue;
    }
    const typeProblem = checkKind(rule, value);
    if (typeProblem) {
      problem(rule.name, typeProblem);
      continue;
    }
    if (rule.maxLength !== undefined && (value as string).length > rule.maxLength) {
      problem(rule.name, `The ${rule.name} field must not be greater than ${rule.maxLength} characters.`);
      continue;
    }
    if (rule.format === 'datetime' && !isUtcDateTime(value as string)) {
      problem(rule.name, `The ${rule.name} field must be an ISO 8601 UTC datetime in the format YYYY-MM-DDTHH:MM:SSZ.`);
      continue;
    }
    if (rule.format === 'date' && !isDate(value as string)) {
      problem(rule.name, `The ${rule.name} field must match the format YYYY-MM-DD.`);
      continue;
    }
    present[rule.name] = value;
  }

  crossFieldRules(body, present, problem);
  return { problems, request: present as unknown as WireDeliveryRequest };
}

/** Rules that look at more than one field: mode, window, date, style and vehicle, currency. */
function crossFieldRules(body: JsonObject, present: JsonObject, problem: (field: string, message: string) => void) {
  const mode = present.package_delivery_mode as string | undefined;
  if (mode !== undefined && !DELIVERY_MODES.includes(mode)) {
    problem('package_delivery_mode', 'The selected package_delivery_mode is invalid; use NOW or SCHEDULED.');
  }
  // Checked against the raw body so a malformed value is not also reported as missing.
  const sent = (name: string) => body[name] !== undefined && body[name] !== null && body[name] !== '';
  if (mode !== 'NOW' && !sent('dropoff_start_time')) {
    problem('dropoff_start_time', 'The dropoff_start_time field is required unless package_delivery_mode is NOW.');
  }
  if ((mode === undefined || mode === 'SCHEDULED') && !sent('delivery_date')) {
    problem('delivery_date', 'The delivery_date field is required when package_delivery_mode is SCHEDULED or omitted.');
  }

  const style = present.delivery_style as string | undefined;
  if (style !== undefined && !(DELIVERY_STYLES as readonly string[]).includes(style)) {
    problem('delivery_style', `The selected delivery_style is invalid; use one of ${DELIVERY_STYLES.join(', ')}.`);
  }
  if (style === 'Oversize') {
    const size = present.package_minimum_vehicle_size as string | undefined;
    if (size === undefined || !OVERSIZE_VEHICLES.includes(size.toUpperCase())) {
      problem(
        'package_minimum_vehicle_size',
        'The package_minimum_vehicle_size field must be SUV, VAN or TRUCK when delivery_style is Oversize.',
      );
    }
  }

  // The sandbox's own switches inside the payload: a misspelt outcome or script would otherwise silently deliver in
  // order.
  for (const field of ['platform_payload', 'partner_payload']) {
    const outcome = outcomeInPayload(present[field]);
    if (outcome !== undefined && !(OUTCOMES as readonly unknown[]).includes(outcome)) {
      problem(field, `The ${field}.${OUTCOME_PAYLOAD_FIELD} field must be one of ${OUTCOMES.join(', ')}.`);
    }
    const script = webhookScriptInPayload(present[field]);
    if (script !== undefined)
      for (const message of webhookScriptProblems(script, `${field}.${WEBHOOKS_PAYLOAD_FIELD}`))
        problem(field, message);
  }

  const currency = present.currency as string | undefined;
  if (currency !== undefined && !/^[A-Za-z]{3}$/.test(currency)) {
    problem('currency', 'The currency field must be 3 letters.');
  }
}

function checkKind(rule: FieldRule, value: unknown): string | null {
  const f = rule.name;
  switch (rule.kind) {
    case 'string':
      return typeof value === 'string' ? null : `The ${f} field must be a string.`;
    case 'number':
      return typeof value === 'number' && Number.isFinite(value) ? null : `The ${f} field must be a number.`;
    case 'object':
      return isPlainObject(value) ? null : `The ${f} field must be an object.`;
    case 'string[]':
      if (!Array.isArray(value)) return `The ${f} field must be an array.`;
      return value.every((v) => typeof v === 'string') ? null : `Each entry of the ${f} field must be a string.`;
    case 'items': {
      if (!Array.isArray(value)) return `The ${f} field must be an array.`;
      for (const [i, item] of value.entries()) {
        if (!isPlainObject(item)) return `The ${f}.${i} field must be an object.`;
        for (const [key, kind] of Object.entries(ITEM_FIELDS)) {
          const v = item[key];
          if (v === undefined || v === null) continue;
          const ok = kind === 'string' ? typeof v === 'string' : typeof v === 'number' && Number.isFinite(v);
          if (!ok) return `The ${f}.${i}.${key} field must be a ${kind}.`;
        }
      }
      return null;
    }
  }
}

export function isPlainObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isUtcDateTime(value: string): boolean {
  const m = UTC_DATETIME.exec(value);
  if (!m) return false;
  const [, y, mo, d, h, mi, s] = m.map(Number) as number[];
  return isRealDate(y!, mo!, d!) && h! < 24 && mi! < 60 && s! < 60;
}

function isDate(value: string): boolean {
  const m = DATE_ONLY.exec(value);
  if (!m) return false;
  const [, y, mo, d] = m.map(Number) as number[];
  return isRealDate(y!, mo!, d!);
}

/** Rejects 2025-02-30 and friends, which a bare regex lets through. */
function isRealDate(year: number, month: number, day: number): boolean {
  const date = new Date(Date.UTC(year, month - 1, day));
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

/** Platform shape: `{message, errors}`; the message names the first problem, Laravel style. */
export function platformValidationBody(problems: readonly FieldProblem[]): {
  message: string;
  errors: Record<string, string[]>;
} {
  const errors: Record<string, string[]> = {};
  for (const p of problems) (errors[p.field] ??= []).push(p.message);
  const [first] = problems;
  const more = problems.length - 1;
  const message = `${first!.message}${more > 0 ? ` (and ${more} more error${more > 1 ? 's' : ''})` : ''}`;
  return { message, errors };
}

/** Partner shape: `{error, message}`; the one message names every field at fault. */
export function partnerValidationBody(problems: readonly FieldProblem[]): { error: string; message: string } {
  return { error: 'validation_error', message: problems.map((p) => p.message).join(' ') };
}
