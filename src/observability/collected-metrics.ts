// The counters and gauges read from their owners when /metrics is scraped (the
// hot path records nothing for them): webhooks, persisted queries, compiles,
// access checks, subscriptions, reconciliation, key re-confirmation, owner
// records, the document cache, the upstream's state. One step per part of the
// app, in the order /metrics lists them.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { BreakerState } from '../upstream/breaker.js';
import type { MetricSources } from './metrics.js';

export const PREFIX = 'delivery_graph_';
const BREAKER_VALUE: Record<BreakerState, number> = { closed: 0, 'half-open': 1, open: 2 };

/**
 * A counter its owner keeps: set at each scrape to what `read` says, one series per label value (or, with no label, a
 * number). Nothing when `read` has nothing (the part is not running).
 */
function counted(
  registry: Registry,
  name: string,
  help: string,
  label: string | undefined,
  read: () => Record<string, number> | number | undefined,
): void {
  new Counter({
    name: `${PREFIX}${name}`,
    help,
    labelNames: label ? [label] : [],
    registers: [registry],
    collect() {
      const values = read();
      if (values === undefined) return;
      this.reset();
      if (typeof values === 'number') return void this.inc(values);
      for (const [value, count] of Object.entries(values)) this.inc({ [label!]: value }, count);
    },
  });
}

/** A gauge set at each scrape to what `read` says. */
function gauged(registry: Registry, name: string, help: string, read: () => number): void {
  new Gauge({
    name: `${PREFIX}${name}`,
    help,
    registers: [registry],
    collect() {
      this.set(read());
    },
  });
}

function collectUpstream(registry: Registry, sources: MetricSources): void {
  new Gauge({
    name: `${PREFIX}upstream_breaker_state`,
    help: 'Circuit breaker of each upstream endpoint group: 0 closed, 1 half-open, 2 open',
    labelNames: ['group'] as const,
    registers: [registry],
    collect() {
      for (const [group, state] of Object.entries(sources.upstream.breakerState()))
        this.set({ group }, BREAKER_VALUE[state]);
    },
  });
}

function collectWebhooks(registry: Registry, { webhooks }: MetricSources): void {
  counted(
    registry,
    'webhooks_total',
    'Webhook deliveries received, by result: accepted (stored), duplicate (already stored), stale (stored, older than the current state), rejected (answered 4xx/5xx)',
    'result',
    () =>
      webhooks && {
        accepted: webhooks.accepted,
        duplicate: webhooks.duplicate,
        stale: webhooks.stale,
        rejected: webhooks.rejected,
      },
  );
  counted(
    registry,
    'webhook_refusals_total',
    'Webhook requests refused, by HTTP status: 400 malformed event, 401 unverifiable token, 408 headers or body too slow, 413 body too large, 431 token over WEBHOOK_MAX_TOKEN_BYTES (refused by the HTTP server), 503 not stored',
    'status',
    () => webhooks && Object.fromEntries([...webhooks.refusals].map(([status, count]) => [String(status), count])),
  );
}

function collectOperations(registry: Registry, { persistedQueries, compiles }: MetricSources): void {
  counted(
    registry,
    'persisted_queries_total',
    'Operations named by hash (extensions.persistedQuery), by result: hit (the hash was known), miss (PersistedQueryNotFound), registered (a query sent with its hash was remembered), unregistered (it ran but was not remembered: the caller was not a merchant key the upstream accepted, a client token included)',
    'result',
    () =>
      persistedQueries && {
        hit: persistedQueries.hits,
        miss: persistedQueries.misses,
        registered: persistedQueries.registrations,
        unregistered: persistedQueries.refused,
      },
  );
  counted(
    registry,
    'graphql_compiles_total',
    'graphql-jit compiles of operation plans, by result: compiled, over_budget (put off: GRAPHQL_COMPILES_PER_MINUTE spent for the process or the key; a later run may compile), too_large (more fields than GRAPHQL_COMPILE_MAX_FIELDS: runs on graphql-js for good). Only accepted merchant keys compile',
    'result',
    () => {
      const counters = compiles?.();
      return (
        counters && { compiled: counters.compiled, over_budget: counters.overBudget, too_large: counters.tooLarge }
      );
    },
  );
}

function collectSubscriptions(registry: Registry, { access, subscriptions, fanout }: MetricSources): void {
  counted(
    registry,
    'access_checks_total',
    "Upstream access checks (may this key see this delivery?) for deliveries with no owner record: one or two upstream reads each, and one unit of the key's RATE_LIMIT_PER_MINUTE when a subscription makes it; by outcome: allowed, denied, failed (the upstream could not say)",
    'outcome',
    () => access && { ...access.checks },
  );
  counted(
    registry,
    'access_checks_withheld_total',
    "Upstream access checks a subscription did not make, for deliveries with no owner record: a deliveryEvents without uids skips that event undelivered, a subscription naming the uid is refused RATE_LIMITED; by reason: subscription (its SUBSCRIPTION_ACCESS_CHECKS of the minute spent), rate_limit (the key's RATE_LIMIT_PER_MINUTE spent)",
    'reason',
    () => access && { ...access.withheld },
  );
  counted(
    registry,
    'subscription_refusals_total',
    'Subscriptions (and, for socket, any operation) refused TOO_MANY_SUBSCRIPTIONS before they started, by the cap that was full: socket (WS_MAX_SUBSCRIPTIONS), key (SUBSCRIPTIONS_PER_KEY), client_token (SUBSCRIPTIONS_PER_CLIENT_TOKEN), address (SUBSCRIPTIONS_PER_ADDRESS)',
    'cap',
    () => subscriptions && { ...subscriptions.counters.refused },
  );
  gauged(
    registry,
    'subscriptions_open',
    'Subscriptions open on this instance, over WebSocket and server-sent events: each holds a slot of SUBSCRIPTIONS_PER_KEY and, as its caller is, SUBSCRIPTIONS_PER_CLIENT_TOKEN and SUBSCRIPTIONS_PER_ADDRESS',
    () => subscriptions?.open ?? 0,
  );
  counted(
    registry,
    'subscription_messages_total',
    'Subscription messages made on this instance, by how: executed (an event executed and serialized once for every subscriber with the same operation, variables and merchant key or client-token scope), shared (that message handed to another of those subscribers without executing it again)',
    'made',
    () => fanout && { executed: fanout.counters.executions, shared: fanout.counters.shared },
  );
  gauged(
    registry,
    'subscription_message_groups',
    'Groups of subscribers on this instance whose messages are executed once for all of them: one per operation, variables and merchant key (or client-token scope) with a subscriber',
    () => fanout?.groups ?? 0,
  );
}

function collectReconciliation(registry: Registry, { reconcile, keyWatch }: MetricSources): void {
  const counters = reconcile?.counters;
  counted(
    registry,
    'reconcile_total',
    'Reconciliation (RECONCILE_INTERVAL_MS, RECONCILE_UNFOLLOWED_INTERVAL_MS): reads of the upstream, by result: read (reads made, of every kind), change (events stored from a read that webhooks had not brought), error (reads that failed and back off), refused (subscriptions ended because the upstream refused their key)',
    'result',
    () =>
      counters && { read: counters.reads, change: counters.changes, error: counters.errors, refused: counters.refused },
  );
  counted(
    registry,
    'key_reconfirmations_total',
    "Re-confirmations of the keys of open subscriptions (KEY_RECONFIRM_INTERVAL_MS), at most one per key per interval, by result: accepted, refused (by both endpoint groups: the key's subscriptions end UNAUTHENTICATED), failed (the upstream could not say; nothing ends) — each one upstream availability call, two when the first group refuses; proven: none asked, another call had proved the key within the interval",
    'result',
    () => keyWatch && { ...keyWatch.counters.confirmations, proven: keyWatch.counters.proven },
  );
  counted(
    registry,
    'key_refused_subscriptions_total',
    "Subscriptions ended UNAUTHENTICATED because a re-confirmation found their key (a client token's: its merchant key) refused by the upstream",
    undefined,
    () => keyWatch?.counters.ended,
  );
  gauged(
    registry,
    'key_reconfirm_keys',
    'Keys with an open subscription on this instance: each is re-confirmed with the upstream at least once per KEY_RECONFIRM_INTERVAL_MS',
    () => keyWatch?.keys ?? 0,
  );
  counted(
    registry,
    'reconcile_reads_total',
    'Reconciliation reads made, by why: followed (a delivery a subscriber of this instance follows, no event for RECONCILE_INTERVAL_MS), unfollowed (an unfinished delivery nobody follows here, its pass every RECONCILE_UNFOLLOWED_INTERVAL_MS), contradiction (an event contradicted its state), confirmation (the grace of its cancel or failure ended)',
    'kind',
    () => counters && { ...counters.byKind },
  );
  gauged(
    registry,
    'reconcile_due_reads',
    'Reconciliation reads due and not made at the last tick: held back by RECONCILE_MAX_READS_PER_SECOND',
    () => reconcile?.counters.due ?? 0,
  );
  gauged(
    registry,
    'reconcile_unfinished_deliveries',
    'Unfinished deliveries the facade knows (booked or read through it within RECONCILE_UNFOLLOWED_WINDOW), as the last pass of each merchant whose key this process holds found them; those of merchants whose key it does not hold (since a restart, until they call) are not counted, nor read',
    () => reconcile?.unfinished?.() ?? 0,
  );
  gauged(
    registry,
    'reconcile_owner_keys',
    'Merchants whose key this process holds in memory (never stored, logged or exported): those whose unfinished deliveries it can read unfollowed',
    () => reconcile?.ownerKeys?.() ?? 0,
  );
  counted(
    registry,
    'reconcile_keys_dropped_total',
    "Merchant keys dropped from memory because the upstream refused them on an unfollowed read: that merchant's deliveries wait until it calls with a key the upstream accepts",
    undefined,
    () => reconcile?.counters.keysDropped,
  );
  gauged(
    registry,
    'reconcile_followed_deliveries',
    'Deliveries a live subscriber of this instance follows: each is read from the upstream when no event has come for RECONCILE_INTERVAL_MS',
    () => reconcile?.followed() ?? 0,
  );
}

function collectState(registry: Registry, { upstreamHealth, owners, documentCache, bus }: MetricSources): void {
  gauged(
    registry,
    'upstream_up',
    'The upstream as the background check last found it: 1 up (it answered, a 401 included), 0 down (unreachable, timing out, 5xx), -1 not checked yet. Readiness never depends on it',
    () => {
      const state = upstreamHealth?.().state ?? 'unknown';
      return state === 'up' ? 1 : state === 'down' ? 0 : -1;
    },
  );
  counted(
    registry,
    'owner_records_learned_total',
    'Owner records written outside a booking (booked deliveries are recorded at booking): a proof (a read by partner reference, a cancel) or, on a key-scoped upstream, a read the upstream allowed; by result: written, failed (the answer stood; the next read asks the upstream again)',
    'result',
    () => owners && { written: owners.counters.recorded, failed: owners.counters.failed },
  );
  gauged(
    registry,
    'owner_cache_bytes',
    'Heap the owner records kept in memory hold by their own estimate; at most 8 MiB (OWNER_CACHE_BYTES in src/access/owners.ts)',
    () => owners?.cached.bytes ?? 0,
  );
  gauged(
    registry,
    'document_cache_bytes',
    'Heap the shared document cache holds, each entry weighed from what it holds (text, syntax tree tokens and nodes, plans, validation errors, generated source of compiled executors); at most GRAPHQL_CACHE_BYTES. Only callers with an accepted key or a client token fill it',
    () => documentCache?.().bytes ?? 0,
  );
  gauged(
    registry,
    'document_cache_entries',
    'Distinct query texts in the shared document cache',
    () => documentCache?.().entries ?? 0,
  );
  gauged(registry, 'subscribers', 'Live subscription listeners on the event bus of this instance', () =>
    bus.listenerCount(),
  );
}

/** Registers every metric read from its owner at a scrape. */
export function registerCollectedMetrics(registry: Registry, sources: MetricSources): void {
  collectUpstream(registry, sources);
  collectWebhooks(registry, sources);
  collectOperations(registry, sources);
  collectSubscriptions(registry, sources);
  collectReconciliation(registry, sources);
  collectState(registry, sources);
}
