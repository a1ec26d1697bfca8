// Webhook events as GraphQL: DeliveryEvent, CourierLocation, Delivery.events,
// and the three subscriptions. Cursors are the caller's own (src/domain/cursor.ts).
import { getArgumentValues, type GraphQLResolveInfo } from 'graphql';
import { BadUserInputError } from '../errors.js';
import { fromDeliveryView, fromWebhookEvent, geoPoint } from '../mapping/delivery.js';
import { utcSeconds } from '../mapping/scalars.js';
import { knownAfter } from '../domain/delivery-view.js';
import type { ApiGroup, Courier, Delivery, DeliveryStatus, GeoPoint } from '../mapping/model.js';
import { statusOfWebhook } from '../domain/status.js';
import { callerCursors, START_CURSOR, type CallerCursors } from '../domain/cursor.js';
import {
  courierLocation,
  deliveryEvents,
  deliveryUpdated,
  type EventView,
  type RealtimeDeps,
  type Subscriber,
} from '../realtime/streams.js';
import type { StoredEvent } from '../store/store.js';
import { builder } from './builder.js';
import type { GraphQLContext } from './context.js';
import { DeliveryRef } from './delivery.js';
import { DeliveryStatusEnum } from './enums.js';
import { CourierRef, GeoPointRef } from './objects.js';
import { checkUidArguments } from './uid-arguments.js';

/**
 * One event object reaches every subscriber of its delivery: map it once, not
 * once per subscriber. The group is the one the owner record knows (PLATFORM
 * when there is none): the body does not say.
 */
const mapped = new WeakMap<object, Delivery>();
const reported = new WeakMap<object, Delivery>();

/**
 * The delivery as known after the event: its payload merged over earlier events and reads
 * (src/domain/delivery-view.ts).
 */
function deliveryOf(event: EventView, group: ApiGroup = 'PLATFORM'): Delivery {
  if (event.snapshot) return event.snapshot.delivery;
  let delivery = mapped.get(event);
  if (!delivery || delivery.group !== group) {
    delivery = fromDeliveryView(event.known ?? knownAfter(event), group);
    // deliveryUpdated's view of a courier change on a late milestone: the status stays where the delivery is.
    if (event.heldStatus) delivery = { ...delivery, status: event.heldStatus };
    // What the event says, the upstream said as it sent it.
    delivery.asOf ??= event.receivedAt;
    mapped.set(event, delivery);
  }
  return delivery;
}

/** The seq of the event (or snapshot) a delivery was made from: Delivery.events in a subscription is read as of it. */
const messageSeqs = new WeakMap<object, number>();

/** The delivery as the event's own payload alone describes it. */
function reportedOf(event: EventView, group: ApiGroup): Delivery {
  if (event.snapshot) return event.snapshot.delivery;
  let delivery = reported.get(event);
  if (!delivery || delivery.group !== group) {
    delivery = fromWebhookEvent(event.payload, group);
    delivery.asOf = event.receivedAt;
    reported.set(event, delivery);
  }
  return delivery;
}

/** The group the facade knows a delivery by. */
async function groupOf(event: EventView, ctx: GraphQLContext): Promise<ApiGroup> {
  return (await ctx.services.owners.lookupOne(event.uid))?.group ?? 'PLATFORM';
}

/** The delivery an event stands for, in the group the facade knows it by. */
async function eventDelivery(event: EventView, ctx: GraphQLContext): Promise<Delivery> {
  const delivery = event.snapshot ? event.snapshot.delivery : deliveryOf(event, await groupOf(event, ctx));
  messageSeqs.set(delivery, event.seq);
  return delivery;
}

/**
 * From the event's name, as its delivery's status is (fromWebhookEvent); the label only for a name the facade does not
 * know.
 */
function statusOf(event: EventView): DeliveryStatus {
  return event.snapshot?.status ?? event.heldStatus ?? statusOfWebhook(event.name, event.payload.status);
}

/** The caller's cursors, looked up once per request (or subscription); the value itself once it is known. */
const cursorsByContext = new WeakMap<GraphQLContext, CallerCursors | Promise<CallerCursors>>();
function cursorsOf(ctx: GraphQLContext): CallerCursors | Promise<CallerCursors> {
  let cursors = cursorsByContext.get(ctx);
  if (!cursors) {
    const loading = ctx.merchant().then((merchant) => callerCursors(ctx.services.store, merchant));
    cursors = loading;
    cursorsByContext.set(ctx, loading);
    loading.then(
      (loaded) => cursorsByContext.set(ctx, loaded),
      () => cursorsByContext.delete(ctx),
    );
  }
  return cursors;
}

/** Without a promise per event once the caller's cursors are known: a page has up to 500 of them, twice. */
function cursorOf(ctx: GraphQLContext, seq: number): string | Promise<string> {
  const cursors = cursorsOf(ctx);
  return cursors instanceof Promise ? cursors.then((loaded) => loaded.cursorOf(seq)) : cursors.cursorOf(seq);
}

export const DeliveryEventRef = builder.objectRef<EventView>('DeliveryEvent').implement({
  description:
    'A webhook event as received from the upstream, after its signature was verified; an event the facade made from a read of the upstream that found a change no webhook had brought (source "poll"); or a `snapshot` built from a read.',
  fields: (t) => ({
    cursor: t.string({
      description:
        "The event's position in the facade's event log, opaque and valid for the caller's key only; pass it as `after` to deliveryEvents or Delivery.events to resume after this event.",
      resolve: (event, _args, ctx) => cursorOf(ctx, event.seq),
    }),
    uid: t.exposeID('uid', { description: 'The delivery the event is about.' }),
    name: t.exposeString('name', {
      description:
        'event_name, e.g. "delivery.pickup_complete" or "location.dropoff_enroute"; "snapshot" for a state read from the upstream.',
    }),
    status: t.field({
      type: DeliveryStatusEnum,
      description:
        "The status implied by the event's milestone (its name); for a name the facade does not know, read from statusText. On deliveryUpdated, an event that changed only the courier (courierOnly) carries the delivery's current status instead, which no event moves back.",
      resolve: statusOf,
    }),
    statusText: t.exposeString('statusText', {
      nullable: true,
      description: 'The upstream\'s human-readable status, e.g. "Picked Up".',
    }),
    receivedAt: t.field({
      type: 'DateTime',
      description: 'When the facade received the event.',
      resolve: (event) => utcSeconds(event.receivedAt),
    }),
    courierLocation: t.field({
      type: GeoPointRef,
      nullable: true,
      description: "The courier's position carried by the event (driver_location).",
      resolve: (event) =>
        (event.snapshot ? event.snapshot.delivery.courier?.location : geoPoint(event.payload.driver_location)) ?? null,
    }),
    source: t.string({
      description:
        'Where the event came from: "webhook" (sent by the upstream), "poll" (made by the facade from a read of the upstream when no webhook had brought the change; see RECONCILE_INTERVAL_MS) or "read" (a `snapshot`).',
      resolve: (event) => (event.snapshot ? 'read' : event.payload.facade_source === 'poll' ? 'poll' : 'webhook'),
    }),
    stale: t.exposeBoolean('stale', {
      description:
        'True when it arrived after a later milestone (out of order), as a repeat of the current one, or after the delivery was final (DROPOFF_COMPLETE, RETURNED, or a CANCELED/FAILED a read confirmed), and did not name a new courier; also when it came from a courier who had since been replaced, or is a position of a courier other than the current one. A stale event never moves the status; one of a milestone only a picked-up package reaches (pickup_complete, dropoff_*, return_*) still proves the pickup, so a cancel or failure before it is followed to the return, and its fields fill what the delivery did not know yet.',
    }),
    courierOnly: t.exposeBoolean('courierOnly', {
      description:
        "True when the event changed the delivery's courier and nothing else: a delivery.* event naming another courier (another driver_id, or another driver_name where there is none), as a reassignment does, whose milestone is behind the delivery's or repeats it. It is not stale; its milestone does not move the status back.",
    }),
    delivery: t.field({
      type: DeliveryRef,
      description:
        "The delivery as known after this event: its own fields merged over every earlier event's and the last reads' (proof of delivery, courier, tracking URL, scheduled time, style, fees), never erased by a field an event leaves out; its status is the delivery's after the event (a stale event's own milestone is in `status`). On deliveryUpdated's first message, as known now. In the endpoint group the facade knows it by (its booking, a read, or an access check); PLATFORM when it knows none.",
      resolve: (event, _args, ctx) => eventDelivery(event, ctx),
    }),
    reported: t.field({
      type: DeliveryRef,
      description:
        "The delivery as this event's own payload alone describes it (status from its name), without what earlier events and reads added: what the upstream sent at this step. For a `snapshot`, the read.",
      resolve: async (event, _args, ctx) =>
        event.snapshot ? event.snapshot.delivery : reportedOf(event, await groupOf(event, ctx)),
    }),
  }),
});

interface CourierPosition {
  uid: string;
  location: GeoPoint;
  milestone: string;
  courier: Courier | null;
  receivedAt: string;
}

const CourierLocationRef = builder.objectRef<CourierPosition>('CourierLocation').implement({
  description: "The courier's position on one delivery.",
  fields: (t) => ({
    uid: t.exposeID('uid', { description: 'The delivery.' }),
    location: t.expose('location', { type: GeoPointRef, description: "The courier's position." }),
    milestone: t.exposeString('milestone', {
      description: 'The milestone the position belongs to, e.g. "pickup_enroute".',
    }),
    courier: t.expose('courier', {
      type: CourierRef,
      nullable: true,
      description:
        'The courier as known after the event: what it says merged over earlier events and reads (a name or phone it leaves out is kept).',
    }),
    receivedAt: t.field({
      type: 'DateTime',
      description: 'When the facade received the position.',
      resolve: (position) => utcSeconds(position.receivedAt),
    }),
  }),
});

function positionOf(event: StoredEvent): CourierPosition {
  const delivery = deliveryOf(event);
  return {
    uid: event.uid,
    location: geoPoint(event.payload.driver_location)!,
    milestone: event.name.slice(event.name.indexOf('.') + 1),
    courier: delivery.courier,
    receivedAt: event.receivedAt,
  };
}

const DeliveryEventConnectionRef = builder.connectionObject(
  {
    type: DeliveryEventRef,
    name: 'DeliveryEventConnection',
    description:
      "A page of a delivery's stored events (webhooks, and changes found by reading the upstream), oldest first.",
    edgesNullable: { list: false, items: false },
    nodeNullable: false,
    edgesField: { description: 'The events of this page, each with its cursor.' },
  },
  { name: 'DeliveryEventEdge', description: 'One event and its cursor.', nodeField: { description: 'The event.' } },
);

const MAX_PAGE = 500;

interface EventPage {
  edges: Array<{ cursor: string; node: StoredEvent }>;
  pageInfo: { hasNextPage: boolean; hasPreviousPage: boolean; startCursor: string | null; endCursor: string | null };
}

/**
 * Pages already asked for in this request, by uid, first and after: a list that
 * names one delivery a hundred times reads its events once. Not across a
 * subscription's events, which share one context but not one moment: those are
 * shared by message instead, across every subscriber of it.
 */
const pagesByContext = new WeakMap<GraphQLContext, Map<string, Promise<EventPage>>>();

/**
 * A page of the delivery's events. `messageSeq`: in a subscription, the seq of
 * the message the delivery came with; the page is then read once for every
 * subscriber of that message (src/realtime/event-pages.ts).
 */
async function eventPage(
  ctx: GraphQLContext,
  uid: string,
  first: number | null | undefined,
  after: string | null | undefined,
  messageSeq?: number,
): Promise<EventPage> {
  if (first != null && (first < 1 || first > MAX_PAGE))
    throw new BadUserInputError(`first must be between 1 and ${MAX_PAGE}.`);
  const cursors = await cursorsOf(ctx);
  const afterSeq = after == null ? 0 : cursors.seqOf(after);
  if (afterSeq === undefined)
    throw new BadUserInputError(`"${after}" is not a cursor of this facade's event log for this key.`);
  const limit = first ?? MAX_PAGE;
  const events =
    messageSeq === undefined
      ? await ctx.services.store.eventsAfter(afterSeq, limit + 1, { uids: [uid] })
      : await ctx.services.eventPages.page(uid, messageSeq, afterSeq, limit + 1);
  const page = events.slice(0, limit);
  const edges = page.map((event) => ({ cursor: cursors.cursorOf(event.seq), node: event }));
  return {
    edges,
    pageInfo: {
      hasNextPage: events.length > limit,
      hasPreviousPage: afterSeq > 0,
      startCursor: edges[0]?.cursor ?? null,
      endCursor: edges.at(-1)?.cursor ?? null,
    },
  };
}

builder.objectField(DeliveryRef, 'events', (t) =>
  t.field({
    type: DeliveryEventConnectionRef,
    nullable: false,
    description:
      'Every event stored for this delivery, oldest first (stale ones included, marked): the webhooks received, and the changes the facade found by reading the upstream (source "poll").',
    args: {
      first: t.arg.int({ description: `Page size, 1 to ${MAX_PAGE}; all (up to ${MAX_PAGE}) when omitted.` }),
      after: t.arg.string({
        description: `Cursor of the event to read after (one this key was given), or "${START_CURSOR}" for the first page.`,
      }),
    },
    resolve: (delivery, { first, after }, ctx, info) => {
      if (info.operation.operation === 'subscription')
        return eventPage(ctx, delivery.uid, first, after, messageSeqs.get(delivery));
      let pages = pagesByContext.get(ctx);
      if (!pages) pagesByContext.set(ctx, (pages = new Map()));
      const key = JSON.stringify([delivery.uid, first ?? null, after ?? null]);
      let page = pages.get(key);
      if (!page) pages.set(key, (page = eventPage(ctx, delivery.uid, first, after)));
      return page;
    },
  }),
);

function realtime(ctx: GraphQLContext): { deps: RealtimeDeps; subscriber: Subscriber } {
  const key = ctx.requireKey();
  const { store, bus, access, upstream, maxPendingEvents, reconciler } = ctx.services;
  // The key's RATE_LIMIT_PER_MINUTE budget: a subscription's upstream access checks draw on it, as operations do.
  const budget = ctx.limits?.perKey;
  return {
    deps: { store, bus, access, upstream, maxPending: maxPendingEvents, budget, reconciler },
    subscriber: { key, scope: ctx.scope, disconnect: ctx.disconnect },
  };
}

/**
 * A subscription field's arguments, read from the operation itself, with their
 * uids checked. (Subscriptions run on graphql-js, which passes the arguments
 * too; graphql-jit 0.8 handed a subscription field the operation's variables
 * instead, and reading them here keeps the fields right on either.)
 */
function argumentsOf<T>(info: GraphQLResolveInfo): T {
  const field = info.parentType.getFields()[info.fieldName]!;
  return checkUidArguments(getArgumentValues(field, info.fieldNodes[0]!, info.variableValues)) as T;
}

builder.subscriptionType({
  description:
    'Live updates, fed by the upstream\'s verified webhooks and by reads of the upstream that find a change no webhook brought (reconciliation, source "poll"; all there is when the upstream sends no webhooks). Over WebSocket (graphql-transport-ws) or server-sent events.',
  fields: (t) => ({
    deliveryUpdated: t.field({
      type: DeliveryEventRef,
      nullable: false,
      description:
        'Lifecycle of one delivery: first the current state (the latest stored event, or a `snapshot` read from the upstream when none is stored, or the read itself, stored as a `poll` event, when it contradicts a stored final state), then one message per accepted delivery.* event. Never moves backwards along the delivery path; duplicates are dropped; where events contradict each other (a dropoff after FAILED, a FAILED after DROPOFF_COMPLETE) one read of the upstream settles it and its answer is sent. An event naming another courier (a reassignment) is sent even when its milestone is behind, with courierOnly true, the new courier, and the status the delivery already has. Completes when the delivery is final: DROPOFF_COMPLETE, RETURNED, or a CANCELED/FAILED with no evidence of pickup that a read made FINALITY_GRACE_MS later still confirms (that read is not sent again); a return or a second attempt after a cancel or failure is followed to its end.',
      args: { uid: t.arg.id({ required: true, description: 'The delivery to follow.' }) },
      subscribe: (_root, _args, ctx, info) => {
        const { uid } = argumentsOf<{ uid: string }>(info);
        const { deps, subscriber } = realtime(ctx);
        return deliveryUpdated(deps, subscriber, String(uid));
      },
      resolve: (event) => event,
    }),
    courierLocation: t.field({
      type: CourierLocationRef,
      nullable: false,
      description:
        'Courier position for one delivery: location.* events and driver_location on delivery.* events, starting with the latest known, the return trip included. Stale positions (from an earlier milestone, or of a courier since replaced) are dropped, but the first position of a new courier is sent whatever its milestone; a slow reader gets the latest position only. Completes when the delivery is final, as deliveryUpdated does.',
      args: { uid: t.arg.id({ required: true, description: 'The delivery to follow.' }) },
      subscribe: (_root, _args, ctx, info) => {
        const { uid } = argumentsOf<{ uid: string }>(info);
        const { deps, subscriber } = realtime(ctx);
        return courierLocation(deps, subscriber, String(uid));
      },
      resolve: positionOf,
    }),
    deliveryEvents: t.field({
      type: DeliveryEventRef,
      nullable: false,
      description:
        'Every event the caller may see, optionally filtered; with `after`, first replays the stored events after that cursor, then goes live, with no gap and no duplicate.',
      args: {
        uids: t.arg.idList({ description: 'Only these deliveries.' }),
        names: t.arg.stringList({ description: 'Only these event names, e.g. ["delivery.dropoff_complete"].' }),
        after: t.arg.string({
          description: `Replay the stored events after this cursor (one this key was given) first; "${START_CURSOR}" replays from the oldest stored event.`,
        }),
      },
      subscribe: (_root, _args, ctx, info) => {
        const { uids, names, after } = argumentsOf<{
          uids?: string[] | null;
          names?: string[] | null;
          after?: string | null;
        }>(info);
        const { deps, subscriber } = realtime(ctx);
        return deliveryEvents(deps, subscriber, { uids: uids?.map(String), names, after });
      },
      resolve: (event) => event,
    }),
  }),
});
