// The one Delivery type (platform Delivery and partner Order alike) and the
// queries that read deliveries.
import { BadUserInputError, NotFoundError, UpstreamProtocolError } from '../errors.js';
import { fromPartnerOrder } from '../mapping/delivery.js';
import { recordProof } from '../access/prove.js';
import { isStub, type ApiGroup, type Delivery, type DeliveryParent } from '../mapping/model.js';
import { builder } from './builder.js';
import type { GraphQLContext } from './context.js';
import { ApiGroupEnum, DeliveryModeEnum, DeliveryStatusEnum, DeliveryStyleEnum } from './enums.js';
import { CourierRef, DistanceRef, MoneyRef, PackageRef, ProofOfDeliveryRef, StopRef } from './objects.js';
import { checkUid } from './uid-arguments.js';
import { needsRead } from './delivery-reads.js';

export const DeliveryRef = builder.objectRef<DeliveryParent>('Delivery');

/** The delivery behind a parent: itself, or (after createDelivery) one read, shared by every field. */
function full(parent: DeliveryParent, ctx: GraphQLContext): Delivery | Promise<Delivery> {
  if (!isStub(parent)) return parent;
  return ctx
    .deliveryLoader(parent.group)
    .load(parent.uid)
    .then((delivery) => {
      if (!delivery)
        throw new UpstreamProtocolError('The delivery service does not return the delivery it just booked.');
      return delivery;
    });
}

/** A resolver that reads one property of the full delivery. */
function read<K extends keyof Delivery>(key: K) {
  return (parent: DeliveryParent, _args: object, ctx: GraphQLContext) => {
    const delivery = full(parent, ctx);
    return delivery instanceof Promise ? delivery.then((d) => d[key]) : delivery[key];
  };
}

/**
 * The style of a delivery. A partner order read by uid carries no delivery_style
 * (the upstream's document: only the read by partner reference does), so for
 * one with a reference it is taken from that read: once per order per request,
 * and only when a style field is selected.
 */
async function styleSource(parent: DeliveryParent, ctx: GraphQLContext): Promise<Delivery> {
  const delivery = await full(parent, ctx);
  if (delivery.group !== 'PARTNER' || delivery.rawStyle !== null || !delivery.partnerReference) return delivery;
  const byReference = await ctx.orderByReferenceLoader().load(delivery.partnerReference);
  // The reference names this very order, or its answer says nothing about this one.
  return byReference && byReference.uid === delivery.uid ? byReference : delivery;
}

const GLOBAL_ID_SEPARATOR = ':';

function parseDeliveryId(id: string): { group: ApiGroup; uid: string } | null {
  const at = id.indexOf(GLOBAL_ID_SEPARATOR);
  const group = id.slice(0, at);
  if (at < 0 || (group !== 'PLATFORM' && group !== 'PARTNER')) return null;
  return { group, uid: id.slice(at + 1) };
}

builder.node(DeliveryRef, {
  description:
    'A delivery, read from either endpoint group: a platform-group Delivery and a partner-group Order read into this one shape (dimentions, tracking_url, expected_cancelation_fee and partner_payload are normalized here).',
  id: {
    resolve: (delivery) => `${delivery.group}${GLOBAL_ID_SEPARATOR}${delivery.uid}`,
  },
  isTypeOf: (value) =>
    typeof value === 'object' &&
    value !== null &&
    'uid' in value &&
    'group' in value &&
    ('stub' in value || 'pickup' in value),
  loadOne: (id, ctx) => {
    const parsed = parseDeliveryId(id);
    return parsed ? ctx.deliveryLoader(parsed.group).load(checkUid(parsed.uid, 'The uid in id')) : null;
  },
  fields: (t) => ({
    uid: t.exposeID('uid', {
      description: 'The upstream identifier returned at booking; reads, cancellations and webhooks are keyed on it.',
    }),
    group: t.field({
      type: ApiGroupEnum,
      description: 'The endpoint group this delivery was read from.',
      resolve: (d) => d.group,
    }),
    asOf: t.field({
      type: 'DateTime',
      description:
        'When the upstream last confirmed this answer: the time of its read, or, for an answer from the stored view, the oldest confirmation among what it holds (a read confirms every field; a webhook event the fields events carry, as of its arrival). See maxAge on delivery and deliveries.',
      resolve: async (parent, _args, ctx) => (await full(parent, ctx)).asOf ?? new Date().toISOString(),
    }),
    status: t.field({ type: DeliveryStatusEnum, description: 'Normalized lifecycle status.', resolve: read('status') }),
    rawStatus: t.string({
      nullable: true,
      description: 'The status string exactly as the upstream sent it.',
      resolve: read('rawStatus'),
    }),
    price: t.field({
      type: MoneyRef,
      nullable: true,
      description: 'Cost of the delivery; null until pricing settles, and while no currency is known for it.',
      resolve: read('price'),
    }),
    tip: t.field({ type: 'Decimal', nullable: true, description: 'Courier tip in major units.', resolve: read('tip') }),
    distance: t.field({
      type: DistanceRef,
      nullable: true,
      description: 'Distance from pickup to dropoff.',
      resolve: read('distance'),
    }),
    pickup: t.field({ type: StopRef, description: 'Where the package is collected.', resolve: read('pickup') }),
    dropoff: t.field({ type: StopRef, description: 'Where the package goes.', resolve: read('dropoff') }),
  }),
});

// When: the scheduled date and windows, the estimate, on demand or scheduled.
builder.objectFields(DeliveryRef, (t) => ({
  deliveryDate: t.field({
    type: 'Date',
    nullable: true,
    description: 'Scheduled date, a UTC date (the upstream reads and writes every date in UTC).',
    resolve: read('deliveryDate'),
  }),
  scheduledAt: t.field({
    type: 'DateTime',
    nullable: true,
    description:
      'The scheduled date with its time of day, in UTC, as a read of the delivery gives it (the upstream sends a full datetime there); null where only the date is known, as in a webhook event.',
    resolve: read('scheduledAt'),
  }),
  deliveryStartTime: t.field({
    type: 'DateTime',
    nullable: true,
    description: 'Start of the delivery window (partner group).',
    resolve: read('deliveryStartTime'),
  }),
  deliveryEndTime: t.field({
    type: 'DateTime',
    nullable: true,
    description: 'End of the dropoff window.',
    resolve: read('deliveryEndTime'),
  }),
  estimatedDropoffAt: t.field({
    type: 'DateTime',
    nullable: true,
    description: 'Estimated arrival at the dropoff (dropoff_time_estimated).',
    resolve: read('estimatedDropoffAt'),
  }),
  mode: t.field({
    type: DeliveryModeEnum,
    nullable: true,
    description: 'On demand (NOW) or SCHEDULED.',
    resolve: read('mode'),
  }),
}));

// How it is handled and by whom, how it ended, and the links and references that come with it.
builder.objectFields(DeliveryRef, (t) => ({
  style: t.field({
    type: DeliveryStyleEnum,
    nullable: true,
    description:
      "Handling style; OTHER for styles the facade does not know. A partner order's read by uid has no style upstream, so for a partner order with a partnerReference selecting this costs one more upstream read (by reference), once per order per request.",
    resolve: async (parent, _args, ctx) => (await styleSource(parent, ctx)).style,
  }),
  rawStyle: t.string({
    nullable: true,
    description:
      'The style string exactly as the upstream sent it (for a partner order, from its read by partner reference, as `style`).',
    resolve: async (parent, _args, ctx) => (await styleSource(parent, ctx)).rawStyle,
  }),
  package: t.field({ type: PackageRef, description: 'What is being delivered.', resolve: read('package') }),
  courier: t.field({
    type: CourierRef,
    nullable: true,
    description: 'The courier; null until one is assigned.',
    resolve: read('courier'),
  }),
  proofOfDelivery: t.field({
    type: ProofOfDeliveryRef,
    nullable: true,
    description: 'Photo and signature collected at the dropoff.',
    resolve: read('proofOfDelivery'),
  }),
  cancellationReason: t.string({
    nullable: true,
    description: 'Why the delivery was canceled.',
    resolve: read('cancellationReason'),
  }),
  expectedCancellationFee: t.field({
    type: MoneyRef,
    nullable: true,
    description: 'Fee expected if the delivery were canceled now; null when none is known, or no currency for it.',
    resolve: read('expectedCancellationFee'),
  }),
  trackingUrl: t.string({
    nullable: true,
    description:
      "The upstream's own public tracking page for this delivery, no login needed (tracking_link / tracking_url), on the upstream's site (with the embedded sandbox, the sandbox's port). Not this service's live page, which is `/#uid=<uid>` on the facade (for a customer, `/#token=<client token>`: see createClientToken).",
    // A booking known from its webhook (a lost create answer) has no tracking link yet: read it.
    resolve: (d, args, ctx) =>
      isStub(d) && d.trackingUrl === null ? read('trackingUrl')(d, args, ctx) : d.trackingUrl,
  }),
  payload: t.field({
    type: 'JSON',
    nullable: true,
    description:
      "platform_payload or partner_payload, exactly as supplied (without the facade's idempotency marker, see createDelivery.idempotencyKey).",
    resolve: read('payload'),
  }),
  partnerReference: t.string({
    nullable: true,
    description: "The partner group's own reference of the order.",
    resolve: read('partnerReference'),
  }),
}));

const MAX_AGE =
  'The oldest confirmation by the upstream this read accepts, in seconds: the answer comes from the stored view (webhook events and earlier reads) when the upstream confirmed what it holds within this, else from the upstream now; 0 reads the upstream now (as a request with Cache-Control: no-cache does). Omitted: the READ_MAX_AGE setting. A final state a read confirmed is confirmed for good.';

builder.queryFields((t) => ({
  delivery: t.field({
    type: DeliveryRef,
    nullable: true,
    description:
      "One delivery by uid; null when no such delivery belongs to the caller's merchant: not found upstream (404), recorded as another merchant's (answered exactly as a uid that does not exist), or, where UPSTREAM_READ_SCOPE is platform, one nothing proves the caller owns (a booking through the facade, a read by partner reference, a cancel, an operator's claim; a partner order is proven by its reference on the first read).",
    args: {
      uid: t.arg.id({
        required: true,
        description: 'The delivery uid returned at booking (one URL path segment: see docs/limits.md).',
      }),
      group: t.arg({
        type: ApiGroupEnum,
        required: true,
        defaultValue: 'PLATFORM',
        description: 'Endpoint group to read from.',
      }),
      maxAge: t.arg.int({ description: MAX_AGE }),
    },
    resolve: (_root, { uid, group, maxAge }, ctx, info) => {
      ctx.requireKey();
      const loader = ctx.deliveryLoader(group, ctx.readFreshness(maxAge, needsRead(info)));
      // Checked here too, so that a client token's reads (answered without the upstream client) refuse it alike.
      return loader.load(checkUid(String(uid)));
    },
  }),
  deliveries: t.field({
    type: [DeliveryRef],
    nullable: { list: false, items: true },
    description:
      'Many deliveries in one request: one entry per uid, in order; null where not found. Duplicates are read once, reads run concurrently under a bound, and one failing or malformed uid fails only its own entry (BAD_USER_INPUT at its path for a malformed one, read for nothing). The selection counts once per uid towards the operation cost limit.',
    args: {
      uids: t.arg.idList({ required: true, description: 'Delivery uids, at most MAX_BATCH_SIZE (100 by default).' }),
      group: t.arg({
        type: ApiGroupEnum,
        required: true,
        defaultValue: 'PLATFORM',
        description: 'Endpoint group to read from.',
      }),
      maxAge: t.arg.int({ description: MAX_AGE }),
    },
    resolve: (_root, { uids, group, maxAge }, ctx, info) => {
      ctx.requireKey();
      const max = ctx.services.config.graphql.maxBatchSize;
      if (uids.length > max) throw new BadUserInputError(`deliveries takes at most ${max} uids; got ${uids.length}.`);
      // Only the uids the view cannot answer are read from the upstream (src/graphql/delivery-reads.ts).
      const loader = ctx.deliveryLoader(group, ctx.readFreshness(maxAge, needsRead(info)));
      // One read per distinct uid, and every copy of a uid the very same Delivery
      // object: mapped once, and what is memoized per delivery in this request
      // (its events) is shared by all its copies.
      const reads = new Map<string, Promise<Delivery | null | Error>>();
      const readOnce = (uid: string) => {
        let read = reads.get(uid);
        if (!read) {
          // A malformed uid fails its own entry, unread: the rest of a list kept elsewhere still comes back.
          read = new Promise<Delivery | null>((resolve) => resolve(loader.load(checkUid(uid)))).catch(
            (error: unknown) => (error instanceof Error ? error : new Error(String(error))),
          );
          reads.set(uid, read);
        }
        return read;
      };
      // The whole list is awaited here, each failure kept as its entry's Error:
      // graphql-jit 0.8 appends an extra entry when an item's promise rejects after
      // a later item resolved, so items must not be pending promises.
      return Promise.all(uids.map((uid) => readOnce(String(uid)))) as never;
    },
  }),
  deliveryByReference: t.field({
    type: DeliveryRef,
    nullable: true,
    description:
      "A partner-group order by the partner's own reference; null when none belongs to the caller. The upstream answers this read for the caller's merchant alone, so it proves the order the caller's: reads of it by uid work from then on.",
    args: {
      partnerReference: t.arg.string({
        required: true,
        description: 'The partner_reference given when the order was placed.',
      }),
    },
    resolve: async (_root, { partnerReference }, ctx) => {
      // By reference, not by uid: outside any client token's scope, so the merchant's alone.
      const key = ctx.requireMerchantKey();
      try {
        const order = fromPartnerOrder(
          await ctx.services.upstream.partner.getOrderByReference(key, partnerReference, { signal: ctx.clientGone() }),
        );
        // The upstream answers this read for the caller's merchant alone, whatever its read scope: the order is the
        // caller's, and the answer a merchant-scoped proof, which replaces a record learned from a read
        // (src/access/prove.ts).
        recordProof(ctx.services.owners, await ctx.merchant(), order.uid, 'PARTNER', 'reference');
        // Prime the loader so a later read of the same uid in this request is free.
        ctx.deliveryLoader('PARTNER').prime(order.uid, order);
        return order;
      } catch (error) {
        if (error instanceof NotFoundError) return null;
        throw error;
      }
    },
  }),
}));

/** The key fields a gateway sends in a Delivery representation: `group` only when the other subgraph knows it. */
interface DeliveryRepresentation {
  uid: string;
  group?: ApiGroup | null;
}

/**
 * A Delivery for the supergraph, through this request's loaders: every
 * representation of one uid is one upstream read. With its group, from that
 * group; without, from the platform group and, when the uid is not found there,
 * from the partner group (the way ReadAccess.canRead looks): a uid is a UUID on
 * both groups, so `uid` alone names one delivery, and a partner order read only
 * on the platform group would wrongly read as null. Unknown everywhere → null.
 */
export async function resolveDeliveryReference(
  representation: DeliveryRepresentation,
  ctx: GraphQLContext,
): Promise<Delivery | null> {
  const { uid, group } = representation;
  if (typeof uid !== 'string' || uid === '')
    throw new BadUserInputError('A Delivery representation needs its uid, a non-empty string.');
  checkUid(uid, "A Delivery representation's uid");
  if (group != null && group !== 'PLATFORM' && group !== 'PARTNER')
    throw new BadUserInputError("A Delivery representation's group is PLATFORM or PARTNER when given.");
  if (group) return ctx.deliveryLoader(group).load(uid);
  return (await ctx.deliveryLoader('PLATFORM').load(uid)) ?? ctx.deliveryLoader('PARTNER').load(uid);
}

// Delivery as a federation entity (docs/federation.md): `uid` is the key other
// subgraphs hold; `uid group` lets one that knows the group save the partner
// group's orders a platform read first. _entities itself is bounded in schema.ts.
builder.asEntity(DeliveryRef, {
  key: [builder.selection<{ uid: string }>('uid'), builder.selection<{ uid: string; group: ApiGroup }>('uid group')],
  resolveReference: (representation, ctx) => resolveDeliveryReference(representation, ctx),
});
