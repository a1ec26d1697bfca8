// The delivery as known after each event: one merged view per delivery, kept by
// the store beside its milestone state and updated in the same transaction (or
// Lua script) as each append. A webhook body describes the delivery as of one
// event, and not every event carries every field (proof of delivery comes with
// dropoff_arrived; tracking URL, style, fees and the scheduled time only with a
// read), so a message built from one event alone would lose them.
// The rules, which both stores follow (the Redis script mirrors mergeView and
// carriedOver with plain string operations):
// - A field is a top-level key of the body and its value as JSON text; the
//   documented objects whose parts stand alone (price, distance, addresses,
//   dimensions, fees: MEMBERWISE) are a field per member, "price.value". Absent
//   and null mean the same (the document: "sent as null or omitted"), at either
//   level: a field is only ever merged in, never erased. A courier position is
//   one field, and only a whole one (lat and lng) counts.
// - An event that is not stale overwrites the fields it carries; a stale one (it
//   describes an earlier moment) only fills fields the view lacks.
// - event_name and status (the label) are the milestone's: only an event that
//   moved the milestone sets them.
// - A read of the upstream overwrites when it is newer than the state (no event
//   moved it since the read was made), else only fills. A read made before the
//   delivery has a state is kept too, and the first event is merged over it.
// Each stored event keeps what the view held after it beyond its own fields
// (carriedOver): its own payload stays as received, and the view as of that
// event is its payload with that laid over (knownAfter).
import type { JsonObject } from './canonical-json.js';

/** A view field: its key and its value as JSON text (how both stores keep and compare it). */
export type ViewField = readonly [key: string, json: string];

/** A delivery's view as the stores keep it: key → value as JSON text. */
export type StoredView = Record<string, string>;

/** Keys of the milestone: set only by the event that moved it (see MOVER_KEYS). */
export const MOVER_KEYS = ['event_name', 'status'] as const;

/** Never merged: the uid (the view's key), the milestone's keys (merged apart), the facade's own markers. */
const NOT_MERGED = new Set<string>(['uid', ...MOVER_KEYS]);
/** Keys the Redis script may write into JSON unescaped: every key the upstream documents, and then some. */
const MERGEABLE_KEY = /^[A-Za-z0-9_]+$/;
/**
 * Objects merged member by member: each member is a value of its own (an event with a price but no currency leaves the
 * currency known), kept as the field "<key>.<member>".
 */
const MEMBERWISE = new Set([
  'price',
  'distance',
  'pickup_address',
  'dropoff_address',
  'dimensions',
  'dimentions',
  'expected_cancellation_fee',
  'expected_cancelation_fee',
]);

const isObject = (value: unknown): value is JsonObject =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** A courier position is a pair: half of one is no position (and must not pair with another event's half). */
const isPosition = (value: unknown): boolean => isObject(value) && value.lat != null && value.lng != null;

/**
 * The fields a body carries, for the view: not null, not the uid or the
 * milestone's keys, not the facade's markers; MEMBERWISE objects a field per
 * member that is not null. A read's delivery_date is a full datetime and a
 * webhook's a plain date: the datetime is also kept as scheduled_at, which a
 * webhook's date of the same day does not overwrite.
 */
export function viewFields(body: JsonObject): ViewField[] {
  const fields: ViewField[] = [];
  for (const [key, value] of Object.entries(body)) {
    if (value == null || NOT_MERGED.has(key) || key.startsWith('facade_') || !MERGEABLE_KEY.test(key)) continue;
    if (MEMBERWISE.has(key) && isObject(value)) {
      for (const [member, part] of Object.entries(value))
        if (part != null && MERGEABLE_KEY.test(member)) fields.push([`${key}.${member}`, JSON.stringify(part)]);
    } else if (key !== 'driver_location' || isPosition(value)) {
      fields.push([key, JSON.stringify(value)]);
    }
  }
  if (typeof body.delivery_date === 'string' && body.delivery_date.includes('T') && body.scheduled_at === undefined) {
    fields.push(['scheduled_at', JSON.stringify(body.delivery_date)]);
  }
  return fields;
}

/**
 * The milestone's fields an event sets when it moves the milestone: its name, and its label ('' when it has none: the
 * label is then removed).
 */
export function moverFields(eventName: string, label: string | null): { eventName: string; label: string } {
  return { eventName: JSON.stringify(eventName), label: label === null ? '' : JSON.stringify(label) };
}

/**
 * Merges fields into a view, in place: overwriting, or only filling what is
 * missing; and, when the event moved the milestone, its name and label.
 */
export function mergeView(
  view: StoredView,
  fields: readonly ViewField[],
  overwrite: boolean,
  mover?: { eventName: string; label: string },
): StoredView {
  for (const [key, json] of fields) if (overwrite || view[key] === undefined) view[key] = json;
  if (mover) {
    view.event_name = mover.eventName;
    if (mover.label === '') delete view.status;
    else view.status = mover.label;
  }
  return view;
}

/**
 * What the view holds beyond what the event itself says: each field whose value
 * differs from the event's own (or that the event lacks). Undefined when nothing.
 * `own` are the event's fields and its milestone's keys (its own name and label).
 */
export function carriedOver(
  view: StoredView,
  own: readonly ViewField[],
  mover: { eventName: string; label: string },
): JsonObject | undefined {
  const mine = new Map<string, string>(own);
  mine.set('event_name', mover.eventName);
  if (mover.label !== '') mine.set('status', mover.label);
  let carried: JsonObject | undefined;
  for (const [key, json] of Object.entries(view)) {
    if (mine.get(key) === json) continue;
    carried ??= {};
    carried[key] = JSON.parse(json) as unknown;
  }
  return carried;
}

/** A stored view as a body: the uid and every field, members back in their objects. */
export function viewBody(uid: string, view: StoredView): JsonObject {
  const fields: JsonObject = {};
  for (const [key, json] of Object.entries(view)) fields[key] = JSON.parse(json) as unknown;
  return layOver({ uid }, fields);
}

/**
 * The delivery as known after a stored event, as a webhook body: its own
 * payload with what was carried over laid on top (a null of its own is filled,
 * a member of its own object too).
 */
export function knownAfter(event: { payload: object; carried?: JsonObject }): JsonObject {
  return event.carried ? layOver({ ...(event.payload as JsonObject) }, event.carried) : (event.payload as JsonObject);
}

/**
 * Lays view fields over a body, in place: whole values first, then members
 * ("price.value") into their objects (a view kept before members were kept may
 * hold the whole object too; the members are newer).
 */
function layOver(body: JsonObject, fields: JsonObject): JsonObject {
  const members: Array<[string, unknown]> = [];
  for (const [key, value] of Object.entries(fields)) {
    if (key.includes('.')) members.push([key, value]);
    else body[key] = value;
  }
  for (const [key, value] of members) {
    const dot = key.indexOf('.');
    const parent = key.slice(0, dot);
    const whole = body[parent];
    body[parent] = { ...(isObject(whole) ? whole : {}), [key.slice(dot + 1)]: value };
  }
  return body;
}
