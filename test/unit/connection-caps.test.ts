// The connection caps' settings and their defaults: per address a quarter of the
// slots (none behind proxies, whose connections carry many clients), an eighth
// kept for webhooks (at most 64), each bad value named.
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { connectionCaps } from '../../src/http/server-limits.js';

const capsOf = (env: Record<string, string>) => {
  const config = loadConfig(env);
  return connectionCaps({ ...config.server, maxTokenBytes: config.webhook.maxTokenBytes });
};

describe('connection caps', () => {
  it('default to a quarter of MAX_CONNECTIONS per address and an eighth, at most 64, for webhooks', () => {
    expect(capsOf({ MAX_CONNECTIONS: '60' })).toEqual({ maxConnections: 60, perAddress: 15, webhookSlots: 8 });
    expect(capsOf({ MAX_CONNECTIONS: '16000' })).toEqual({
      maxConnections: 16_000,
      perAddress: 4_000,
      webhookSlots: 64,
    });
    // Without MAX_CONNECTIONS, from the descriptor limit.
    const fromLimit = capsOf({});
    expect(fromLimit.perAddress).toBe(Math.floor(fromLimit.maxConnections / 4));
  });

  it('have no cap per address behind TRUST_PROXY unless one is set', () => {
    expect(capsOf({ MAX_CONNECTIONS: '60', TRUST_PROXY: 'true' }).perAddress).toBe(0);
    expect(capsOf({ MAX_CONNECTIONS: '60', TRUST_PROXY: '2', MAX_CONNECTIONS_PER_ADDRESS: '40' }).perAddress).toBe(40);
    expect(capsOf({ MAX_CONNECTIONS: '60', MAX_CONNECTIONS_PER_ADDRESS: '0' }).perAddress).toBe(0);
  });

  it('take WEBHOOK_CONNECTIONS up to half of MAX_CONNECTIONS, and name either variable when it is wrong', () => {
    expect(capsOf({ MAX_CONNECTIONS: '60', WEBHOOK_CONNECTIONS: '30' }).webhookSlots).toBe(30);
    expect(capsOf({ MAX_CONNECTIONS: '60', WEBHOOK_CONNECTIONS: '0' }).webhookSlots).toBe(0);
    expect(() => loadConfig({ MAX_CONNECTIONS: '60', WEBHOOK_CONNECTIONS: '31' })).toThrow(
      /^WEBHOOK_CONNECTIONS: 31 is more than half of MAX_CONNECTIONS \(60\)$/,
    );
    expect(() => loadConfig({ WEBHOOK_CONNECTIONS: '-1' })).toThrow(ConfigError);
    expect(() => loadConfig({ MAX_CONNECTIONS_PER_ADDRESS: 'many' })).toThrow(
      /^MAX_CONNECTIONS_PER_ADDRESS: expected a whole number/,
    );
  });
});
