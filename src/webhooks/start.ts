// The webhook receiver, when a key is known to verify webhooks with: the
// configured one (WEBHOOK_PUBLIC_KEY_FILE, WEBHOOK_ISSUER), or the embedded
// sandbox's when it is the upstream. Without one (or with WEBHOOKS=off) it says so at start: the front
// door answers webhooks 503 and subscriptions rely on polling. Production without a key stops in loadConfig.
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { EventBus } from '../realtime/bus.js';
import type { Store } from '../store/store.js';
import type { AppendBatcher } from './group-commit.js';
import { createWebhookReceiver, type WebhookReceiver } from './receiver.js';
import { createWebhookVerifier } from './verify.js';

export interface WebhookDeps {
  store: Store;
  bus: EventBus;
  logger: Logger;
  /** Shared with reconciliation: one log order. */
  batcher: AppendBatcher;
}

export async function startWebhooks(
  config: Config,
  sandbox: { publicKeyPem: string; issuer: string } | undefined,
  { store, bus, logger, batcher }: WebhookDeps,
): Promise<WebhookReceiver | undefined> {
  if (config.webhooksOff) {
    logger.info(
      `WEBHOOKS=off: polling alone, subscriptions see what reads of the upstream show every ${config.realtime.reconcileIntervalMs} ms (RECONCILE_INTERVAL_MS); the webhook receiver answers 503`,
    );
    return undefined;
  }
  // Webhooks verify against the configured key, or the sandbox's when it is the upstream.
  const publicKeyPem = config.webhook.publicKeyPems ?? (sandbox ? [sandbox.publicKeyPem] : undefined);
  const issuer = config.webhook.issuer ?? sandbox?.issuer;
  const verifier =
    publicKeyPem && issuer
      ? await createWebhookVerifier(publicKeyPem, issuer, {
          clockToleranceSeconds: config.webhook.clockToleranceSeconds,
        })
      : undefined;
  const receiver =
    verifier &&
    createWebhookReceiver({ verifier, store, bus, logger, bodyTimeoutMs: config.webhook.bodyTimeoutMs, batcher });
  if (!receiver) {
    logger.warn(
      config.realtime.reconcileIntervalMs > 0
        ? `no WEBHOOK_PUBLIC_KEY_FILE (WEBHOOKS=off says polling alone is meant): polling alone, subscriptions see what reads of the upstream show every ${config.realtime.reconcileIntervalMs} ms (RECONCILE_INTERVAL_MS); the webhook receiver answers 503`
        : 'no WEBHOOK_PUBLIC_KEY_FILE and RECONCILE_INTERVAL_MS=0: subscriptions see no change after their first state; the webhook receiver answers 503',
    );
  }
  return receiver;
}
