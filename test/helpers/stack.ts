// Starts a whole stack for a test: the sandbox upstream and the facade, both on
// port 0, with a fresh data directory; and small clients for both.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import type { Logger } from '../../src/logger.js';
import type { Store } from '../../src/store/store.js';
import { startSandbox, type Sandbox, type SandboxOptions } from '@delivery-graph/sandbox';
import { startFaultProxy, type FaultProxy } from './fault-proxy.js';

export interface GraphQLResponse<T = any> {
  data?: T;
  errors?: Array<{
    message: string;
    path?: Array<string | number>;
    extensions?: { code?: string } & Record<string, unknown>;
  }>;
}

export interface Stack {
  app: App;
  sandbox: Sandbox;
  /** The sandbox's first merchant. */
  key: string;
  /** A second merchant of the same platform. */
  otherKey: string;
  dataDir: string;
  env: Record<string, string>;
  /** With faultProxy: the proxy between the facade and the sandbox. */
  proxy: FaultProxy | undefined;
  /** POSTs a GraphQL operation over real HTTP. */
  gql<T = any>(query: string, variables?: Record<string, unknown>, key?: string | null): Promise<GraphQLResponse<T>>;
  /** Stops the facade and (unless kept) the sandbox, and removes the data directory. */
  stop(): Promise<void>;
  /**
   * Stops only the facade and starts a new one on the same data directory; `stopped` runs in between (an operator's
   * command on the store).
   */
  restart(stopped?: () => Promise<void>): Promise<void>;
}

export interface StackOptions {
  env?: Record<string, string>;
  sandbox?: SandboxOptions;
  /** Put a fault proxy between the facade and the sandbox (stack.proxy). */
  faultProxy?: boolean;
  /** The store of each start (the first and every restart), instead of the one the configuration opens. */
  store?: (dataDir: string) => Store;
  /** The facade's logger (default: one at the config's LOG_LEVEL, silent). */
  logger?: Logger;
}

/**
 * CLIENT_TOKEN_SECRET for every instance a test starts on Redis (required there, so instances accept each other's
 * tokens).
 */
export const TEST_CLIENT_TOKEN_SECRET = 'test-client-token-secret-shared-by-instances';

/**
 * The budgets of callers without an accepted key, off, for a facade a test starts itself (startStack sets them too).
 * Every test request comes from one address: refused requests without a key add up (their budget has tests of its own,
 * pipeline-trust), and so does the work of introspecting, reading the SDL and trying made-up keys, which is charged in
 * wall time: on a loaded machine a few such requests spent the default second a minute and the next answer was
 * RATE_LIMITED instead of what the test asserts. Tests of these budgets set them (keyless-work, docs-behaviour).
 */
export const KEYLESS_BUDGETS_OFF: Readonly<Record<string, string>> = {
  KEYLESS_REFUSALS_PER_MINUTE: '0',
  KEYLESS_WORK_MS_PER_MINUTE: '0',
  KEYLESS_TOTAL_WORK_MS_PER_MINUTE: '0',
};

export function makeDataDir(): string {
  return mkdtempSync(path.join(tmpdir(), 'delivery-graph-test-'));
}

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const sandbox = await startSandbox({ ...options.sandbox, knobs: { stepMs: 0, ...options.sandbox?.knobs } });
  const proxy = options.faultProxy ? await startFaultProxy(sandbox.origin) : undefined;
  const dataDir = makeDataDir();
  const keyFile = path.join(dataDir, 'webhook-public.pem');
  writeFileSync(keyFile, sandbox.publicKeyPem);
  const env: Record<string, string> = {
    PORT: '0',
    UPSTREAM_URL: proxy?.url ?? sandbox.url,
    PLATFORM_ID: sandbox.platformId,
    WEBHOOK_PUBLIC_KEY_FILE: keyFile,
    WEBHOOK_ISSUER: sandbox.issuer,
    DATA_DIR: dataDir,
    LOG_LEVEL: 'silent',
    ...KEYLESS_BUDGETS_OFF,
    // One health check of the upstream at start, none during a test (they would count as upstream requests) unless a
    // test asks.
    UPSTREAM_CHECK_INTERVAL_MS: '3600000',
    // Every read goes to the upstream, as the tests that count a read's upstream calls expect; the tests of reads
    // from the stored view (read-view.test.ts) set READ_MAX_AGE themselves.
    READ_MAX_AGE: '0',
    ...options.env,
  };
  if (env.REDIS_URL && !env.CLIENT_TOKEN_SECRET) env.CLIENT_TOKEN_SECRET = TEST_CLIENT_TOKEN_SECRET;
  const boot = async () => {
    const app = await startApp(loadConfig(env), { store: options.store?.(dataDir), logger: options.logger });
    sandbox.setWebhookUrl(app.webhookUrl);
    return app;
  };
  let app = await boot();
  const stack: Stack = {
    get app() {
      return app;
    },
    sandbox,
    key: sandbox.merchants[0]!.key,
    otherKey: sandbox.merchants[1]!.key,
    dataDir,
    env,
    async gql(query, variables, key = stack.key) {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (key) headers.authorization = `Bearer ${key}`;
      const response = await fetch(`${app.url}/graphql`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ query, variables }),
      });
      return (await response.json()) as GraphQLResponse;
    },
    proxy,
    async stop() {
      await app.stop();
      await proxy?.close();
      await sandbox.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
    async restart(stopped) {
      await app.stop();
      await stopped?.();
      app = await boot();
    },
  };
  return stack;
}

/** A valid booking on either group, with a scheduled dropoff window. */
/** A partner-group order body for sandbox.seedPartnerOrder: the required fields, then any overrides. */
export function partnerOrderBody(partnerReference: string, overrides: Record<string, unknown> = {}) {
  return {
    partner_reference: partnerReference,
    pickup_address_street: 'Dock Rd',
    pickup_address_city: 'Springfield',
    pickup_address_country: 'US',
    pickup_name: 'Warehouse',
    dropoff_name: 'Customer',
    email: 'ops@example.com',
    currency: 'EUR',
    package_delivery_mode: 'NOW',
    ...overrides,
  };
}

export function deliveryInput(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    pickup: {
      name: 'Ada Shop',
      phone: '+15550100',
      email: 'shop@example.com',
      address: { street: 'Main St', number: '1', city: 'Springfield', country: 'US', postalCode: '12345' },
    },
    dropoff: {
      name: 'Grace Customer',
      phone: '+15550199',
      email: 'grace@example.com',
      address: { street: 'Elm St', number: '42', city: 'Springfield', country: 'US' },
      windowStart: '2030-05-01T16:00:00+02:00',
    },
    deliveryDate: '2030-05-01',
    description: 'Two books',
    tip: '3.50',
    declaredValue: '45.10',
    currency: 'USD',
    payload: { orderId: 'A-1', nested: { ok: true } },
    ...overrides,
  };
}
