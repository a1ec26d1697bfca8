// loadConfig(env) with explicit environments: the documented defaults, a deeply
// frozen result, and one ConfigError line naming the variable for every bad value.
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES, ConfigError, loadConfig, unknownSettings } from '../../src/config.js';

type Env = Record<string, string | undefined>;

let dir: string;
let publicKeyFile: string;
let publicKeyPem: string;
let privateKeyFile: string;
let pkcs1PublicKeyFile: string;
let notAKeyFile: string;

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-config-'));
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  publicKeyPem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  publicKeyFile = path.join(dir, 'webhook.pub.pem');
  writeFileSync(publicKeyFile, publicKeyPem);
  privateKeyFile = path.join(dir, 'webhook.key.pem');
  writeFileSync(privateKeyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
  pkcs1PublicKeyFile = path.join(dir, 'webhook.pkcs1.pem');
  writeFileSync(pkcs1PublicKeyFile, publicKey.export({ type: 'pkcs1', format: 'pem' }).toString());
  notAKeyFile = path.join(dir, 'notes.txt');
  writeFileSync(notAKeyFile, 'just some text\n');
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs loadConfig and returns the ConfigError it must throw. */
function configError(env: Env): ConfigError {
  try {
    loadConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
}

/** The failure is one line that starts with the variable's name. */
function expectNamed(error: ConfigError, variable: string): void {
  expect(error.variable).toBe(variable);
  expect(error.name).toBe('ConfigError');
  expect(error.message.startsWith(`${variable}: `)).toBe(true);
  expect(error.message).not.toMatch(/[\r\n]/);
  expect(error.message.length).toBeGreaterThan(variable.length + 2);
}

const UPSTREAM = { UPSTREAM_URL: 'https://deliveries.example.com/api/v1', PLATFORM_ID: 'acme-platform' };

describe('defaults', () => {
  it('an empty environment gives the documented defaults', () => {
    const config = loadConfig({});
    expect(config.port).toBe(4000);
    expect(config.host).toBe('127.0.0.1');
    expect(config.webhook.path).toBe('/webhooks');
    expect(config.dataDir).toBe(path.resolve('./data'));
    expect(path.isAbsolute(config.dataDir)).toBe(true);
    expect(config.upstream.timeoutMs).toBe(10_000);
    expect(config.upstream.amountUnit).toBe('cents');
    expect(config.upstream.itemPriceUnit).toBe('cents');
    expect(config.upstream.quoteAmountUnit).toBe('major');
    expect(config.webhook.clockToleranceSeconds).toBe(30);
    expect(config.upstream.url).toBeUndefined();
    expect(config.upstream.platformId).toBeUndefined();
    expect(config.redisUrl).toBeUndefined();
    expect(config.webhook.publicKeyPems).toBeUndefined();
    expect(config.webhook.publicKeyFile).toBeUndefined();
    expect(config.webhook.issuer).toBeUndefined();
  });

  it('blank values count as unset', () => {
    const config = loadConfig({
      PORT: '',
      HOST: '  ',
      UPSTREAM_URL: '',
      WEBHOOK_PATH: ' ',
      UPSTREAM_AMOUNT_UNIT: '',
      REDIS_URL: '',
    });
    expect(config.port).toBe(4000);
    expect(config.host).toBe('127.0.0.1');
    expect(config.upstream.url).toBeUndefined();
    expect(config.webhook.path).toBe('/webhooks');
    expect(config.upstream.amountUnit).toBe('cents');
    expect(config.redisUrl).toBeUndefined();
  });

  it('does not read process.env when given an env object', () => {
    const saved = process.env.PORT;
    process.env.PORT = '5999';
    try {
      expect(loadConfig({}).port).toBe(4000);
    } finally {
      if (saved === undefined) delete process.env.PORT;
      else process.env.PORT = saved;
    }
  });
});

describe('accepted values', () => {
  it('reads every documented variable', () => {
    const config = loadConfig({
      PORT: '0',
      HOST: '0.0.0.0',
      UPSTREAM_URL: 'https://deliveries.example.com/api/v1/',
      PLATFORM_ID: 'acme-platform',
      WEBHOOK_PUBLIC_KEY_FILE: publicKeyFile,
      WEBHOOK_ISSUER: 'lastmile',
      WEBHOOK_PATH: '/hooks/lastmile',
      DATA_DIR: path.join(dir, 'store'),
      UPSTREAM_TIMEOUT_MS: '2500',
      UPSTREAM_AMOUNT_UNIT: 'MAJOR',
      REDIS_URL: 'rediss://cache.example.com:6380/0',
      CLIENT_TOKEN_SECRET: `${'a'.repeat(32)}, ${'b'.repeat(40)}`,
    });
    expect(config.port).toBe(0);
    expect(config.host).toBe('0.0.0.0');
    expect(config.upstream.url).toBe('https://deliveries.example.com/api/v1');
    expect(config.upstream.platformId).toBe('acme-platform');
    expect(config.webhook.publicKeyPems).toEqual([publicKeyPem]);
    expect(config.webhook.publicKeyFile).toBe(publicKeyFile);
    expect(config.webhook.issuer).toBe('lastmile');
    expect(config.webhook.path).toBe('/hooks/lastmile');
    expect(config.dataDir).toBe(path.join(dir, 'store'));
    expect(config.upstream.timeoutMs).toBe(2500);
    expect(config.upstream.amountUnit).toBe('major');
    expect(config.redisUrl).toBe('rediss://cache.example.com:6380/0');
    expect(config.clientTokenSecrets).toEqual(['a'.repeat(32), 'b'.repeat(40)]);
  });

  it('resolves a relative DATA_DIR against the working directory', () => {
    expect(loadConfig({ DATA_DIR: 'var/store' }).dataDir).toBe(path.resolve('var/store'));
  });

  it('accepts a plain-http upstream with a port', () => {
    expect(loadConfig({ UPSTREAM_URL: 'http://127.0.0.1:8080/api/v1', PLATFORM_ID: 'p1' }).upstream.url).toBe(
      'http://127.0.0.1:8080/api/v1',
    );
  });
});

describe('amount units and the webhook clock tolerance', () => {
  it('item prices follow UPSTREAM_AMOUNT_UNIT unless UPSTREAM_ITEM_PRICE_UNIT is set', () => {
    expect(loadConfig({ UPSTREAM_AMOUNT_UNIT: 'major' }).upstream).toMatchObject({
      amountUnit: 'major',
      itemPriceUnit: 'major',
    });
    expect(loadConfig({ UPSTREAM_AMOUNT_UNIT: 'cents', UPSTREAM_ITEM_PRICE_UNIT: 'major' }).upstream).toMatchObject({
      amountUnit: 'cents',
      itemPriceUnit: 'major',
    });
    expect(loadConfig({ UPSTREAM_AMOUNT_UNIT: 'major', UPSTREAM_ITEM_PRICE_UNIT: 'Cents' }).upstream).toMatchObject({
      amountUnit: 'major',
      itemPriceUnit: 'cents',
    });
    expect(loadConfig({ UPSTREAM_ITEM_PRICE_UNIT: ' ' }).upstream.itemPriceUnit).toBe('cents');
  });

  it('the quote amounts have a unit of their own, major by default whatever UPSTREAM_AMOUNT_UNIT says', () => {
    expect(loadConfig({ UPSTREAM_AMOUNT_UNIT: 'cents' }).upstream.quoteAmountUnit).toBe('major');
    expect(loadConfig({ UPSTREAM_QUOTE_AMOUNT_UNIT: 'cents' }).upstream).toMatchObject({
      quoteAmountUnit: 'cents',
      amountUnit: 'cents',
      itemPriceUnit: 'cents',
    });
    expect(
      loadConfig({ UPSTREAM_QUOTE_AMOUNT_UNIT: 'MAJOR', UPSTREAM_AMOUNT_UNIT: 'major' }).upstream.quoteAmountUnit,
    ).toBe('major');
  });

  it('WEBHOOK_CLOCK_TOLERANCE_SECONDS from 0 to 3600', () => {
    expect(loadConfig({ WEBHOOK_CLOCK_TOLERANCE_SECONDS: '0' }).webhook.clockToleranceSeconds).toBe(0);
    expect(loadConfig({ WEBHOOK_CLOCK_TOLERANCE_SECONDS: '5' }).webhook.clockToleranceSeconds).toBe(5);
    expect(loadConfig({ WEBHOOK_CLOCK_TOLERANCE_SECONDS: '3600' }).webhook.clockToleranceSeconds).toBe(3600);
  });

  it("re-confirms subscriptions' keys every RECONCILE_INTERVAL_MS by default, at most every 30 s, also when reconciliation is off", () => {
    expect(loadConfig({}).realtime.keyReconfirmIntervalMs).toBe(30_000);
    expect(loadConfig({ ...UPSTREAM }).realtime.keyReconfirmIntervalMs).toBe(5_000);
    expect(loadConfig({ RECONCILE_INTERVAL_MS: '2000' }).realtime.keyReconfirmIntervalMs).toBe(2_000);
    expect(loadConfig({ RECONCILE_INTERVAL_MS: '120000' }).realtime.keyReconfirmIntervalMs).toBe(30_000);
    expect(loadConfig({ RECONCILE_INTERVAL_MS: '0' }).realtime.keyReconfirmIntervalMs).toBe(30_000);
    expect(
      loadConfig({ RECONCILE_INTERVAL_MS: '0', KEY_RECONFIRM_INTERVAL_MS: '600000' }).realtime.keyReconfirmIntervalMs,
    ).toBe(600_000);
  });

  it('remembers a refused key for 5 s by default, 0 to 60 s', () => {
    expect(loadConfig({}).upstream.keyRefusalMemoryMs).toBe(5_000);
    expect(loadConfig({ KEY_REFUSAL_MEMORY_MS: '0' }).upstream.keyRefusalMemoryMs).toBe(0);
    expect(loadConfig({ KEY_REFUSAL_MEMORY_MS: '60000' }).upstream.keyRefusalMemoryMs).toBe(60_000);
  });

  it.each([
    ['KEY_RECONFIRM_INTERVAL_MS', '0'],
    ['KEY_RECONFIRM_INTERVAL_MS', '600001'],
    ['KEY_REFUSAL_MEMORY_MS', '60001'],
    ['UPSTREAM_ITEM_PRICE_UNIT', 'dollars'],
    ['UPSTREAM_QUOTE_AMOUNT_UNIT', 'pennies'],
    ['WEBHOOK_CLOCK_TOLERANCE_SECONDS', '-1'],
    ['WEBHOOK_CLOCK_TOLERANCE_SECONDS', '3601'],
    ['WEBHOOK_CLOCK_TOLERANCE_SECONDS', '1.5'],
    ['WEBHOOK_CLOCK_TOLERANCE_SECONDS', 'thirty'],
  ])('%s=%j is refused, naming it', (name, value) => {
    expectNamed(configError({ [name]: value }), name);
  });
});

describe('the embedded sandbox', () => {
  const TOKEN = 'Qm2Vx7Lp0Rt5Wz9Kd4Nh8Bs1';

  it('listens on loopback unless told, whatever HOST says, and takes its milestone pace from the sandbox', () => {
    const config = loadConfig({ HOST: '0.0.0.0' });
    expect(config.sandbox.host).toBe('127.0.0.1');
    expect(config.sandbox.controlToken).toBeUndefined();
    expect(config.sandbox.stepMs).toBe(3000);
  });

  it('beyond loopback needs SANDBOX_CONTROL_TOKEN, and takes it', () => {
    for (const host of ['0.0.0.0', '::', '192.168.1.20']) {
      const error = configError({ SANDBOX_HOST: host });
      expectNamed(error, 'SANDBOX_CONTROL_TOKEN');
      expect(error.message).toContain(`SANDBOX_HOST=${host}`);
    }
    const config = loadConfig({ SANDBOX_HOST: '0.0.0.0', SANDBOX_CONTROL_TOKEN: TOKEN });
    expect(config.sandbox).toMatchObject({ host: '0.0.0.0', controlToken: TOKEN });
    // A real upstream starts no sandbox: nothing to guard.
    expect(loadConfig({ SANDBOX_HOST: '0.0.0.0', ...UPSTREAM }).sandbox.host).toBe('0.0.0.0');
  });

  it('refuses a short control token, or one with whitespace, without echoing it', () => {
    for (const token of ['Zq7Vd93LmZ0pX4t', 'Zq7Vd93L mZ0pX4t8wKc2']) {
      const error = configError({ SANDBOX_CONTROL_TOKEN: token });
      expectNamed(error, 'SANDBOX_CONTROL_TOKEN');
      expect(error.message).not.toContain(token.slice(0, 8));
    }
  });
});

describe('the upstream in production', () => {
  it('is required: a production start without UPSTREAM_URL is refused, naming it and the simulator setting', () => {
    const error = configError({ NODE_ENV: 'production' });
    expectNamed(error, 'UPSTREAM_URL');
    expect(error.message).toContain('UPSTREAM_URL=sandbox');
  });

  it('may be the simulator when asked for in so many words, in production or not', () => {
    for (const env of [{ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox' }, { UPSTREAM_URL: 'Sandbox' }, {}]) {
      const config = loadConfig(env);
      expect(config.upstream.url, JSON.stringify(env)).toBeUndefined();
      expect(config.webhooksEnabled).toBe(true);
    }
    expect(
      loadConfig({ NODE_ENV: 'production', ...UPSTREAM, WEBHOOK_PUBLIC_KEY_FILE: publicKeyFile, WEBHOOK_ISSUER: 'x' })
        .upstream.url,
    ).toBe(UPSTREAM.UPSTREAM_URL);
  });
});

describe('NODE_ENV', () => {
  it('takes production, development or test; unset is development', () => {
    expect(loadConfig({}).production).toBe(false);
    expect(loadConfig({ NODE_ENV: 'development' }).production).toBe(false);
    expect(loadConfig({ NODE_ENV: 'test' }).production).toBe(false);
    expect(loadConfig({ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox' }).production).toBe(true);
  });

  it.each([
    ['prod', 'production'],
    ['Production', 'production'],
    ['PRODUCTION', 'production'],
    ['produciton', 'production'],
    ['staging', 'production'],
    ['live', 'production'],
    ['dev', 'development'],
    ['develpment', 'development'],
    ['local', 'development'],
    ['testing', 'test'],
    ['tset', 'test'],
  ])('stops the start on NODE_ENV=%s, naming %s as the closest', (value, closest) => {
    const error = configError({ NODE_ENV: value, UPSTREAM_URL: 'sandbox' });
    expectNamed(error, 'NODE_ENV');
    expect(error.message).toBe(
      `NODE_ENV: expected production, development or test, got "${value}"; did you mean NODE_ENV=${closest}?`,
    );
  });
});

describe('webhooks in production', () => {
  const KEYED = { WEBHOOK_PUBLIC_KEY_FILE: '', WEBHOOK_ISSUER: 'lastmile' };
  beforeAll(() => (KEYED.WEBHOOK_PUBLIC_KEY_FILE = publicKeyFile));

  it('an UPSTREAM_URL without WEBHOOK_PUBLIC_KEY_FILE stops the start, naming it and WEBHOOKS=off', () => {
    const error = configError({ NODE_ENV: 'production', ...UPSTREAM });
    expectNamed(error, 'WEBHOOK_PUBLIC_KEY_FILE');
    expect(error.message).toBe(
      "WEBHOOK_PUBLIC_KEY_FILE: required in production (NODE_ENV=production) when UPSTREAM_URL is set: the PEM file of the upstream's webhook signing key (with WEBHOOK_ISSUER), or WEBHOOKS=off to follow deliveries by polling alone on purpose",
    );
  });

  it('WEBHOOKS=off chooses polling alone in so many words: no webhooks, reads every 5 s', () => {
    const config = loadConfig({ NODE_ENV: 'production', ...UPSTREAM, WEBHOOKS: 'off' });
    expect(config.webhooksEnabled).toBe(false);
    expect(config.webhooksOff).toBe(true);
    expect(config.realtime.reconcileIntervalMs).toBe(5_000);
  });

  it('with the key, webhooks are on; WEBHOOKS=off beside a key is a contradiction that stops the start', () => {
    expect(loadConfig({ NODE_ENV: 'production', ...UPSTREAM, ...KEYED }).webhooksEnabled).toBe(true);
    expect(loadConfig({ NODE_ENV: 'production', ...UPSTREAM, ...KEYED, WEBHOOKS: 'on' }).webhooksEnabled).toBe(true);
    expectNamed(configError({ ...UPSTREAM, ...KEYED, WEBHOOKS: 'off' }), 'WEBHOOKS');
  });

  it('outside production a missing key still means polling alone (with a warning at start), unless WEBHOOKS=on', () => {
    const config = loadConfig({ ...UPSTREAM });
    expect(config.webhooksEnabled).toBe(false);
    expect(config.webhooksOff).toBe(false);
    expect(configError({ ...UPSTREAM, WEBHOOKS: 'on' }).message).toMatch(
      /^WEBHOOK_PUBLIC_KEY_FILE: required with WEBHOOKS=on when UPSTREAM_URL is set/,
    );
    expectNamed(configError({ WEBHOOKS: 'no' }), 'WEBHOOKS');
  });

  it('the embedded sandbox signs with a key the facade knows; WEBHOOKS=off turns even those off', () => {
    expect(loadConfig({ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox' }).webhooksEnabled).toBe(true);
    expect(loadConfig({ UPSTREAM_URL: 'sandbox', WEBHOOKS: 'off' }).webhooksEnabled).toBe(false);
  });
});

describe('settings that look like ours but are not', () => {
  it('are named with the closest known name: misspelled, shortened, or in lower case', () => {
    expect(
      unknownSettings({
        REDIS_ULR: 'redis://x',
        UPSTREM_URL: 'https://x',
        UPSTREAM_TIMEOUT: '5000',
        WEBHOOK_PUBLIC_KEY: '/k.pem',
        SANDBOX_STEPS_MS: '10',
        GRAPHQL_INTROSPECT: 'true',
        RECONCILE_INTERVAL: '5',
        redis_url: 'redis://x',
      }),
    ).toEqual([
      { variable: 'REDIS_ULR', closest: 'REDIS_URL' },
      { variable: 'UPSTREM_URL', closest: 'UPSTREAM_URL' },
      { variable: 'UPSTREAM_TIMEOUT', closest: 'UPSTREAM_TIMEOUT_MS' },
      { variable: 'WEBHOOK_PUBLIC_KEY', closest: 'WEBHOOK_PUBLIC_KEY_FILE' },
      { variable: 'SANDBOX_STEPS_MS', closest: 'SANDBOX_STEP_MS' },
      { variable: 'GRAPHQL_INTROSPECT', closest: 'GRAPHQL_INTROSPECTION' },
      { variable: 'RECONCILE_INTERVAL', closest: 'RECONCILE_INTERVAL_MS' },
      { variable: 'redis_url', closest: 'REDIS_URL' },
    ]);
  });

  it('leaves our own settings and the rest of a shared environment alone', () => {
    const ours = Object.fromEntries(CONFIG_VARIABLES.map((variable) => [variable.name, 'x']));
    const shared = {
      HOME: '/root',
      PATH: '/usr/bin',
      HOSTNAME: 'box',
      TERM: 'xterm',
      NODE_OPTIONS: '--max-old-space-size=512',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      SSH_AUTH_SOCK: '/tmp/s',
      LANG: 'C.UTF-8',
      DATA_PATH: '/srv',
      MAX_WORKERS: '4',
      npm_lifecycle_event: 'start',
    };
    // The project's own test and bench variables, which the processes its tests start inherit.
    const tooling = { REDIS_TEST_URL: 'redis://127.0.0.1:6379', REDIS_SERVER_DIR: '/tmp/r', WS_LEAK_CYCLES: '10' };
    expect(unknownSettings({ ...ours, ...shared, ...tooling })).toEqual([]);
  });

  it('does not change what loadConfig accepts', () => {
    expect(loadConfig({ REDIS_ULR: 'redis://x' }).redisUrl).toBeUndefined();
  });
});

describe('the result is deeply frozen', () => {
  it('freezes the config and every nested object', () => {
    const config = loadConfig({ ...UPSTREAM, WEBHOOK_PUBLIC_KEY_FILE: publicKeyFile, WEBHOOK_ISSUER: 'lastmile' });
    expect(Object.isFrozen(config)).toBe(true);
    for (const inner of [config.upstream, config.webhook, config.graphql, config.sandbox])
      expect(Object.isFrozen(inner)).toBe(true);
  });

  it('refuses writes at any depth', () => {
    const config = loadConfig({});
    // ES modules run in strict mode, so writes to frozen objects throw.
    expect(() => {
      (config as { port: number }).port = 1;
    }).toThrow(TypeError);
    expect(() => {
      (config.upstream as { timeoutMs: number }).timeoutMs = 1;
    }).toThrow(TypeError);
    expect(() => {
      (config.webhook as { path: string }).path = '/graphql';
    }).toThrow(TypeError);
    expect(() => {
      (config.graphql as { maxBatchSize: number }).maxBatchSize = 1;
    }).toThrow(TypeError);
    expect(config.port).toBe(4000);
    expect(config.upstream.timeoutMs).toBe(10_000);
    expect(config.webhook.path).toBe('/webhooks');
  });
});

describe('bad values fail with one line naming the variable', () => {
  it.each(['abc', '-1', '65536', '80.5', '4e3', '0x50'])('PORT=%j', (value) => {
    expectNamed(configError({ PORT: value }), 'PORT');
  });

  it.each([
    ['not ending in /api/v1', 'https://deliveries.example.com/api/v2'],
    ['no version path', 'https://deliveries.example.com'],
    ['a deeper path', 'https://deliveries.example.com/api/v1/acme'],
    ['a query string', 'https://deliveries.example.com/api/v1?debug=1'],
    ['not http(s)', 'ftp://deliveries.example.com/api/v1'],
    ['ws', 'ws://deliveries.example.com/api/v1'],
    ['not a URL', 'deliveries.example.com/api/v1'],
  ])('UPSTREAM_URL %s', (_, value) => {
    expectNamed(configError({ UPSTREAM_URL: value, PLATFORM_ID: 'p1' }), 'UPSTREAM_URL');
  });

  it('REDIS_URL without CLIENT_TOKEN_SECRET names CLIENT_TOKEN_SECRET (every instance must accept the same tokens)', () => {
    const error = configError({ REDIS_URL: 'redis://127.0.0.1:6379' });
    expectNamed(error, 'CLIENT_TOKEN_SECRET');
    expect(error.message).toContain('REDIS_URL');
  });

  it.each([
    ['one short secret', 'short-secret-0123456789', 'the secret is 23 characters'],
    ['a short second secret of two', `${'k'.repeat(32)},short-secret-0123456789`, 'secret 2 of 2 is 23 characters'],
    ['only commas', ' , ,', 'lists no secret'],
  ])('CLIENT_TOKEN_SECRET: %s, without echoing the secret', (_, value, said) => {
    const error = configError({ CLIENT_TOKEN_SECRET: value });
    expectNamed(error, 'CLIENT_TOKEN_SECRET');
    expect(error.message).toContain(said);
    expect(error.message).not.toContain('short-secret');
    expect(error.message).not.toContain('kkkk');
  });

  it('UPSTREAM_URL with credentials is refused without repeating them', () => {
    const error = configError({
      UPSTREAM_URL: 'https://admin:hunter2secret@deliveries.example.com/api/v1',
      PLATFORM_ID: 'p1',
    });
    expectNamed(error, 'UPSTREAM_URL');
    expect(error.message).not.toContain('hunter2secret');
  });

  it('UPSTREAM_URL without PLATFORM_ID names PLATFORM_ID', () => {
    expectNamed(configError({ UPSTREAM_URL: UPSTREAM.UPSTREAM_URL }), 'PLATFORM_ID');
  });

  it('PLATFORM_ID that is not one path segment', () => {
    expectNamed(configError({ ...UPSTREAM, PLATFORM_ID: 'acme/../other' }), 'PLATFORM_ID');
  });

  it('WEBHOOK_PUBLIC_KEY_FILE that does not exist', () => {
    const error = configError({ WEBHOOK_PUBLIC_KEY_FILE: path.join(dir, 'missing.pem'), WEBHOOK_ISSUER: 'lastmile' });
    expectNamed(error, 'WEBHOOK_PUBLIC_KEY_FILE');
    expect(error.message).toContain('missing.pem');
  });

  it('WEBHOOK_PUBLIC_KEY_FILE that is a directory', () => {
    expectNamed(configError({ WEBHOOK_PUBLIC_KEY_FILE: dir, WEBHOOK_ISSUER: 'lastmile' }), 'WEBHOOK_PUBLIC_KEY_FILE');
  });

  it('WEBHOOK_PUBLIC_KEY_FILE holding no PEM at all', () => {
    expectNamed(
      configError({ WEBHOOK_PUBLIC_KEY_FILE: notAKeyFile, WEBHOOK_ISSUER: 'lastmile' }),
      'WEBHOOK_PUBLIC_KEY_FILE',
    );
  });

  it('WEBHOOK_PUBLIC_KEY_FILE holding a private key is refused and the key is not echoed', () => {
    const error = configError({ WEBHOOK_PUBLIC_KEY_FILE: privateKeyFile, WEBHOOK_ISSUER: 'lastmile' });
    expectNamed(error, 'WEBHOOK_PUBLIC_KEY_FILE');
    expect(error.message).not.toContain('PRIVATE KEY');
    expect(error.message).not.toMatch(/MII[A-Za-z0-9+/]{20}/);
  });

  it('WEBHOOK_PUBLIC_KEY_FILE holding a PKCS#1 "RSA PUBLIC KEY" is read as the same key (SPKI)', () => {
    expect(
      loadConfig({ WEBHOOK_PUBLIC_KEY_FILE: pkcs1PublicKeyFile, WEBHOOK_ISSUER: 'lastmile' }).webhook.publicKeyPems,
    ).toEqual([publicKeyPem]);
  });

  it('WEBHOOK_PUBLIC_KEY_FILE may hold several keys (a key change), each block in any accepted form, and names the block that is wrong', () => {
    const next = generateKeyPairSync('rsa', { modulusLength: 2048 }).publicKey;
    const bundle = path.join(dir, 'bundle.pem');
    writeFileSync(
      bundle,
      `${readFileSync(pkcs1PublicKeyFile, 'utf8')}\n${next.export({ type: 'spki', format: 'pem' })}`,
    );
    expect(loadConfig({ WEBHOOK_PUBLIC_KEY_FILE: bundle, WEBHOOK_ISSUER: 'lastmile' }).webhook.publicKeyPems).toEqual([
      publicKeyPem,
      next.export({ type: 'spki', format: 'pem' }).toString(),
    ]);
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' });
    const mixed = path.join(dir, 'mixed.pem');
    writeFileSync(mixed, `${publicKeyPem}${ec}`);
    const error = configError({ WEBHOOK_PUBLIC_KEY_FILE: mixed, WEBHOOK_ISSUER: 'lastmile' });
    expectNamed(error, 'WEBHOOK_PUBLIC_KEY_FILE');
    expect(error.message).toMatch(/block 2 of .*ec key/);
  });

  it('WEBHOOK_PUBLIC_KEY_FILE holding an EC key says that RS256 needs RSA', () => {
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' })
      .publicKey.export({ type: 'spki', format: 'pem' })
      .toString();
    const file = path.join(dir, 'ec.pem');
    writeFileSync(file, ec);
    const error = configError({ WEBHOOK_PUBLIC_KEY_FILE: file, WEBHOOK_ISSUER: 'lastmile' });
    expectNamed(error, 'WEBHOOK_PUBLIC_KEY_FILE');
    expect(error.message).toMatch(/ec key.*RSA/);
  });

  it('WEBHOOK_PUBLIC_KEY_FILE holding a 1024-bit RSA key is refused', () => {
    const small = generateKeyPairSync('rsa', { modulusLength: 1024 })
      .publicKey.export({ type: 'spki', format: 'pem' })
      .toString();
    const file = path.join(dir, 'small.pem');
    writeFileSync(file, small);
    const error = configError({ WEBHOOK_PUBLIC_KEY_FILE: file, WEBHOOK_ISSUER: 'lastmile' });
    expectNamed(error, 'WEBHOOK_PUBLIC_KEY_FILE');
    expect(error.message).toMatch(/1024-bit.*at least 2048/);
  });

  it('a key file without WEBHOOK_ISSUER names WEBHOOK_ISSUER', () => {
    expectNamed(configError({ WEBHOOK_PUBLIC_KEY_FILE: publicKeyFile }), 'WEBHOOK_ISSUER');
    expectNamed(configError({ WEBHOOK_PUBLIC_KEY_FILE: publicKeyFile, WEBHOOK_ISSUER: '  ' }), 'WEBHOOK_ISSUER');
  });

  it.each(['dollars', 'cent', 'minor', '100'])('UPSTREAM_AMOUNT_UNIT=%j', (value) => {
    expectNamed(configError({ UPSTREAM_AMOUNT_UNIT: value }), 'UPSTREAM_AMOUNT_UNIT');
  });

  it.each(['soon', '0', '-5', '1.5'])('UPSTREAM_TIMEOUT_MS=%j', (value) => {
    expectNamed(configError({ UPSTREAM_TIMEOUT_MS: value }), 'UPSTREAM_TIMEOUT_MS');
  });

  it.each(['http://cache.example.com:6379', 'localhost:6379', 'cache.example.com'])('REDIS_URL=%j', (value) => {
    expectNamed(configError({ REDIS_URL: value }), 'REDIS_URL');
  });

  it('a bad REDIS_URL does not repeat its password', () => {
    const error = configError({ REDIS_URL: 'http://:hunter2secret@cache.example.com:6379' });
    expectNamed(error, 'REDIS_URL');
    expect(error.message).not.toContain('hunter2secret');
  });

  it.each(['/graphql', '/health', '/ready', '/', '/graphiql/x', '/tracking/x'])(
    'WEBHOOK_PATH=%j collides with another endpoint',
    (value) => {
      expectNamed(configError({ WEBHOOK_PATH: value }), 'WEBHOOK_PATH');
    },
  );

  it.each(['webhooks', '/web hooks', '/hooks?x=1', 'https://example.com/webhooks'])(
    'WEBHOOK_PATH=%j is not a path',
    (value) => {
      expectNamed(configError({ WEBHOOK_PATH: value }), 'WEBHOOK_PATH');
    },
  );
});

describe('CONFIG_VARIABLES', () => {
  const names = CONFIG_VARIABLES.map((variable) => variable.name);

  it('names every variable of the contract table', () => {
    const contract = [
      'PORT',
      'HOST',
      'UPSTREAM_URL',
      'PLATFORM_ID',
      'WEBHOOK_PUBLIC_KEY_FILE',
      'WEBHOOK_ISSUER',
      'WEBHOOK_PATH',
      'DATA_DIR',
      'UPSTREAM_TIMEOUT_MS',
      'UPSTREAM_AMOUNT_UNIT',
      'REDIS_URL',
    ];
    for (const name of contract) expect(names, name).toContain(name);
  });

  it('lists each variable once, with help and a default', () => {
    expect(new Set(names).size).toBe(names.length);
    for (const variable of CONFIG_VARIABLES) {
      expect(variable.help.trim(), variable.name).not.toBe('');
      expect(variable.default.trim(), variable.name).not.toBe('');
    }
  });

  it('lists every variable loadConfig reads', () => {
    const read = new Set<string>();
    const env = new Proxy({} as Env, {
      get(_, name) {
        if (typeof name === 'string') read.add(name);
        return undefined;
      },
    });
    loadConfig(env);
    expect(read.size).toBeGreaterThan(10);
    expect([...read].filter((name) => !names.includes(name))).toEqual([]);
  });

  it('is documented in docs/configuration.md and .env.example, and nothing else is', () => {
    const read = (file: string) => readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
    // Table rows start with the variable (or a pair of them) in backquotes.
    const documented = [...read('docs/configuration.md').matchAll(/^\| ((?:`[A-Z0-9_]+`(?:, )?)+) \|/gm)].flatMap(
      (row) => [...row[1]!.matchAll(/`([A-Z0-9_]+)`/g)].map((name) => name[1]!),
    );
    expect([...documented].sort()).toEqual([...names].sort());
    // .env.example: each variable set or shown commented out.
    const example = new Set([...read('.env.example').matchAll(/^#? ?([A-Z][A-Z0-9_]+)=/gm)].map((line) => line[1]!));
    expect(names.filter((name) => !example.has(name))).toEqual([]);
  });

  it('documents the defaults loadConfig applies', () => {
    const defaults = Object.fromEntries(CONFIG_VARIABLES.map((variable) => [variable.name, variable.default]));
    const config = loadConfig({});
    expect(Number(defaults.PORT)).toBe(config.port);
    expect(defaults.HOST).toBe(config.host);
    expect(defaults.WEBHOOK_PATH).toBe(config.webhook.path);
    expect(path.resolve(defaults.DATA_DIR!)).toBe(config.dataDir);
    expect(Number(defaults.UPSTREAM_TIMEOUT_MS)).toBe(config.upstream.timeoutMs);
    expect(defaults.UPSTREAM_AMOUNT_UNIT).toBe(config.upstream.amountUnit);
    expect(defaults.UPSTREAM_QUOTE_AMOUNT_UNIT).toBe(config.upstream.quoteAmountUnit);
    expect(Number(defaults.WEBHOOK_CLOCK_TOLERANCE_SECONDS)).toBe(config.webhook.clockToleranceSeconds);
  });
});

describe('Redis through Sentinel', () => {
  const SECRET = { CLIENT_TOKEN_SECRET: 'a'.repeat(32) };
  it("reads the Sentinels, the primary's name, passwords, TLS and the replica acknowledgements", () => {
    const config = loadConfig({
      ...SECRET,
      REDIS_SENTINELS: 'sentinel-1:26379, 10.0.0.2:26380,[::1]:26381',
      REDIS_SENTINEL_NAME: 'events',
      REDIS_PASSWORD: 'p',
      REDIS_SENTINEL_PASSWORD: 's',
      REDIS_TLS: 'true',
      REDIS_MIN_REPLICAS_ACK: '2',
      REDIS_REPLICA_ACK_TIMEOUT_MS: '250',
    });
    expect(config.redisUrl).toBeUndefined();
    expect(config.redisSentinel).toEqual({
      sentinels: [
        { host: 'sentinel-1', port: 26379 },
        { host: '10.0.0.2', port: 26380 },
        { host: '::1', port: 26381 },
      ],
      name: 'events',
      password: 'p',
      username: undefined,
      sentinelPassword: 's',
      tls: true,
      sentinelTls: false,
    });
    expect(config.redisMinReplicasAck).toBe(2);
    expect(config.redisReplicaAckTimeoutMs).toBe(250);
  });

  it('by default waits for one replica when the primary has one, for at most a second', () => {
    const config = loadConfig({ ...SECRET, REDIS_URL: 'redis://127.0.0.1:6379' });
    expect(config.redisMinReplicasAck).toBeUndefined();
    expect(config.redisReplicaAckTimeoutMs).toBe(1000);
  });

  it.each([
    [{ REDIS_SENTINELS: 'sentinel-1:26379' }, 'REDIS_SENTINEL_NAME'],
    [{ REDIS_SENTINEL_NAME: 'events' }, 'REDIS_SENTINEL_NAME'],
    [{ REDIS_SENTINELS: 'sentinel-1', REDIS_SENTINEL_NAME: 'events' }, 'REDIS_SENTINELS'],
    [{ REDIS_SENTINELS: 'sentinel-1:0', REDIS_SENTINEL_NAME: 'events' }, 'REDIS_SENTINELS'],
    [{ REDIS_SENTINELS: 'a:1', REDIS_SENTINEL_NAME: 'events', REDIS_URL: 'redis://x:6379' }, 'REDIS_SENTINELS'],
    [{ REDIS_URL: 'redis://x:6379', REDIS_MIN_REPLICAS_ACK: '-1' }, 'REDIS_MIN_REPLICAS_ACK'],
  ])('%j fails naming %s', (env, variable) => {
    expectNamed(configError({ ...SECRET, ...env }), variable);
  });

  it('several instances on Sentinel need CLIENT_TOKEN_SECRET, as on REDIS_URL', () => {
    expectNamed(configError({ REDIS_SENTINELS: 'a:1', REDIS_SENTINEL_NAME: 'events' }), 'CLIENT_TOKEN_SECRET');
  });
});
