// GET /ready answers for this instance only (its store, its drain state), fast,
// whatever the upstream does; the upstream's last known state is reported in the
// body and in /metrics, checked in the background.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { startStack, type Stack } from '../helpers/stack.js';

interface ReadyBody {
  status: string;
  store?: string;
  upstream: { state: 'up' | 'down' | 'unknown'; checkedAt: string | null; errorCode: string | null };
}

async function ready(url: string): Promise<{ status: number; body: ReadyBody }> {
  const response = await fetch(`${url}/ready`);
  return { status: response.status, body: (await response.json()) as ReadyBody };
}

/**
 * Polls /ready until the reported upstream state is `state` (the background check runs every
 * UPSTREAM_CHECK_INTERVAL_MS).
 */
async function untilUpstream(
  url: string,
  state: ReadyBody['upstream']['state'],
): Promise<{ status: number; body: ReadyBody }> {
  for (;;) {
    const answer = await ready(url);
    if (answer.body.upstream.state === state) return answer;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function upstreamUpMetric(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/^delivery_graph_upstream_up (-?\d+)$/m.exec(text)?.[1]);
}

describe('readiness while the upstream fails', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({
      faultProxy: true,
      env: { UPSTREAM_CHECK_INTERVAL_MS: '100', UPSTREAM_TIMEOUT_MS: '300' },
    });
  });
  afterAll(() => stack?.stop());
  afterEach(() => {
    stack.proxy!.fault = undefined;
  });

  it('is ready with the upstream up, and says so', async () => {
    const answer = await untilUpstream(stack.app.url, 'up');
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ status: 'ready', store: 'ok' });
    expect(await upstreamUpMetric(stack.app.url)).toBe(1);
  });

  it('stays ready while the upstream hangs; the body and the metric report it down', async () => {
    // Every upstream request hangs until the test ends it.
    const hanging = new Set<() => void>();
    stack.proxy!.fault = (_req, res) => {
      hanging.add(() => res.destroy());
      return true;
    };
    try {
      const answer = await untilUpstream(stack.app.url, 'down');
      expect(answer.status).toBe(200);
      expect(answer.body.status).toBe('ready');
      expect(answer.body.upstream.errorCode).toBe('UPSTREAM_TIMEOUT');
      expect(await upstreamUpMetric(stack.app.url)).toBe(0);
      // Clients meanwhile get the typed error, not a load balancer's 503.
      const read = await stack.gql('{ delivery(uid: "any") { uid } }');
      expect(read.errors?.[0]?.extensions?.code).toBe('UPSTREAM_TIMEOUT');
    } finally {
      for (const end of hanging) end();
    }
  });

  it('stays ready while the upstream answers 503, and sees it come back', async () => {
    await untilUpstream(stack.app.url, 'up');
    stack.proxy!.fault = (_req, res) => {
      res.writeHead(503, { 'content-type': 'application/json' }).end('{"code":"unavailable","message":"down"}');
      return true;
    };
    const down = await untilUpstream(stack.app.url, 'down');
    expect(down.status).toBe(200);
    expect(down.body.upstream.errorCode).toBe('UPSTREAM_UNAVAILABLE');
    stack.proxy!.fault = undefined;
    const up = await untilUpstream(stack.app.url, 'up');
    expect(up.status).toBe(200);
  });
});

it('answers without waiting for an upstream that never answers', async () => {
  // UPSTREAM_TIMEOUT_MS far beyond the test's own timeout: a probe that waited for the upstream would never come back.
  const stack = await startStack({
    faultProxy: true,
    env: { UPSTREAM_CHECK_INTERVAL_MS: '100', UPSTREAM_TIMEOUT_MS: '600000' },
  });
  const hanging = new Set<() => void>();
  try {
    await untilUpstream(stack.app.url, 'up');
    stack.proxy!.fault = (_req, res) => {
      hanging.add(() => res.destroy());
      return true;
    };
    // Wait until a background check is stuck on the hanging upstream, then probe.
    const seen = stack.proxy!.seen.length;
    while (stack.proxy!.seen.length === seen) await new Promise((resolve) => setTimeout(resolve, 20));
    for (let probe = 0; probe < 5; probe += 1) expect((await ready(stack.app.url)).status).toBe(200);
  } finally {
    for (const end of hanging) end();
    await stack.stop();
  }
});

describe('readiness of the store', () => {
  it('is not ready once the SQLite store cannot be written, and says why', async () => {
    const stack = await startStack();
    try {
      expect((await ready(stack.app.url)).status).toBe(200);
      // The store's connection is gone (as when the file or its disk fails): writes fail.
      (stack.app.services.store as unknown as { db: { close(): void } }).db.close();
      // A store answer is reused for up to 1 s.
      let answer = await ready(stack.app.url);
      while (answer.status === 200) answer = await ready(stack.app.url);
      expect(answer.status).toBe(503);
      expect(answer.body.status).toBe('store unavailable');
      expect(answer.body.store).toMatch(/not open/);
    } finally {
      await stack.stop();
    }
  });

  it('says stopping (503) once a graceful stop has begun', async () => {
    const stack = await startStack();
    const url = stack.app.url;
    const stopped = stack.app.stop();
    // The listener closes while the stop runs; a probe that still gets through sees 503.
    const answer = await fetch(`${url}/ready`).then(
      async (response) => response.status,
      () => 'refused',
    );
    expect([503, 'refused']).toContain(answer);
    await stopped;
    await stack.stop();
  });
});

describe.skipIf(!redisAvailable('readiness.test.ts'))('readiness on Redis', () => {
  let redis: RedisServer;
  let stack: Stack;
  beforeAll(async () => {
    redis = await startRedisServer();
    stack = await startStack({ env: { REDIS_URL: redis.url } });
  });
  afterAll(async () => {
    await stack?.stop();
    await redis?.stop();
  });

  it('is ready while Redis answers, not ready once it is gone, and ready again when it is back', async () => {
    expect((await ready(stack.app.url)).status).toBe(200);
    await redis.kill();
    let answer = await ready(stack.app.url);
    while (answer.status === 200) answer = await ready(stack.app.url);
    expect(answer.status).toBe(503);
    // What is wrong, in our words (not ioredis's "Reached the max retries per request limit").
    expect(answer.body.store).toMatch(
      /^Redis cannot be reached \(connect ECONNREFUSED [\d.]+:\d+\)$|^the store did not answer within 1000 ms$/,
    );
    await redis.start();
    while (answer.status !== 200) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      answer = await ready(stack.app.url);
    }
    expect(answer.body.status).toBe('ready');
  });
});

it('a second instance on the same config starts and is ready while the upstream is unreachable', async () => {
  const stack = await startStack();
  const env = {
    ...stack.env,
    UPSTREAM_URL: 'http://127.0.0.1:9/api/v1',
    UPSTREAM_CHECK_INTERVAL_MS: '100',
    DATA_DIR: `${stack.dataDir}/second`,
  };
  const app = await startApp(loadConfig(env));
  try {
    const answer = await untilUpstream(app.url, 'down');
    expect(answer.status).toBe(200);
    expect(answer.body.upstream.errorCode).toBe('UPSTREAM_UNAVAILABLE');
  } finally {
    await app.stop();
    await stack.stop();
  }
});
