// For tests of a webhook receiver that choose every event themselves: the sandbox's own signer and sender,
// without a sandbox around them.
export { DEFAULT_KNOBS } from './knobs.js';
export type { SandboxWebhookEvent } from './representations.js';
export { loadSigningKeys, type SigningKeys } from './signing.js';
export { WebhookSender } from './webhooks.js';
