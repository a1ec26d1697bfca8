// Reads made for an access decision, so that a uid recorded as another
// merchant's answers exactly like a uid that does not exist: in shape and in
// time. Whatever path asks (a read, a cancel, node, _entities, a subscription,
// a client token), a foreign uid costs the caller the very upstream read an
// unknown uid would, with the caller's key, and never anything that changes
// anything (a cancel is never sent for it):
// - on a key-scoped upstream, the read of that uid: the upstream decides, and
//   answers 404 for another merchant's delivery as for a missing one;
// - on a platform-scoped upstream, whose 200 would prove nothing, the read of a
//   stand-in uid that exists nowhere: the upstream's 404, its words and its
//   time are those of an unknown uid, and another merchant's delivery is never
//   fetched into this process. The stand-in is the same for the same uid (in
//   this process), so concurrent asks share one read as those of a real uid do
//   (src/upstream/shared-reads.ts).
import { createHmac, randomBytes } from 'node:crypto';
import type { ReadScope } from '../config.js';
import { NotFoundError } from '../errors.js';
import { fromPartnerOrder, fromPlatformDelivery } from '../mapping/delivery.js';
import type { ApiGroup, Delivery } from '../mapping/model.js';
import type { Upstream } from '../upstream/clients.js';
import type { OwnerVerdict } from './owners.js';

export interface ReadOptions {
  signal?: AbortSignal;
}

/** Where stand-in uids come from: a secret of this process, so nobody can tell one from its uid. */
const STAND_IN_SECRET = randomBytes(32);

/** A uid in the upstream's format (a UUID, version 4 bits set), derived from `uid`: one no delivery has. */
export function standIn(uid: string): string {
  const bytes = createHmac('sha256', STAND_IN_SECRET).update(uid).digest().subarray(0, 16);
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * The caller's read of `uid` in `group`, as its verdict allows: the delivery,
 * or the NotFoundError an unknown uid gets (with the upstream's refusal, its
 * message naming `uid` where the upstream's named the uid it was asked).
 * Any other failure (a refused key, a timeout) is thrown as it came.
 */
export async function readAsCaller(
  upstream: Upstream,
  scope: ReadScope,
  verdict: OwnerVerdict,
  key: string,
  uid: string,
  group: ApiGroup,
  options?: ReadOptions,
): Promise<Delivery> {
  const asked = verdict === 'other' && scope === 'platform' ? standIn(uid) : uid;
  try {
    const delivery = await readIn(upstream, key, asked, group, options);
    if (asked === uid) return delivery;
  } catch (error) {
    if (!(error instanceof NotFoundError) || asked === uid) throw error;
    // The refusal of the uid it was asked, as the one of the uid the caller named.
    if (error.upstream?.message)
      error.upstream = { ...error.upstream, message: error.upstream.message.split(asked).join(uid) };
    throw error;
  }
  // A stand-in read 200: no answer an unknown uid would get; nothing of it is shown.
  throw new NotFoundError();
}

/** One read in the group asked, mapped. */
export async function readIn(
  upstream: Upstream,
  key: string,
  uid: string,
  group: ApiGroup,
  options?: ReadOptions,
): Promise<Delivery> {
  return group === 'PLATFORM'
    ? fromPlatformDelivery(await upstream.platform.get(key, uid, options))
    : fromPartnerOrder(await upstream.partner.getOrder(key, uid, options));
}

/**
 * Whether the caller's merchant owns a partner order it read by uid, by the
 * one read of the partner group the upstream answers for the caller alone: its
 * read by partner reference. True when the reference the order carries leads
 * the caller's key back to this very uid. A platform delivery carries no such
 * reference: on a platform-scoped upstream nothing the caller can read proves it.
 */
export async function ownedByReference(
  delivery: Delivery,
  byReference: (reference: string) => Promise<Delivery | null>,
): Promise<boolean> {
  if (delivery.group !== 'PARTNER' || !delivery.partnerReference) return false;
  try {
    return (await byReference(delivery.partnerReference))?.uid === delivery.uid;
  } catch (error) {
    if (error instanceof NotFoundError) return false;
    throw error;
  }
}
