// Configuration is read here, once, from the environment; nothing else in the
// code base reads process.env. A bad value stops start-up with one line that
// names the variable and says what is wrong with it. Each area's settings, their
// parsers and checks live in config/; this file composes them.
import { accessSettings, type AccessSettings } from './config/access.js';
import { graphqlSettings, type GraphQLSettings } from './config/graphql.js';
import { observabilitySettings, type ObservabilitySettings } from './config/observability.js';
import { type Env } from './config/parse.js';
import { realtimeSettings, type RealtimeSettings } from './config/realtime.js';
import { nodeEnv, serverSettings, type ServerSettings } from './config/server.js';
import { storeSettings, type StoreSettings } from './config/store.js';
import { upstreamSettings, type UpstreamSettings } from './config/upstream.js';
import { webhookSettings, type WebhookSettings } from './config/webhooks.js';

export { MIN_CLIENT_TOKEN_SECRET_LENGTH } from './config/access.js';
export { MIN_METRICS_TOKEN_LENGTH, TRACE_SAMPLERS } from './config/observability.js';
export type { LogFormat, LogLevel, TraceSampler } from './config/observability.js';
export { ConfigError } from './config/parse.js';
export type { RedisSentinelConfig } from './config/store.js';
export { unknownSettings, type UnknownSetting } from './config/unknown-settings.js';
export { AMOUNT_UNITS, READ_SCOPES, SANDBOX_UPSTREAM, SIMULATOR_IN_PRODUCTION } from './config/upstream.js';
export type { AmountUnit, ReadScope, UpstreamConfig } from './config/upstream.js';
export { CONFIG_VARIABLES } from './config/variables.js';
export type { WebhookConfig } from './config/webhooks.js';

export interface Config
  extends
    ServerSettings,
    UpstreamSettings,
    WebhookSettings,
    StoreSettings,
    RealtimeSettings,
    GraphQLSettings,
    AccessSettings,
    ObservabilitySettings {}

/** Parses and checks the environment once; the result is deeply frozen. */
export function loadConfig(env: Env = process.env): Config {
  const production = nodeEnv(env) === 'production';
  const upstream = upstreamSettings(env, production);
  const store = storeSettings(env);
  const shared = store.redisUrl !== undefined || store.redisSentinel !== undefined;
  const server = serverSettings(env, { production, shared });
  const webhooks = webhookSettings(env, { production, upstreamUrl: upstream.upstream.url, port: server.port });
  return deepFreeze({
    ...server,
    ...upstream,
    ...webhooks,
    ...store,
    ...realtimeSettings(env, { webhooksEnabled: webhooks.webhooksEnabled, eventRetentionMs: store.eventRetentionMs }),
    ...graphqlSettings(env, production),
    ...accessSettings(env, { shared }),
    ...observabilitySettings(env, { production, port: server.port, webhookPort: webhooks.webhook.port }),
  });
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}
