// The parts of the request limits that need no server: the per-key token bucket
// on a fake clock, the persisted-operations list, and their configuration.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { PersistedQueryNotFoundError } from '../../src/errors.js';
import { PersistedOperations } from '../../src/pipeline/persisted-operations.js';
import { KeyRateLimiter } from '../../src/access/rate-limit.js';

describe('KeyRateLimiter', () => {
  const clock = () => {
    let now = 0;
    return { now: () => now, advance: (ms: number) => (now += ms) };
  };

  it('lets a key burst up to a minute’s budget, then refuses with the wait until the next token', () => {
    const time = clock();
    const limiter = new KeyRateLimiter(60, time.now);
    for (let i = 0; i < 60; i += 1) expect(limiter.take('sk_a'), `take ${i + 1}`).toBe(0);
    // One token a second at 60 per minute.
    expect(limiter.take('sk_a')).toBe(1);
    time.advance(999);
    expect(limiter.take('sk_a')).toBe(1);
    time.advance(1);
    expect(limiter.take('sk_a')).toBe(0);
    expect(limiter.take('sk_a')).toBe(1);
  });

  it('keeps keys apart', () => {
    const limiter = new KeyRateLimiter(2, clock().now);
    expect([limiter.take('sk_a'), limiter.take('sk_a'), limiter.take('sk_a')]).toEqual([0, 0, 30]);
    expect([limiter.take('sk_b'), limiter.take('sk_b')]).toEqual([0, 0]);
  });

  it('refills to the bucket size and no further', () => {
    const time = clock();
    const limiter = new KeyRateLimiter(6, time.now);
    for (let i = 0; i < 6; i += 1) limiter.take('sk_a');
    time.advance(60 * 60_000);
    const taken = Array.from({ length: 7 }, () => limiter.take('sk_a'));
    expect(taken.filter((wait) => wait === 0)).toHaveLength(6);
  });

  it('forgets idle keys whose bucket is full again, and never holds a key in clear', () => {
    const time = clock();
    const limiter = new KeyRateLimiter(60, time.now);
    for (let i = 0; i < 1000; i += 1) limiter.take(`sk_key_${i}`);
    expect(limiter.size).toBe(1000);
    expect(JSON.stringify([...(limiter as unknown as { buckets: Map<string, unknown> }).buckets.keys()])).not.toContain(
      'sk_key_',
    );
    time.advance(61_000);
    limiter.take('sk_fresh');
    expect(limiter.size).toBe(1);
  });

  it('limits nothing at 0', () => {
    const limiter = new KeyRateLimiter(0, clock().now);
    for (let i = 0; i < 10_000; i += 1) expect(limiter.take('sk_a')).toBe(0);
    expect(limiter.size).toBe(0);
  });
});

describe('PersistedOperations', () => {
  const list = new PersistedOperations({
    abc: '{ availability { group } }',
    def: 'subscription { deliveryEvents { uid } }',
  });

  it('resolves a listed hash in Apollo’s form, and nothing when no hash is sent', () => {
    expect(list.documentFor({ extensions: { persistedQuery: { version: 1, sha256Hash: 'abc' } } })).toBe(
      '{ availability { group } }',
    );
    expect(list.documentFor({})).toBeUndefined();
    expect(list.documentFor({ extensions: null })).toBeUndefined();
    expect(list.documentFor({ extensions: { other: 1 } })).toBeUndefined();
  });

  it.each(['nope', '__proto__', 'constructor', 'toString', 7, null])('refuses the hash %j', (hash) => {
    expect(() => list.documentFor({ extensions: { persistedQuery: { sha256Hash: hash } } })).toThrow(
      PersistedQueryNotFoundError,
    );
  });

  it('allows exactly the listed texts', () => {
    expect(list.allows('{ availability { group } }')).toBe(true);
    expect(list.allows('{ availability { group }}')).toBe(false);
    expect(list.allows('')).toBe(false);
  });
});

describe('configuration of the request limits', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-limits-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const file = (name: string, text: string) => {
    const at = path.join(dir, name);
    writeFileSync(at, text);
    return at;
  };
  const problem = (env: Record<string, string>): ConfigError => {
    try {
      loadConfig(env);
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      return error as ConfigError;
    }
    throw new Error(`no ConfigError for ${JSON.stringify(env)}`);
  };

  it('has the documented defaults', () => {
    const config = loadConfig({});
    expect(config.graphql).toMatchObject({
      introspection: true,
      maxBodyBytes: 1_048_576,
      persistedOperations: undefined,
      rateLimitPerMinute: 6000,
    });
    expect(config.realtime.maxSubscriptionsPerSocket).toBe(100);
  });

  it('turns introspection off in production unless GRAPHQL_INTROSPECTION says otherwise', () => {
    expect(loadConfig({ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox' }).graphql.introspection).toBe(false);
    expect(
      loadConfig({ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox', GRAPHQL_INTROSPECTION: 'true' }).graphql
        .introspection,
    ).toBe(true);
    expect(loadConfig({ GRAPHQL_INTROSPECTION: 'FALSE' }).graphql.introspection).toBe(false);
    expect(problem({ GRAPHQL_INTROSPECTION: 'yes' }).variable).toBe('GRAPHQL_INTROSPECTION');
  });

  it('serves the federation SDL outside production, and in production only as introspection is or FEDERATION_SDL says', () => {
    expect(loadConfig({}).graphql.federationSdl).toBe(true);
    expect(loadConfig({ GRAPHQL_INTROSPECTION: 'false' }).graphql.federationSdl).toBe(true);
    expect(loadConfig({ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox' }).graphql.federationSdl).toBe(false);
    expect(
      loadConfig({ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox', GRAPHQL_INTROSPECTION: 'true' }).graphql
        .federationSdl,
    ).toBe(true);
    expect(
      loadConfig({ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox', FEDERATION_SDL: 'TRUE' }).graphql.federationSdl,
    ).toBe(true);
    expect(
      loadConfig({
        NODE_ENV: 'production',
        UPSTREAM_URL: 'sandbox',
        GRAPHQL_INTROSPECTION: 'true',
        FEDERATION_SDL: 'false',
      }).graphql.federationSdl,
    ).toBe(false);
    expect(loadConfig({ FEDERATION_SDL: 'false' }).graphql.federationSdl).toBe(false);
    const refused = problem({ FEDERATION_SDL: 'yes' });
    expect(refused.variable).toBe('FEDERATION_SDL');
    expect(refused.message).toBe('FEDERATION_SDL: expected one of true, false, got "yes"');
  });

  it.each([
    ['RATE_LIMIT_PER_MINUTE', '-1'],
    ['RATE_LIMIT_PER_MINUTE', 'lots'],
    ['GRAPHQL_MAX_BODY_BYTES', '10'],
    ['WS_MAX_SUBSCRIPTIONS', '0'],
  ])('%s=%j is refused', (name, value) => {
    expect(problem({ [name]: value }).variable).toBe(name);
  });

  it('reads the persisted operations file', () => {
    const at = file('ops.json', JSON.stringify({ abc: '{ availability { group } }' }));
    expect(loadConfig({ PERSISTED_OPERATIONS_FILE: at }).graphql.persistedOperations).toEqual({
      file: at,
      operations: { abc: '{ availability { group } }' },
    });
  });

  it.each([
    ['missing.json', undefined],
    ['not-json.json', '{ nope'],
    ['array.json', '["{ a }"]'],
    ['empty.json', '{}'],
    ['not-text.json', '{"abc": 5}'],
    ['blank.json', '{"abc": "  "}'],
  ])('refuses the persisted operations file %s', (name, text) => {
    const at = text === undefined ? path.join(dir, name) : file(name, text);
    const error = problem({ PERSISTED_OPERATIONS_FILE: at });
    expect(error.variable).toBe('PERSISTED_OPERATIONS_FILE');
    expect(error.message).toContain(at);
  });
});
