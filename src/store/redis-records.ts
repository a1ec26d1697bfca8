// The Redis store's owner records (who a delivery belongs to, and how that is known: src/access/owners.ts), merchant
// links and their histories (src/access/merchants.ts), and reconciliation's read leases; the key names every part of
// the store shares. RedisStore (redis.ts) adds the events, idempotency claims and retention over them.
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { bookingMarker } from '../domain/booking-marker.js';
import { viewBody, type StoredView } from '../domain/delivery-view.js';
import type { Retention } from './retention.js';
import {
  OWNER_CLAIMS_KEPT,
  PENDING_EXPIRY_MS,
  merchantScoped,
  type ConfirmedView,
  type MerchantLink,
  type MerchantMerge,
  type OwnerClaims,
  type OwnerEntry,
  type OwnerGroup,
  type OwnerProof,
  type OwnerRecord,
  type UnfinishedDelivery,
  type UnfinishedPage,
} from './store.js';
import './redis-scripts.js';

/** Links followed at most, as in the SQLite store (sqlite-writer.ts). */
const MAX_LINK_DEPTH = 16;

/** The owner value's proof, when it names one this version knows. */
const OWNER_PROOFS: ReadonlySet<string> = new Set<OwnerProof>(['booked', 'reference', 'canceled', 'claimed', 'read']);

/** Members of an owner's set one page looks at, at most. */
const UNFINISHED_SCAN = 200;

/** A literal for a SCAN MATCH pattern: its glob characters escaped. */
const globEscape = (text: string) => text.replace(/[*?[\]\\]/g, '\\$&');

export const flag = (value: boolean) => (value ? '1' : '0');

export class RedisRecords {
  readonly client: Redis;
  /** Prefix of every key; several facades (or tests) can share one Redis with different prefixes. */
  readonly prefix: string;
  protected readonly retention: Retention | undefined;
  /** Filled in once: the history of merchants from data written before histories were kept (#historyKept). */
  #historyFilled: Promise<void> | undefined;
  /** What this instance's read leases hold: the leases it took are its own to take again and to give back. */
  readonly #leaseToken = randomBytes(9).toString('base64url');

  constructor(client: Redis, prefix: string, retention: Retention | undefined) {
    this.client = client;
    this.prefix = prefix;
    this.retention = retention;
  }

  protected deliveryKeys(uid: string) {
    const base = `${this.prefix}delivery:${uid}`;
    return { state: base, events: `${base}:events`, dedup: `${base}:dedup` };
  }

  protected idemKey(ownerHash: string, idempotencyKey: string): string {
    return `${this.prefix}idem:${ownerHash}:${idempotencyKey}`;
  }

  protected markerKey(marker: string): string {
    return `${this.prefix}idem-marker:${marker}`;
  }

  /** A claim in flight or unknown outlives its pending expiry, whatever the retention. */
  protected get idemTtl(): string {
    return this.retention ? String(Math.max(this.retention.idempotencyRetentionMs, PENDING_EXPIRY_MS)) : '';
  }

  async recordOwner(uid: string, owner: string, group?: OwnerGroup, proof?: OwnerProof): Promise<void> {
    await this.recordOwners([{ uid, owner, group: group ?? null, proof }]);
  }

  async recordOwners(records: readonly OwnerEntry[]): Promise<void> {
    // One round trip; the script keeps the first record but for what supersedes() lets replace it, and a record written
    // joins its owner's unfinished set.
    const pipeline = this.client.pipeline();
    const now = Date.now();
    const ttl = this.retention ? String(this.retention.eventRetentionMs) : '';
    for (const { uid, owner, group, proof, replace } of records) {
      const value = `${owner} ${group ?? '-'} ${proof ?? 'read'} ${now}`;
      pipeline.dgOwn(
        this.ownerKey(uid),
        this.unfinishedKey(owner),
        this.historyKey(owner),
        this.#ownerClaims,
        `${this.#ownerClaims}:version`,
        value,
        flag(merchantScoped(proof ?? 'read')),
        flag(replace === true),
        ttl,
        uid,
        String(OWNER_CLAIMS_KEPT),
      );
    }
    const results = await pipeline.exec();
    const failed = results?.find(([error]) => error);
    if (failed) throw failed[0];
  }

  protected ownerKey(uid: string): string {
    return `${this.prefix}owner:${uid}`;
  }

  get #ownerClaims(): string {
    return `${this.prefix}owner-claims`;
  }

  async ownerClaimsAfter(after: number | undefined): Promise<OwnerClaims> {
    const [version, complete, ...uids] = await this.client.dgOwnerClaims(
      this.#ownerClaims,
      `${this.#ownerClaims}:version`,
      after === undefined ? '' : String(after),
    );
    return { version, uids: complete === 1 ? uids : undefined };
  }

  protected unfinishedKey(owner: string): string {
    return `${this.prefix}unfinished:${owner}`;
  }

  /**
   * Looks at up to UNFINISHED_SCAN members of the owner's set in uid order, and
   * drops those found final or expired on the way; the cursor is the last uid looked at.
   */
  async unfinishedDeliveries(
    owner: string,
    after: string | undefined,
    { limit, since }: { limit: number; since: number },
  ): Promise<UnfinishedPage> {
    const set = this.unfinishedKey(owner);
    const scan = Math.max(limit, UNFINISHED_SCAN);
    const uids = await this.client.zrangebylex(set, after === undefined ? '-' : `(${after}`, '+', 'LIMIT', 0, scan);
    if (uids.length === 0) return { deliveries: [], next: undefined };
    const pipeline = this.client.pipeline();
    for (const uid of uids)
      pipeline.dgUnfinished(set, this.ownerKey(uid), this.deliveryKeys(uid).state, uid, owner, String(since));
    const results = (await pipeline.exec()) ?? [];
    const deliveries: UnfinishedDelivery[] = [];
    for (const [index, [error, group]] of results.entries()) {
      if (error) throw error;
      if (group === null || group === undefined) continue;
      deliveries.push({ uid: uids[index]!, group: group === 'PLATFORM' || group === 'PARTNER' ? group : null });
      if (deliveries.length === limit) return { deliveries, next: uids[index] };
    }
    return { deliveries, next: uids.length === scan ? uids.at(-1) : undefined };
  }

  /** SET NX with a time to live, one per lease, in one round trip. */
  async leaseReads(leases: readonly string[], forMs: number): Promise<Set<string>> {
    const taken = new Set<string>();
    if (leases.length === 0) return taken;
    const pipeline = this.client.pipeline();
    const ttl = String(Math.max(1, Math.round(forMs)));
    for (const lease of leases) pipeline.dgLease(this.#readLease(lease), this.#leaseToken, ttl);
    const results = (await pipeline.exec()) ?? [];
    results.forEach(([error, answer], index) => {
      if (error) throw error;
      if (answer === 1) taken.add(leases[index]!);
    });
    return taken;
  }

  async releaseReads(leases: readonly string[]): Promise<void> {
    if (leases.length === 0) return;
    const pipeline = this.client.pipeline();
    for (const lease of leases) pipeline.dgUnlease(this.#readLease(lease), this.#leaseToken);
    for (const [error] of (await pipeline.exec()) ?? []) if (error) throw error;
  }

  #readLease(lease: string): string {
    return `${this.prefix}read-lease:${lease}`;
  }

  async ownerOf(uid: string): Promise<string | undefined> {
    return (await this.ownersOf([uid])).get(uid)?.owner;
  }

  async ownersOf(uids: readonly string[]): Promise<Map<string, OwnerRecord>> {
    const found = new Map<string, OwnerRecord>();
    if (uids.length === 0) return found;
    const values = await this.client.mget(uids.map((uid) => this.ownerKey(uid)));
    values.forEach((value, index) => {
      if (value === null) return;
      // The time it was recorded, fourth, is reconciliation's (unfinishedDeliveries).
      const [owner, group, proof] = value.split(' ');
      found.set(uids[index]!, {
        owner: owner!,
        group: group === 'PLATFORM' || group === 'PARTNER' ? group : null,
        proof: proof !== undefined && OWNER_PROOFS.has(proof) ? (proof as OwnerProof) : null,
      });
    });
    return found;
  }

  #link(id: string): string {
    return `${this.prefix}merchant-link:${id}`;
  }

  async merchantLinks(ids: readonly string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    if (ids.length === 0) return found;
    const values = await this.client.mget(ids.map((id) => this.#link(id)));
    values.forEach((value, index) => {
      if (value !== null) found.set(ids[index]!, value);
    });
    return found;
  }

  protected historyKey(id: string): string {
    return `${this.prefix}merchant-history:${id}`;
  }

  async linkMerchant(key: string, previous: string): Promise<MerchantLink> {
    await this.#historyKept();
    const [outcome, merchant] = await this.client.dgLink(key, previous, this.prefix, String(MAX_LINK_DEPTH));
    if (outcome === 'refused') return { outcome };
    return { outcome: outcome as 'linked' | 'same', merchant: merchant! };
  }

  /**
   * The link in one script; then what was recorded under the ids that lead to
   * the merchant moved to it, a claim or record at a time (a SCAN of the claims
   * of each id, and of every owner record: an operator's command, run rarely).
   */
  async mergeMerchant(from: string, into: string): Promise<MerchantMerge> {
    await this.#historyKept();
    const [merchant, merged, ...ids] = await this.client.dgMergeLink(from, into, this.prefix, String(MAX_LINK_DEPTH));
    const outcome: MerchantMerge = {
      merchant: merchant!,
      merged: merged || undefined,
      records: 0,
      claims: 0,
      conflicts: 0,
    };
    for (const id of ids) {
      const claimPrefix = this.idemKey(id, '');
      for await (const names of this.client.scanStream({
        match: `${globEscape(claimPrefix)}*`,
        count: 1000,
      }) as AsyncIterable<string[]>) {
        for (const name of names) {
          const idempotencyKey = name.slice(claimPrefix.length);
          const moved = await this.client.dgMoveClaim(
            name,
            this.idemKey(merchant!, idempotencyKey),
            this.markerKey(bookingMarker(id, idempotencyKey)),
            this.historyKey(id),
            this.historyKey(merchant!),
            merchant!,
          );
          if (moved === 1) outcome.claims += 1;
          else if (moved === 2) outcome.conflicts += 1;
        }
      }
    }
    const linked = new Set(ids);
    if (linked.size === 0) return outcome;
    const recordPrefix = this.ownerKey('');
    for await (const names of this.client.scanStream({
      match: `${globEscape(recordPrefix)}*`,
      count: 1000,
    }) as AsyncIterable<string[]>) {
      if (names.length === 0) continue;
      const values = await this.client.mget(names);
      for (const [index, value] of values.entries()) {
        const owner = value?.split(' ')[0];
        if (owner === undefined || !linked.has(owner)) continue;
        const uid = names[index]!.slice(recordPrefix.length);
        outcome.records += await this.client.dgMoveRecord(
          names[index]!,
          this.unfinishedKey(owner),
          this.unfinishedKey(merchant!),
          this.historyKey(merchant!),
          owner,
          merchant!,
          uid,
        );
      }
    }
    return outcome;
  }

  async unlinkMerchant(id: string): Promise<boolean> {
    return (await this.client.dgUnlink(this.#link(id), id, this.prefix)) > 0;
  }

  /**
   * Data written before merchant histories were kept has none: once per data set
   * (and per process until then), before the first link, each owner record, claim
   * and link gives its merchant the history it would have had. Run twice at once,
   * a claim may be counted twice: a history too many refuses a link, never loses one.
   */
  #historyKept(): Promise<void> {
    this.#historyFilled ??= this.#fillHistory().catch((error: unknown) => {
      this.#historyFilled = undefined;
      throw error;
    });
    return this.#historyFilled;
  }

  async #fillHistory(): Promise<void> {
    const ready = `${this.prefix}merchant-history-ready`;
    if ((await this.client.exists(ready)) === 1) return;
    const records = this.retention ? String(this.retention.eventRetentionMs) : '';
    const claims = this.idemTtl;
    const each = async (
      prefix: string,
      fill: (names: string[], pipeline: ReturnType<Redis['pipeline']>) => Promise<void>,
    ) => {
      for await (const names of this.client.scanStream({
        match: `${globEscape(prefix)}*`,
        count: 1000,
      }) as AsyncIterable<string[]>) {
        if (names.length === 0) continue;
        const pipeline = this.client.pipeline();
        await fill(names, pipeline);
        for (const [error] of (await pipeline.exec()) ?? []) if (error) throw error;
      }
    };
    await each(this.ownerKey(''), async (names, pipeline) => {
      for (const value of await this.client.mget(names))
        if (value) pipeline.dgHistory(this.historyKey(value.split(' ')[0]!), 'records', '', records);
    });
    const claimPrefix = `${this.prefix}idem:`;
    await each(claimPrefix, async (names, pipeline) => {
      const owners = await Promise.all(names.map((name) => this.client.hget(name, 'owner')));
      // A claim from before owners were kept in it: the owner is the name's first part (a hash, no colon).
      owners.forEach((owner, index) =>
        pipeline.dgHistory(
          this.historyKey(owner ?? names[index]!.slice(claimPrefix.length).split(':')[0]!),
          'claims',
          '1',
          claims,
        ),
      );
    });
    const linkPrefix = this.#link('');
    await each(linkPrefix, async (names, pipeline) => {
      (await this.client.mget(names)).forEach(
        (to, index) => to && pipeline.sadd(`${this.prefix}merchant-keys:${to}`, names[index]!.slice(linkPrefix.length)),
      );
    });
    await this.client.set(ready, '1');
  }
}

/**
 * A delivery hash as confirmedViews answers it: its view fields, when a read last confirmed it (negative: the view was
 * behind that read) and whether that read settled it, and the newest of its accepted events' receipt times; undefined
 * when it holds no view.
 */
export function confirmedViewOf(uid: string, flat: string[], eventStamps: string[]): ConfirmedView | undefined {
  const view: StoredView = {};
  let readAt: number | undefined;
  let settled = false;
  for (let at = 0; at < flat.length; at += 2) {
    const field = flat[at]!;
    if (field.startsWith('v:')) view[field.slice(2)] = flat[at + 1]!;
    else if (field === 'r:at') readAt = Number(flat[at + 1]);
    else if (field === 'r:settled') settled = flat[at + 1] === '1';
  }
  if (Object.keys(view).length === 0) return undefined;
  const stamps = eventStamps.filter((stamp) => stamp !== '').map((stamp) => Date.parse(stamp));
  return {
    body: viewBody(uid, view),
    readAt,
    eventAt: stamps.length > 0 ? Math.max(...stamps) : undefined,
    settled,
  };
}
