// Cancellation type and the cancelDelivery mutation (both groups).
import { CancelRefusedError, NotCancelableError, NotFoundError } from '../errors.js';
import { amountMoney, valueMoney } from '../mapping/delivery.js';
import type { ApiGroup, DeliveryStatus, Money } from '../mapping/model.js';
import { str } from '../mapping/scalars.js';
import { deliveryStatus } from '../domain/status.js';
import { builder } from './builder.js';
import { ApiGroupEnum, DeliveryStatusEnum } from './enums.js';
import { MoneyRef } from './objects.js';
import type { Upstream } from '../upstream/clients.js';
import { proveAccess, recordProof } from '../access/prove.js';

interface Cancellation {
  uid: string;
  group: ApiGroup;
  status: DeliveryStatus;
  rawStatus: string | null;
  fee: Money | null;
  partnerReference: string | null;
  message: string | null;
}

const CancellationRef = builder.objectRef<Cancellation>('Cancellation').implement({
  description: 'The outcome of a cancellation.',
  fields: (t) => ({
    uid: t.exposeID('uid', { description: 'The canceled delivery.' }),
    group: t.field({
      type: ApiGroupEnum,
      description: 'The endpoint group that canceled it.',
      resolve: (c) => c.group,
    }),
    status: t.field({
      type: DeliveryStatusEnum,
      description: 'Status after cancelling (CANCELED).',
      resolve: (c) => c.status,
    }),
    rawStatus: t.exposeString('rawStatus', {
      nullable: true,
      description: 'The status string exactly as the upstream sent it.',
    }),
    fee: t.expose('fee', {
      type: MoneyRef,
      nullable: true,
      description:
        "The cancellation fee the upstream stated in its answer (cancellation_fee, or cancelation_fee on the PARTNER group); what is billed is the upstream's to say. Null when it stated none, or stated it without a currency.",
    }),
    partnerReference: t.exposeString('partnerReference', {
      nullable: true,
      description: 'The order’s partner reference (PARTNER group).',
    }),
    message: t.exposeString('message', { nullable: true, description: "The upstream's message." }),
  }),
});

builder.mutationField('cancelDelivery', (t) =>
  t.field({
    type: CancellationRef,
    description:
      "Cancels a delivery before pickup, on either group; the result states the fee. A delivery recorded as another merchant's is a NotFoundError exactly like a uid that does not exist (the facade reads it as one, and never sends its cancel).",
    nullable: false,
    errors: {
      types: [NotFoundError, NotCancelableError, CancelRefusedError],
      result: { description: 'The cancellation.' },
      union: { description: 'The cancellation, or why it could not be done.' },
      dataField: { description: 'The cancellation.' },
    },
    args: {
      uid: t.arg.id({ required: true, description: 'The delivery to cancel.' }),
      group: t.arg({
        type: ApiGroupEnum,
        required: true,
        defaultValue: 'PLATFORM',
        description: 'Endpoint group the delivery belongs to.',
      }),
    },
    resolve: async (_root, { uid: id, group }, ctx) => {
      const key = ctx.requireMerchantKey();
      const uid = String(id);
      const { upstream, owners } = ctx.services;
      const merchant = await ctx.merchant();
      // Proven first (src/access/prove.ts): the caller's own is canceled at once; anything else is read first, with the
      // caller's key, as an unknown uid would be, and canceled only when that read finds it.
      const access = await proveAccess(owners, upstream, { key, merchant, uid, group, purpose: 'cancel' });
      if (!access.allowed) {
        const refusal = access.elsewhere ? notInGroup(uid, group, access.elsewhere) : new NotFoundError();
        // A 404 is the answer, with the read's words.
        if (access.notFound) refusal.upstream = access.notFound.upstream;
        throw refusal;
      }
      const cancellation = await cancelOwn(upstream, key, uid, group);
      // The upstream cancels only its caller's own (its document: "belongs to the caller"): its cancel proves it.
      recordProof(owners, merchant, uid, group, 'canceled');
      return cancellation;
    },
  }),
);

/** The cancel itself; a 404 is a NotFoundError with the upstream's words. */
async function cancelOwn(upstream: Upstream, key: string, uid: string, group: ApiGroup): Promise<Cancellation> {
  try {
    return await cancelIn(upstream, key, uid, group);
  } catch (error) {
    if (!(error instanceof NotFoundError)) throw error;
    const notFound = new NotFoundError();
    notFound.upstream = error.upstream;
    throw notFound;
  }
}

const notInGroup = (uid: string, group: ApiGroup, other: ApiGroup) =>
  new NotFoundError(`No delivery ${uid} in the ${group} group: it exists in the ${other} group; pass group: ${other}`);

/** One cancel in the group asked, read into a Cancellation. */
async function cancelIn(upstream: Upstream, key: string, uid: string, group: ApiGroup): Promise<Cancellation> {
  if (group === 'PLATFORM') {
    const wire = await upstream.platform.cancel(key, uid);
    return {
      uid: str(wire.uid) ?? uid,
      group,
      status: deliveryStatus(wire.data?.status),
      rawStatus: str(wire.data?.status),
      fee: amountMoney(wire.data?.cancellation_fee),
      partnerReference: null,
      message: str(wire.message),
    };
  }
  const wire = await upstream.partner.cancel(key, uid);
  return {
    uid: str(wire.uid) ?? uid,
    group,
    status: deliveryStatus(wire.data?.status),
    rawStatus: str(wire.data?.status),
    fee: valueMoney(wire.data?.cancelation_fee),
    partnerReference: str(wire.data?.partner_reference),
    message: str(wire.message),
  };
}
