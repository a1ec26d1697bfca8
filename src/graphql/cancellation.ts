// Cancellation type and the cancelDelivery mutation (both groups).
import { NotCancelableError, NotFoundError } from '../errors.js';
import { amountMoney, valueMoney } from '../mapping/delivery.js';
import type { ApiGroup, DeliveryStatus, Money } from '../mapping/model.js';
import { str } from '../mapping/scalars.js';
import { deliveryStatus } from '../domain/status.js';
import { builder } from './builder.js';
import { ApiGroupEnum, DeliveryStatusEnum } from './enums.js';
import { MoneyRef } from './objects.js';
import type { Upstream } from '../upstream/clients.js';
import { ownerVerdict, type Owners } from '../access/owners.js';
import { hashKey } from '../domain/merchant-key.js';

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
    group: t.field({ type: ApiGroupEnum, description: 'The endpoint group that canceled it.', resolve: (c) => c.group }),
    status: t.field({ type: DeliveryStatusEnum, description: 'Status after cancelling (CANCELED).', resolve: (c) => c.status }),
    rawStatus: t.exposeString('rawStatus', { nullable: true, description: 'The status string exactly as the upstream sent it.' }),
    fee: t.expose('fee', { type: MoneyRef, nullable: true, description: "The cancellation fee the upstream stated in its answer (cancellation_fee, or cancelation_fee on the PARTNER group); what is billed is the upstream's to say. Null when it stated none." }),
    partnerReference: t.exposeString('partnerReference', { nullable: true, description: 'The order’s partner reference (PARTNER group).' }),
    message: t.exposeString('message', { nullable: true, description: "The upstream's message." }),
  }),
});

builder.mutationField('cancelDelivery', (t) =>
  t.field({
    type: CancellationRef,
    description: 'Cancels a delivery before pickup, on either group; the result states the fee.',
    nullable: false,
    errors: {
      types: [NotFoundError, NotCancelableError],
      result: { description: 'The cancellation.' },
      union: { description: 'The cancellation, or why it could not be done.' },
      dataField: { description: 'The cancellation.' },
    },
    args: {
      uid: t.arg.id({ required: true, description: 'The delivery to cancel.' }),
      group: t.arg({ type: ApiGroupEnum, required: true, defaultValue: 'PLATFORM', description: 'Endpoint group the delivery belongs to.' }),
    },
    resolve: async (_root, { uid, group }, ctx) => {
      const key = ctx.requireMerchantKey();
      const { upstream, owners } = ctx.services;
      const caller = hashKey(key);
      // The owner record decides first (src/access/owners.ts): another key's delivery is not found, unasked.
      const record = await owners.lookupOne(String(uid));
      const verdict = ownerVerdict(record, caller);
      if (verdict === 'other') throw new NotFoundError();
      if (record?.group && record.group !== group) throw notInGroup(String(uid), group, record.group);
      try {
        const cancellation = await cancelIn(upstream, key, String(uid), group);
        if (verdict === 'unknown') owners.learn(String(uid), caller, group);
        return cancellation;
      } catch (error) {
        if (error instanceof NotFoundError) {
          const notFound = verdict === 'own' ? new NotFoundError() : await notFoundIn(ctx.services.owners, upstream, key, String(uid), group);
          notFound.upstream = error.upstream;
          throw notFound;
        }
        throw error;
      }
    },
  }),
);

const notInGroup = (uid: string, group: ApiGroup, other: ApiGroup) =>
  new NotFoundError(`No delivery ${uid} in the ${group} group: it exists in the ${other} group; pass group: ${other}`);

/**
 * For a delivery with no owner record: a NotFoundError that says where the
 * delivery is when the caller can read it in the other group (one read there,
 * with the same key; the key is then recorded as its owner); the plain one when
 * that read fails or finds nothing.
 */
async function notFoundIn(owners: Owners, upstream: Upstream, key: string, uid: string, group: ApiGroup): Promise<NotFoundError> {
  const other: ApiGroup = group === 'PLATFORM' ? 'PARTNER' : 'PLATFORM';
  try {
    if (other === 'PLATFORM') await upstream.platform.get(key, uid);
    else await upstream.partner.getOrder(key, uid);
  } catch {
    return new NotFoundError();
  }
  owners.learn(uid, hashKey(key), other);
  return notInGroup(uid, group, other);
}

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
