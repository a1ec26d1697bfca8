// The delivery as known after each event: one merged view per delivery, kept by
// the store beside its milestone state and updated in the same transaction (or
// Lua script) as each append. A webhook body describes the delivery as of one
// event, and not every event carries every field (proof of delivery comes with
// dropoff_arrived; tracking URL, style, fees and the scheduled time only with a
// read), so a message built from one event alone would lose them.
// The rules, which both stores follow (the Redis script mirrors mergeView and
// carriedOver with plain string operations):
// - A field is a top-level key of the body and its value as JSON text. Absent and
//   null mean the same: a field is only ever merged in, never erased.
// - An event that is not stale overwrites the fields it carries; a stale one (it
//   describes an earlier moment) only fills fields the view lacks.
// - event_name and status (the label) are the milestone's: only an event that
//   moved the milestone sets them.
// - A read of the upstream overwrites when it is newer than the state (no event
//   moved it since the read was made), else only fills.
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
 * The fields a body carries, for the view: not null, not the uid or the
 * milestone's keys, not the facade's markers. A read's delivery_date is a full
 * datetime and a webhook's a plain date: the datetime is also kept as
 * scheduled_at, which a webhook's date of the same day does not overwrite.
 */
export function viewFields(body: JsonObject): ViewField[] {
  const fields: ViewField[] = [];
  for (const [key, value] of Object.entries(body)) {
    if (
      value === null ||
      value === undefined ||
      NOT_MERGED.has(key) ||
      key.startsWith('facade_') ||
      !MERGEABLE_KEY.test(key)
    )
      continue;
    fields.push([key, JSON.stringify(value)]);
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

/** A stored view as a body: the uid and every field. */
export function viewBody(uid: string, view: StoredView): JsonObject {
  const body: JsonObject = { uid };
  for (const [key, json] of Object.entries(view)) body[key] = JSON.parse(json) as unknown;
  return body;
}

/**
 * The delivery as known after a stored event, as a webhook body: its own
 * payload with what was carried over laid on top (a null of its own is filled).
 */
export function knownAfter(event: { payload: object; carried?: JsonObject }): JsonObject {
  return event.carried ? { ...(event.payload as JsonObject), ...event.carried } : (event.payload as JsonObject);
}
