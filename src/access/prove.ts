// Whether a caller may see (or cancel) a delivery, proven here and nowhere else
// (docs/architecture.md, "Who may see a delivery"): the request's DataLoader,
// ReadAccess (subscriptions, client tokens) and cancelDelivery all ask
// proveAccess. The owner record speaks first (ownerVerdict, src/access/owners.ts);
// what it leaves open is proven with the caller's key or refused, and what
// proved it is recorded (Owners.learn):
// - the caller's merchant's record: allowed, with no upstream call unless the
//   caller wants the delivery itself;
// - another merchant's: read exactly as an unknown uid would be (below), and
//   refused, unless a key-scoped upstream answers the caller 200 after all;
// - no record that decides: on a key-scoped upstream the caller's read decides,
//   and its 200 is recorded (`read`); on a platform-scoped one a 200 proves
//   nothing, so a partner order proves itself by the read of the reference it
//   carries, with the caller's key (`reference`), and a cancel is left to the
//   upstream, which cancels only its caller's own (`canceled`, recordProof).
// Read as an unknown uid: another merchant's delivery costs the caller the very
// upstream read an unknown uid would, with its key, and never anything that
// changes anything. On a key-scoped upstream that is the read of the uid (its
// 404 for another merchant's delivery is the one for a missing uid); on a
// platform-scoped one, whose 200 would prove nothing, the read of a stand-in uid
// that exists nowhere, derived from the uid with a secret of this process (so
// concurrent asks share one read as real ones do, src/upstream/shared-reads.ts):
// its 404, words and time are an unknown uid's, and another merchant's delivery
// is never fetched into this process.
import { createHmac, randomBytes } from 'node:crypto';
import { NotFoundError } from '../errors.js';
import { fromPartnerOrder, fromPlatformDelivery } from '../mapping/delivery.js';
import type { ApiGroup, Delivery } from '../mapping/model.js';
import type { Upstream } from '../upstream/clients.js';
import type { WireDelivery, WireOrder } from '../upstream/wire.js';
import type { Judged, OwnerVerdict, Owners } from './owners.js';

/**
 * What the caller claims:
 * - `read`: the delivery in `group`, which it wants (read even when its record proves it, so nobody reads twice);
 * - `check`: only whether it may see the delivery (a subscription, a client token, a read from the store's view):
 *   a record that proves it costs nothing; without `group`, wherever a read can prove it;
 * - `pass`: a check for an event an unfiltered feed meets: nobody named the uid, so another merchant's is refused
 *   unasked, and a key-scoped 200 records nothing (passing by claims no delivery);
 * - `cancel`: the right to cancel in `group`; not found there, the other group is asked so the refusal can name it.
 */
export type AccessClaim = {
  /** The key the upstream is asked with: the caller's, or the one its client token acts for. */
  key: string;
  /** The caller's merchant id (src/access/merchants.ts). */
  merchant: string;
  uid: string;
} & ({ purpose: 'read' | 'cancel'; group: ApiGroup } | { purpose: 'check' | 'pass'; group?: ApiGroup });

export interface ProveOptions {
  /** The records' verdict, when the caller looked up many at once (Owners.judge). */
  judged?: Judged;
  signal?: AbortSignal;
  /** The read by partner reference that proves a partner order; the upstream's own when not given. */
  byReference?: (reference: string) => Promise<Delivery | null>;
  /** Asked once, before the first upstream call (a budget): false and nothing is asked (`withheld`). */
  mayAsk?: () => boolean | Promise<boolean>;
  /** Told of each read of the uid itself (never a stand-in's), as the upstream gave it: the store's view keeps it. */
  onRead?: (read: WireRead) => void;
}

/** One read as the upstream answered it, by group. */
export type WireRead = { group: 'platform'; wire: WireDelivery } | { group: 'partner'; wire: WireOrder };

export type AccessAnswer = Allowed | Refused;

export interface Allowed {
  allowed: true;
  /**
   * The caller's merchant's record; the upstream's 200 (key-scoped); the order's read by partner reference; or, for a
   * cancel on a platform-scoped upstream, a 200 that proves nothing: only the upstream's cancel will.
   */
  provedBy: 'record' | 'read' | 'reference' | 'found';
  /** Where the delivery is; null when only a record from before groups were kept speaks and nothing was read. */
  group: ApiGroup | null;
  /** The delivery, when the upstream was read (the caller need not read it again). */
  delivery: Delivery | undefined;
  upstreamRead: boolean;
}

export interface Refused {
  allowed: false;
  /** mayAsk said no: nothing was asked, and nothing is known. */
  withheld: boolean;
  upstreamRead: boolean;
  /** The first read's 404, with the upstream's words about the uid the caller named; undefined when none was read. */
  notFound: NotFoundError | undefined;
  /** The other group, where the caller's merchant has the delivery (its record, or proven by a cancel's look). */
  elsewhere: ApiGroup | undefined;
}

const refused = (answer: Partial<Omit<Refused, 'allowed'>> = {}): Refused => ({
  allowed: false,
  withheld: false,
  upstreamRead: false,
  notFound: undefined,
  elsewhere: undefined,
  ...answer,
});

/** The one path: proves or refuses the caller's claim to a delivery, and records what proved it. */
export async function proveAccess(
  owners: Owners,
  upstream: Upstream,
  claim: AccessClaim,
  options: ProveOptions = {},
): Promise<AccessAnswer> {
  const { record, verdict } = options.judged ?? (await owners.judgeOne(claim.uid, claim.merchant));
  if (verdict === 'own') {
    const group = claim.group;
    // Recorded in the other group: not found in this one, unasked.
    if (group && record!.group && record!.group !== group) return refused({ elsewhere: record!.group });
    if (claim.purpose !== 'read') return allowed('record', record!.group ?? group ?? null);
    return readOwn(owners, upstream, claim, options);
  }
  // Met in passing by an unfiltered feed: no client named the uid, so refusing it unasked tells nobody anything.
  if (verdict === 'other' && claim.purpose === 'pass') return refused();
  if (options.mayAsk && !(await options.mayAsk())) return refused({ withheld: true });
  const answer = await proveByUpstream(owners, upstream, claim, verdict, options);
  if (answer.allowed || claim.purpose !== 'cancel') return answer;
  return { ...answer, elsewhere: await provenElsewhere(owners, upstream, claim, verdict, options) };
}

/**
 * Records a proof the caller's own act made, outside proveAccess: a read by partner reference (the upstream answers
 * it for the caller's merchant alone), a cancel the upstream made for the caller's key.
 */
export function recordProof(
  owners: Owners,
  merchant: string,
  uid: string,
  group: ApiGroup,
  proof: 'reference' | 'canceled',
): void {
  owners.learn(uid, merchant, group, proof);
}

function allowed(
  provedBy: Allowed['provedBy'],
  group: ApiGroup | null,
  delivery?: Delivery,
  upstreamRead = delivery !== undefined,
): Allowed {
  return { allowed: true, provedBy, group, delivery, upstreamRead };
}

/** The caller's own, wanted: read as it is; a key-scoped upstream's 200 proves the record again. */
async function readOwn(
  owners: Owners,
  upstream: Upstream,
  claim: AccessClaim & { group: ApiGroup },
  options: ProveOptions,
): Promise<AccessAnswer> {
  let delivery: Delivery;
  try {
    delivery = await readIn(upstream, claim.key, claim.uid, claim.group, options.signal, options.onRead);
  } catch (error) {
    if (error instanceof NotFoundError) return refused({ upstreamRead: true, notFound: error });
    throw error;
  }
  if (owners.scope === 'key') owners.learn(claim.uid, claim.merchant, claim.group, 'read');
  return allowed('record', claim.group, delivery);
}

/**
 * A claim no record of the caller's proves, asked of the upstream: in the group named; else wherever a read can prove
 * it (key-scoped: platform, then partner; platform-scoped: only a partner order proves itself).
 */
async function proveByUpstream(
  owners: Owners,
  upstream: Upstream,
  claim: AccessClaim,
  verdict: OwnerVerdict,
  options: ProveOptions,
): Promise<AccessAnswer> {
  const scope = owners.scope;
  const groups: readonly ApiGroup[] = claim.group
    ? [claim.group]
    : scope === 'key'
      ? ['PLATFORM', 'PARTNER']
      : ['PARTNER'];
  const asUnknown = verdict === 'other' && scope === 'platform';
  let notFound: NotFoundError | undefined;
  for (const group of groups) {
    let delivery: Delivery;
    try {
      delivery = await readAsCaller(upstream, claim.key, claim.uid, group, asUnknown, options);
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
      notFound ??= error;
      continue;
    }
    if (scope === 'key') {
      // The upstream decides: its 200 is the caller's, recorded unless another merchant's record stands or the check
      // merely passed by.
      if (verdict === 'unknown' && claim.purpose !== 'pass') owners.learn(claim.uid, claim.merchant, group, 'read');
      return allowed('read', group, delivery);
    }
    // Platform-scoped: the 200 proves nothing. A cancel is the upstream's to decide (it cancels its caller's own only).
    if (claim.purpose === 'cancel') return allowed('found', group, delivery);
    const byReference =
      options.byReference ??
      (async (reference: string) =>
        fromPartnerOrder(await upstream.partner.getOrderByReference(claim.key, reference, signalOf(options.signal))));
    if (!(await ownedByReference(delivery, byReference))) return refused({ upstreamRead: true });
    owners.learn(claim.uid, claim.merchant, group, 'reference');
    return allowed('reference', group, delivery);
  }
  return refused({ upstreamRead: true, notFound });
}

/**
 * A cancel's uid not found in its group: the other group, if the caller's merchant has the delivery there (proven as a
 * check would prove it, and recorded), so the refusal can say where. Whatever goes wrong there leaves the plain refusal.
 */
async function provenElsewhere(
  owners: Owners,
  upstream: Upstream,
  claim: AccessClaim,
  verdict: OwnerVerdict,
  options: ProveOptions,
): Promise<ApiGroup | undefined> {
  const other: ApiGroup = claim.group === 'PLATFORM' ? 'PARTNER' : 'PLATFORM';
  try {
    const there = await proveByUpstream(
      owners,
      upstream,
      { ...claim, purpose: 'check', group: other },
      verdict,
      options,
    );
    return there.allowed ? other : undefined;
  } catch {
    return undefined;
  }
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
 * The caller's read of `uid` in `group`; `asUnknown`: of its stand-in, refused as an unknown uid is (the upstream's
 * NotFoundError, its message naming `uid` where the upstream's named the stand-in). Any other failure is thrown as it
 * came.
 */
async function readAsCaller(
  upstream: Upstream,
  key: string,
  uid: string,
  group: ApiGroup,
  asUnknown: boolean,
  { signal, onRead }: ProveOptions,
): Promise<Delivery> {
  if (!asUnknown) return readIn(upstream, key, uid, group, signal, onRead);
  const asked = standIn(uid);
  try {
    await readIn(upstream, key, asked, group, signal);
  } catch (error) {
    if (!(error instanceof NotFoundError)) throw error;
    if (error.upstream?.message)
      error.upstream = { ...error.upstream, message: error.upstream.message.split(asked).join(uid) };
    throw error;
  }
  // A stand-in read 200: no answer an unknown uid would get; nothing of it is shown.
  throw new NotFoundError();
}

/** One read in the group asked, mapped; `onRead` is told of it as it came. */
async function readIn(
  upstream: Upstream,
  key: string,
  uid: string,
  group: ApiGroup,
  signal: AbortSignal | undefined,
  onRead?: (read: WireRead) => void,
): Promise<Delivery> {
  if (group === 'PLATFORM') {
    const wire = await upstream.platform.get(key, uid, signalOf(signal));
    onRead?.({ group: 'platform', wire });
    return fromPlatformDelivery(wire);
  }
  const wire = await upstream.partner.getOrder(key, uid, signalOf(signal));
  onRead?.({ group: 'partner', wire });
  return fromPartnerOrder(wire);
}

const signalOf = (signal: AbortSignal | undefined) => (signal ? { signal } : undefined);

/**
 * Whether the caller's merchant owns a partner order it read by uid, by the one read of the partner group the upstream
 * answers for the caller alone: true when the reference the order carries leads the caller's key back to this very
 * uid. A platform delivery carries no such reference.
 */
async function ownedByReference(
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
