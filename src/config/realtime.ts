// Realtime: what one subscriber, socket, key, client token and address may hold open, and how followed and
// unfollowed deliveries are reconciled with the upstream.
import { duration, integer, type Env } from './parse.js';

export interface RealtimeConfig {
  /** Events one subscriber may have waiting (location updates coalesce) before it is cut off. */
  readonly maxPendingEvents: number;
  /** Operations one WebSocket may run at once. */
  readonly maxSubscriptionsPerSocket: number;
  /**
   * SUBSCRIPTIONS_PER_KEY: subscriptions open at once per merchant key on this instance, its client tokens' included
   * (0: no cap).
   */
  readonly subscriptionsPerKey: number;
  /** SUBSCRIPTIONS_PER_CLIENT_TOKEN: subscriptions open at once per client token on this instance (0: no cap). */
  readonly subscriptionsPerClientToken: number;
  /**
   * SUBSCRIPTIONS_PER_ADDRESS: subscriptions of client tokens and keys the upstream has not accepted, open at once
   * per client address on this instance (0: no cap).
   */
  readonly subscriptionsPerAddress: number;
  /**
   * Upstream access checks one subscription may make per minute for the events
   * it meets (deliveries with no owner record); past them, and past the key's
   * RATE_LIMIT_PER_MINUTE that each check draws on, those events are skipped.
   */
  readonly accessChecksPerMinute: number;
  /**
   * RECONCILE_INTERVAL_MS: a delivery followed by a live subscriber of this
   * instance is read from the upstream when no event has come for this long
   * (0: never). Shorter by default when no webhooks can arrive.
   */
  readonly reconcileIntervalMs: number;
  /**
   * RECONCILE_MAX_READS_PER_SECOND: most reconciliation reads this instance makes per second, whatever it follows.
   */
  readonly reconcileMaxReadsPerSecond: number;
  /**
   * RECONCILE_UNFOLLOWED_INTERVAL_MS: each unfinished delivery the facade knows
   * is read this often though nobody follows it (0: never). Ten RECONCILE_INTERVAL_MS by default.
   */
  readonly reconcileUnfollowedIntervalMs: number;
  /**
   * RECONCILE_UNFOLLOWED_WINDOW: only deliveries the facade recorded (booked, read) this recently are read
   * unfollowed; at most EVENT_RETENTION.
   */
  readonly reconcileUnfollowedWindowMs: number;
  /**
   * FINALITY_GRACE_MS: a cancel or failure with no evidence of pickup stays open
   * to later evidence (a return, a second attempt) this long; then a read that
   * still says so makes it final.
   */
  readonly finalityGraceMs: number;
  /**
   * KEY_RECONFIRM_INTERVAL_MS: the key of every open subscription of this
   * instance is re-confirmed with the upstream at least this often (one call
   * per key, skipped when another call proved it within the interval).
   */
  readonly keyReconfirmIntervalMs: number;
}

export interface RealtimeSettings {
  readonly realtime: RealtimeConfig;
}

/**
 * KEY_RECONFIRM_INTERVAL_MS's default is RECONCILE_INTERVAL_MS, but never longer than this: a revoked key streams at
 * most this long.
 */
const MAX_KEY_RECONFIRM_DEFAULT_MS = 30_000;

/** Subscription caps and reconciliation; both defaults follow from whether webhooks arrive. */
export function realtimeSettings(
  env: Env,
  { webhooksEnabled, eventRetentionMs }: { webhooksEnabled: boolean; eventRetentionMs: number },
): RealtimeSettings {
  // Without webhooks, reads are all a subscriber gets: poll more often.
  const reconcileIntervalMs = integer(env, 'RECONCILE_INTERVAL_MS', webhooksEnabled ? 30_000 : 5_000, 0, 86_400_000);
  const realtime: RealtimeConfig = {
    maxPendingEvents: integer(env, 'SUBSCRIBER_MAX_PENDING', 1000, 1, 1_000_000),
    maxSubscriptionsPerSocket: integer(env, 'WS_MAX_SUBSCRIPTIONS', 100, 1, 100_000),
    subscriptionsPerKey: integer(env, 'SUBSCRIPTIONS_PER_KEY', 5000, 0, 10_000_000),
    subscriptionsPerClientToken: integer(env, 'SUBSCRIPTIONS_PER_CLIENT_TOKEN', 20, 0, 1_000_000),
    subscriptionsPerAddress: integer(env, 'SUBSCRIPTIONS_PER_ADDRESS', 500, 0, 10_000_000),
    accessChecksPerMinute: integer(env, 'SUBSCRIPTION_ACCESS_CHECKS', 50, 0, 1_000_000),
    reconcileIntervalMs,
    reconcileMaxReadsPerSecond: integer(env, 'RECONCILE_MAX_READS_PER_SECOND', 100, 1, 100_000),
    reconcileUnfollowedIntervalMs: integer(
      env,
      'RECONCILE_UNFOLLOWED_INTERVAL_MS',
      10 * reconcileIntervalMs,
      0,
      864_000_000,
    ),
    reconcileUnfollowedWindowMs: Math.min(duration(env, 'RECONCILE_UNFOLLOWED_WINDOW', '7d', 1_000), eventRetentionMs),
    finalityGraceMs: integer(env, 'FINALITY_GRACE_MS', 120_000, 0, 86_400_000),
    // Revocation ends streams whether or not deliveries are polled: RECONCILE_INTERVAL_MS, at most 30 s, even when it
    // is 0 (off).
    keyReconfirmIntervalMs: integer(
      env,
      'KEY_RECONFIRM_INTERVAL_MS',
      reconcileIntervalMs > 0
        ? Math.min(reconcileIntervalMs, MAX_KEY_RECONFIRM_DEFAULT_MS)
        : MAX_KEY_RECONFIRM_DEFAULT_MS,
      100,
      600_000,
    ),
  };
  return { realtime };
}
