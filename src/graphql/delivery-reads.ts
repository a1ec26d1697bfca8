// A batch of delivery reads for one request (the DataLoader's batch function, context.ts): each uid is answered from
// the store's merged view when the upstream confirmed what the answer holds within the caller's maxAge, else read from
// the upstream as before, and that read is kept in the view (docs/upstream.md, "Reads from the stored view").
// - Who may see it is proven by proveAccess alone: only a delivery the caller's merchant's record proves (the one
//   verdict that costs no upstream call) is looked up in the view; another merchant's, or one nobody recorded, takes
//   the very path it took before, so the view makes no answer differ in shape or in time between them.
// - What confirms what: a read confirms every field it returned, as of when it was made; a webhook event (not stale)
//   the fields events carry, as of its arrival; a read that found a final state settles the view for good. Fields
//   events never carry (READ_ONLY_SELECTIONS) are confirmed by reads alone, so a query that selects one needs a read
//   within maxAge.
import type { FieldNode, FragmentDefinitionNode, GraphQLResolveInfo, SelectionSetNode } from 'graphql';
import { DeliveryGraphError, NotFoundError } from '../errors.js';
import { fromDeliveryView } from '../mapping/delivery.js';
import type { ApiGroup, Delivery } from '../mapping/model.js';
import { readBody } from '../realtime/reads.js';
import { stateOfStatus } from '../domain/milestones.js';
import { deliveryStatus } from '../domain/status.js';
import type { ConfirmedView } from '../store/store.js';
import type { Judged } from '../access/owners.js';
import { proveAccess, type WireRead } from '../access/prove.js';
import type { GraphQLContext, Services } from './context.js';

/** How fresh a read must be: the caller's maxAge (seconds; 0 reads the upstream) and what its selection holds. */
export interface ReadFreshness {
  maxAge: number;
  /** The selection holds a field only reads carry (see needsRead). */
  needsRead: boolean;
}

/** Deliveries of this request answered from the view and from the upstream (the answer's extensions). */
export interface ReadTally {
  fromView: number;
  fromUpstream: number;
}

/** Delivery fields that webhook events never carry, and the nested fields of that kind under the others. */
const READ_ONLY_SELECTIONS: ReadonlyMap<string, ReadonlySet<string> | true> = new Map<
  string,
  ReadonlySet<string> | true
>([
  ['trackingUrl', true],
  ['style', true],
  ['rawStyle', true],
  ['expectedCancellationFee', true],
  ['scheduledAt', true],
  ['package', new Set(['dimensions'])],
  ['dropoff', new Set(['email'])],
]);

const selectionNeeds = new WeakMap<FieldNode, boolean>();

/** Whether a delivery field's selection holds anything only a read confirms (memoized per document node). */
export function needsRead(info: Pick<GraphQLResolveInfo, 'fieldNodes' | 'fragments'>): boolean {
  const node = info.fieldNodes[0];
  if (!node) return true;
  let needs = selectionNeeds.get(node);
  if (needs === undefined) {
    needs = info.fieldNodes.some((field) => holdsAny(field.selectionSet, READ_ONLY_SELECTIONS, info.fragments));
    selectionNeeds.set(node, needs);
  }
  return needs;
}

function holdsAny(
  set: SelectionSetNode | undefined,
  names: ReadonlyMap<string, ReadonlySet<string> | true> | ReadonlySet<string>,
  fragments: Record<string, FragmentDefinitionNode>,
  seen = new Set<string>(),
): boolean {
  if (!set) return false;
  for (const selection of set.selections) {
    if (selection.kind === 'Field') {
      const inner = names instanceof Map ? names.get(selection.name.value) : names.has(selection.name.value);
      if (inner === true) return true;
      if (inner && holdsAny(selection.selectionSet, inner, fragments, seen)) return true;
    } else if (selection.kind === 'InlineFragment') {
      if (holdsAny(selection.selectionSet, names, fragments, seen)) return true;
    } else if (!seen.has(selection.name.value)) {
      seen.add(selection.name.value);
      if (holdsAny(fragments[selection.name.value]?.selectionSet, names, fragments, seen)) return true;
    }
  }
  return false;
}

/** When the upstream last confirmed what an answer from this view would hold; undefined when nothing did. */
export function confirmedAt(view: ConfirmedView, needsRead: boolean): number | undefined {
  if (view.readAt !== undefined && view.readAt < 0) {
    // A read found the view behind the upstream: only an event since vouches for it, and only for what events carry.
    const behindAt = -view.readAt;
    return needsRead || view.eventAt === undefined || view.eventAt <= behindAt ? undefined : view.eventAt;
  }
  if (needsRead || view.eventAt === undefined) return view.readAt;
  return view.readAt === undefined ? view.eventAt : Math.max(view.readAt, view.eventAt);
}

/** The batch: one entry per (distinct) uid, in order; null where the caller may not see it. */
export async function readDeliveries(
  ctx: GraphQLContext,
  group: ApiGroup,
  freshness: ReadFreshness,
  tally: ReadTally,
  uids: readonly string[],
): Promise<Array<Delivery | null | Error>> {
  const key = ctx.requireKey();
  const { services, scope } = ctx;
  const { upstream, owners, store } = services;
  // The owner records for the whole batch in one lookup; each uid is proven (or not) by src/access/prove.ts.
  let caller: string;
  let judged: Map<string, Judged>;
  try {
    caller = await ctx.merchant();
    judged = await owners.judge(scope ? uids.filter((uid) => scope.has(uid)) : uids, caller);
  } catch (error) {
    // Without the records nobody can be told apart: every entry fails, nothing is read.
    const failure = error instanceof DeliveryGraphError ? error : new Error('The owner records could not be read.');
    return uids.map(() => failure);
  }
  const views = await viewsOf(services, group, freshness, uids, judged);
  const now = Date.now();
  // The log's position before any read of this batch is made: what a read may overwrite in the view (ReadRecord).
  let basis: Promise<number> | undefined;
  const byReference = (reference: string) => ctx.orderByReferenceLoader().load(reference);
  const read = async (uid: string, options: { signal: AbortSignal } | undefined) => {
    // A client token's other uids read as not found, without asking the upstream.
    if (scope && !scope.has(uid)) return null;
    const view = views.get(uid);
    const asOf = view && confirmedAt(view, freshness.needsRead);
    if (asOf !== undefined && (view!.settled || now - asOf <= freshness.maxAge * 1000)) {
      tally.fromView += 1;
      const delivery = fromDeliveryView(view!.body, group);
      delivery.asOf = new Date(asOf).toISOString();
      return delivery;
    }
    // Kept only for a delivery its record proved the caller's before this read (the view answers no other), and only
    // while reads from the view are on: a read of a uid nobody proved writes nothing, whoever asks.
    const keeps = judged.get(uid)?.verdict === 'own' && services.config.graphql.readMaxAgeSeconds > 0;
    if (keeps) basis ??= store.lastSeq().catch(() => Number.MAX_SAFE_INTEGER);
    const readAt = Date.now();
    let wire: WireRead | undefined;
    const claim = { key, merchant: caller, uid, group, purpose: 'read' } as const;
    const answer = await proveAccess(owners, upstream, claim, {
      judged: judged.get(uid),
      signal: options?.signal,
      byReference,
      onRead: keeps ? (read) => (wire = read) : undefined,
    });
    if (answer.upstreamRead) tally.fromUpstream += 1;
    if (!answer.allowed) return null;
    if (wire && keeps && confirms(view, wire)) keep(services, uid, wire, basis!, readAt);
    // Mapped for this caller alone (shared reads share the wire, not the mapping).
    answer.delivery!.asOf = new Date(readAt).toISOString();
    return answer.delivery!;
  };
  return readEach(services, uids, uids.length > 1 ? ctx.clientGone() : undefined, read);
}

/**
 * The views of the uids the caller's merchant's record proves in this group, when the caller accepts any age: one
 * store lookup. A store that cannot answer leaves every read to the upstream.
 */
async function viewsOf(
  services: Services,
  group: ApiGroup,
  freshness: ReadFreshness,
  uids: readonly string[],
  judged: Map<string, Judged>,
): Promise<Map<string, ConfirmedView>> {
  if (freshness.maxAge <= 0) return new Map();
  const own = uids.filter((uid) => {
    const verdict = judged.get(uid);
    return verdict?.verdict === 'own' && verdict.record?.group === group;
  });
  if (own.length === 0) return new Map();
  try {
    return await services.store.confirmedViews(own);
  } catch {
    return new Map();
  }
}

/**
 * Whether keeping a read can let a later read answer from the view: when webhooks already established the delivery's
 * state (the read then confirms it, or says the view is behind), or when the read is final (it settles the view).
 * Otherwise (no event yet, a read merely ahead) it would be kept as the view being behind, which answers no read,
 * at a store write per read.
 */
function confirms(view: ConfirmedView | undefined, read: WireRead): boolean {
  return view?.eventAt !== undefined || stateOfStatus(deliveryStatus(read.wire.status))?.terminal === true;
}

/**
 * A read the caller may see, kept in the background (the answer does not wait for the store) as a subscription's
 * start keeps its read (Reconciler.applyRead): merged into the view, which it confirms as of when it was made when the
 * log's state is at the milestone it says (readConfirmation in src/store/store.ts).
 */
function keep(services: Services, uid: string, read: WireRead, basis: Promise<number>, readAt: number): void {
  const { reconciler, store } = services;
  void basis
    .then(async (seq) => {
      // As at a subscription's start: only what the read decides is stored as an event; a read merely ahead of the log
      // may have webhooks on their way, which it would make stale. The view then stays behind, and says so.
      if (reconciler) await reconciler.applyRead(uid, read, seq, { atStart: true, readAt });
      else await store.recordRead({ uid, body: readBody(read), basis: seq, readAt });
    })
    // A read that could not be kept only costs the next read of it a GET.
    .catch(() => undefined);
}

/**
 * Reads each (already distinct) id once, at most `batchConcurrency` at a time.
 * A failing id fails only its own entry; an unknown one reads as null.
 */
export async function readEach(
  services: Services,
  ids: readonly string[],
  signal: AbortSignal | undefined,
  read: (id: string, options: { signal: AbortSignal } | undefined) => Promise<Delivery | null>,
): Promise<Array<Delivery | null | Error>> {
  const readOne = async (id: string): Promise<Delivery | null | Error> => {
    try {
      return await read(id, signal ? { signal } : undefined);
    } catch (error) {
      if (error instanceof NotFoundError) return null;
      return error instanceof DeliveryGraphError ? error : new Error(String(error));
    }
  };
  // A lone read (the common `delivery(uid:)`) needs no workers to share out.
  if (ids.length === 1) return [await readOne(ids[0]!)];
  const results = new Array<Delivery | null | Error>(ids.length);
  let next = 0;
  const worker = async () => {
    while (next < ids.length && !signal?.aborted) {
      const index = next++;
      results[index] = await readOne(ids[index]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(services.config.graphql.batchConcurrency, ids.length) }, worker));
  // Reads never started because the client went away still need an entry.
  for (let index = 0; index < results.length; index += 1)
    if (results[index] === undefined) results[index] = new Error('The client went away before this read.');
  return results;
}
