// The storm of upstream faults docs/reliability/upstream-faults.md quotes: --requests GraphQL reads (10,000), --concurrency in flight (50),
// through the built facade against the sandbox behind a proxy that misbehaves by uid: hangs, resets, slow and truncated
// bodies, non-JSON, 429 and 503 with Retry-After, 30 % random 5xx on some deliveries, slow answers on others, and an
// outage (every request from 40 % to 60 % of the run meets a reset, a truncated body or a 503). A 300 ms deadline; a
// breaker opening on 50 % failures over 20 calls, reset after 250 ms. Prints the figures: outcomes by kind, latency,
// circuit-open fast failures, each group's circuit transitions and what was sent while open, and any answer that was
// not well-formed GraphQL with a documented code. test/integration/upstream-faults.test.ts asserts the same properties
// on a run of its own size.
//
//   npm run build && node bench/probes/upstream-faults.mjs [--requests=10000] [--concurrency=50] [--seed=2024] [--quick]
import diagnostics from 'node:diagnostics_channel';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Pool, request } from 'undici';
import { startSandbox } from '@delivery-graph/sandbox';
import { startApp } from '../../dist/app.js';
import { loadConfig } from '../../dist/config.js';

const { values } = parseArgs({
  options: {
    requests: { type: 'string', default: '10000' },
    concurrency: { type: 'string', default: '50' },
    seed: { type: 'string', default: '2024' },
    quick: { type: 'boolean', default: false },
  },
});
const TOTAL = values.quick ? 1_000 : Number(values.requests);
const CONCURRENCY = Number(values.concurrency);
const OUTAGE = { from: Math.floor(TOTAL * 0.4), to: Math.floor(TOTAL * 0.6) };
const TIMEOUT_MS = 300;
const BREAKER = { volumeThreshold: 20, errorPercent: 50, resetMs: 250 };
const QUERY = 'query($uid: ID!, $group: ApiGroup!) { delivery(uid: $uid, group: $group) { uid status } }';
const CREATE =
  'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }';
const DOCUMENTED = new Set(['UPSTREAM_TIMEOUT', 'UPSTREAM_UNAVAILABLE', 'UPSTREAM_ERROR']);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const json = (res, status, body, headers = {}) => {
  if (res.destroyed) return;
  res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
};
const uidIn = (req) => decodeURIComponent((req.url ?? '').split('?', 1)[0].split('/').pop() ?? '');
const groupOf = (urlPath) => (urlPath.includes('/orders/') ? 'partner' : 'platform');

/** Each fault answers (or fails to answer) one upstream request whose uid names it ("hang-17"). */
const FAULTS = {
  hang: () => undefined,
  reset: (req) => req.socket.destroy(),
  slowBody: (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"data":{"uid":"');
    const timer = setInterval(() => res.write('x'), 40);
    res.on('close', () => clearInterval(timer));
  },
  truncated: (req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
    res.write('{"data":{"uid":"', () => req.socket.end());
  },
  nonJson: (_req, res) => void res.writeHead(200, { 'content-type': 'text/html' }).end('<html>Down</html>'),
  tooMany: (_req, res) => json(res, 429, { code: 'rate_limited', message: 'Slow down.' }, { 'retry-after': '1' }),
  unavailable: (_req, res) => json(res, 503, { code: 'unavailable', message: 'Try later.' }, { 'retry-after': '1' }),
};
const FAULT_NAMES = Object.keys(FAULTS);

/** A seeded PRNG (mulberry32): the same --seed gives the same mix. */
function rng(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A reverse proxy to the sandbox that lets `fault` answer first; counts what it received. */
async function faultProxy(origin) {
  const proxy = { url: '', fault: undefined, seen: [] };
  const server = createServer(async (req, res) => {
    proxy.seen.push(req.url ?? '/');
    try {
      if (proxy.fault && (await proxy.fault(req, res))) return;
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      const upstream = await request(`${origin}${req.url}`, {
        method: req.method,
        headers: { authorization: req.headers.authorization ?? '', 'content-type': 'application/json' },
        body: chunks.length ? Buffer.concat(chunks) : undefined,
      });
      const body = Buffer.from(await upstream.body.arrayBuffer());
      res.writeHead(upstream.statusCode, { 'content-type': 'application/json' }).end(body);
    } catch {
      if (!res.headersSent) res.writeHead(502).end();
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${server.address().port}/api/v1`;
  proxy.close = () => new Promise((resolve) => (server.closeAllConnections(), server.close(() => resolve())));
  return proxy;
}

/** The outcome of a `delivery(uid)` answer: data, null, a documented code, "open" (a circuit), or a problem. */
function outcomeOf(answer, uid, keys) {
  const problem = (what) => ({ problem: `${what}: ${answer.status} ${answer.text.slice(0, 200)}` });
  if (answer.status !== 200 || !answer.contentType.startsWith('application/json')) return problem('not 200 JSON');
  let body;
  try {
    body = JSON.parse(answer.text);
  } catch {
    return problem('not JSON');
  }
  if (keys.some((key) => answer.text.includes(key))) return problem('carries a key');
  if (!body.errors) {
    if (body.data?.delivery === null) return { outcome: 'null' };
    return body.data?.delivery?.uid === uid ? { outcome: 'data' } : problem('data for another uid');
  }
  const code = body.errors[0]?.extensions?.code;
  if (body.errors.length !== 1 || !DOCUMENTED.has(code)) return problem('an undocumented error');
  return {
    outcome: code === 'UPSTREAM_UNAVAILABLE' && /circuit .* is open/.test(body.errors[0].message) ? 'open' : code,
  };
}

const sandbox = await startSandbox({ knobs: { stepMs: 0 } });
const proxy = await faultProxy(sandbox.origin);
const dataDir = mkdtempSync(path.join(tmpdir(), 'dg-upstream-faults-'));
writeFileSync(path.join(dataDir, 'webhook.pem'), sandbox.publicKeyPem);
const app = await startApp(
  loadConfig({
    PORT: '0',
    UPSTREAM_URL: proxy.url,
    PLATFORM_ID: sandbox.platformId,
    WEBHOOK_PUBLIC_KEY_FILE: path.join(dataDir, 'webhook.pem'),
    WEBHOOK_ISSUER: sandbox.issuer,
    DATA_DIR: dataDir,
    LOG_LEVEL: 'silent',
    UPSTREAM_CHECK_INTERVAL_MS: '3600000',
    UPSTREAM_TIMEOUT_MS: String(TIMEOUT_MS),
    // Each read is one upstream call: the upstream decides who sees what.
    UPSTREAM_READ_SCOPE: 'key',
    RATE_LIMIT_PER_MINUTE: '0',
    BREAKER_VOLUME_THRESHOLD: String(BREAKER.volumeThreshold),
    BREAKER_ERROR_PERCENT: String(BREAKER.errorPercent),
    BREAKER_RESET_MS: String(BREAKER.resetMs),
  }),
);
sandbox.setWebhookUrl(app.webhookUrl);
const transitions = [];
app.services.upstream.onBreakerChange((group, state) => transitions.push({ group, state, at: performance.now() }));
const pool = new Pool(app.url, { connections: CONCURRENCY, pipelining: 1 });
const read = async (key, uid, group) => {
  const started = performance.now();
  const response = await pool.request({
    method: 'POST',
    path: '/graphql',
    headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query: QUERY, variables: { uid, group } }),
  });
  const text = await response.body.text();
  const contentType = String(response.headers['content-type']);
  return { status: response.statusCode, contentType, text, ms: performance.now() - started };
};

try {
  const keys = sandbox.merchants.slice(0, 2).map((merchant) => merchant.key);
  // Real deliveries and orders of both merchants: clean ones, ones behind a 30 % 5xx, slow ones.
  const reals = [];
  const kinds = ['clean', 'clean', 'flaky', 'flaky', 'slow', 'slow'];
  for (const key of keys) {
    for (const [i, kind] of kinds.entries()) {
      const booked = await fetch(`${app.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({ query: CREATE, variables: { input: bookingInput() } }),
      }).then((response) => response.json());
      const uid = booked.data?.createDelivery?.data?.uid;
      if (typeof uid !== 'string') throw new Error(`booking failed: ${JSON.stringify(booked)}`);
      reals.push({ uid, group: 'PLATFORM', key, kind });
      const order = sandbox.seedPartnerOrder(key, partnerOrder(`PO-${key.slice(-4)}-${i}`));
      reals.push({ uid: order.uid, group: 'PARTNER', key, kind });
    }
  }
  const flaky = new Set(reals.filter((real) => real.kind === 'flaky').map((real) => real.uid));
  const slow = new Set(reals.filter((real) => real.kind === 'slow').map((real) => real.uid));
  const random = rng(Number(values.seed));
  proxy.fault = async (req, res) => {
    const uid = uidIn(req);
    const name = uid.split('-', 1)[0];
    if (Object.hasOwn(FAULTS, name)) {
      FAULTS[name](req, res);
      return true;
    }
    if (flaky.has(uid) && random() < 0.3) {
      json(res, [500, 502, 503, 504][Math.floor(random() * 4)], { code: 'server_error', message: 'internal' });
      return true;
    }
    if (slow.has(uid)) await sleep(100);
    return false;
  };
  const pick = (i) => {
    const group = random() < 0.8 ? 'PLATFORM' : 'PARTNER';
    const key = keys[Math.floor(random() * keys.length)];
    if (i >= OUTAGE.from && i < OUTAGE.to) {
      const kind = ['reset', 'truncated', 'unavailable'][Math.floor(random() * 3)];
      return { kind, uid: `${kind}-${i}`, key, group };
    }
    const roll = random();
    if (roll < 0.65) {
      const candidates = reals.filter((real) => real.group === group && real.key === key);
      return { kind: 'real', uid: candidates[Math.floor(random() * candidates.length)].uid, key, group };
    }
    if (roll < 0.75)
      return { kind: 'unknown', uid: `0b6f1c1e-6f7a-4f65-9d8e-${String(i).padStart(12, '0')}`, key, group };
    const kind = FAULT_NAMES[Math.floor(random() * FAULT_NAMES.length)];
    return { kind, uid: `${kind}-${i}`, key, group };
  };

  // What the facade sends upstream, timed as undici takes it (when the breaker let the attempt through).
  const proxyHost = new URL(proxy.url).host;
  const sends = [];
  const onSend = ({ request: sent }) => {
    if (String(sent.origin).includes(proxyHost)) sends.push({ group: groupOf(sent.path), at: performance.now() });
  };
  diagnostics.subscribe('undici:request:create', onSend);
  // Warm-up, not counted: every connection opened and the query compiled.
  const warm = (i) => reals[i % reals.length];
  await Promise.all(Array.from({ length: 4 * CONCURRENCY }, (_, i) => read(warm(i).key, warm(i).uid, warm(i).group)));
  const outcomes = {};
  const problems = [];
  const latencies = [];
  const openLatencies = [];
  const FIRST_ATTEMPT_ONLY = new Set(['unknown', 'hang', 'slowBody', 'nonJson', 'unavailable', 'tooMany']);
  const refusedUids = [];
  const proxyBefore = proxy.seen.length;
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < TOTAL) {
        const request = pick(next++);
        const answer = await read(request.key, request.uid, request.group).catch((error) => ({ error }));
        if (answer.error) {
          problems.push(`${request.uid}: ${answer.error}`);
          continue;
        }
        latencies.push(answer.ms);
        const result = outcomeOf(answer, request.uid, keys);
        if (result.problem) {
          problems.push(`${request.kind} ${request.uid}: ${result.problem}`);
          continue;
        }
        (outcomes[request.kind] ??= {})[result.outcome] = (outcomes[request.kind][result.outcome] ?? 0) + 1;
        if (result.outcome === 'open' && FIRST_ATTEMPT_ONLY.has(request.kind)) {
          openLatencies.push(answer.ms);
          refusedUids.push(request.uid);
        }
      }
    }),
  );
  const elapsedMs = performance.now() - started;
  diagnostics.unsubscribe('undici:request:create', onSend);

  const reached = new Set(proxy.seen.slice(proxyBefore).map((seen) => seen.split('?', 1)[0].split('/').pop()));
  const circuit = ['platform', 'partner'].map((group) => {
    const changes = transitions.filter((change) => change.group === group);
    const openTimes = [];
    let sentWhileOpen = 0;
    let trialsOverOne = 0;
    changes.forEach((change, index) => {
      const until = changes[index + 1]?.at ?? performance.now();
      const sent = sends.filter((send) => send.group === group && send.at > change.at && send.at <= until).length;
      if (change.state === 'open') {
        if (changes[index + 1]) openTimes.push(until - change.at);
        sentWhileOpen += sent;
      }
      if (change.state === 'half-open' && sent > 1) trialsOverOne += 1;
    });
    const count = (state) => changes.filter((change) => change.state === state).length;
    const after = (from, to) => changes.filter((c, i) => c.state === to && changes[i - 1]?.state === from).length;
    return {
      group,
      opened: count('open'),
      halfOpened: count('half-open'),
      closed: count('closed'),
      trialsSucceeded: after('half-open', 'closed'),
      trialsFailed: after('half-open', 'open'),
      openMsMin: Math.round(Math.min(...openTimes)),
      trialsOverOne,
      sentWhileOpen,
    };
  });
  const totals = {};
  for (const counts of Object.values(outcomes))
    for (const [outcome, n] of Object.entries(counts)) totals[outcome] = (totals[outcome] ?? 0) + n;
  latencies.sort((a, b) => a - b);
  openLatencies.sort((a, b) => a - b);
  const at = (values, p) => Math.round(values[Math.min(values.length - 1, Math.floor(p * values.length))] ?? NaN);
  console.log(
    JSON.stringify(
      {
        requests: latencies.length,
        concurrency: CONCURRENCY,
        elapsedMs: Math.round(elapsedMs),
        requestsPerSecond: Math.round((latencies.length / elapsedMs) * 1000),
        upstreamTimeoutMs: TIMEOUT_MS,
        breaker: BREAKER,
        outcomes: totals,
        outcomesByKind: outcomes,
        latencyMs: { p50: at(latencies, 0.5), p99: at(latencies, 0.99), max: Math.round(latencies.at(-1)) },
        circuitOpenLatencyMs: { p50: at(openLatencies, 0.5), max: Math.round(openLatencies.at(-1) ?? NaN) },
        refusedOnFirstAttemptThatReachedUpstream: refusedUids.filter((uid) => reached.has(uid)).length,
        upstreamRequestsReceived: proxy.seen.length - proxyBefore,
        circuit,
        problems: problems.length,
        firstProblems: problems.slice(0, 5),
      },
      null,
      2,
    ),
  );
  if (problems.length) process.exitCode = 1;
} finally {
  await pool.close();
  await app.stop();
  await proxy.close();
  await sandbox.stop();
  rmSync(dataDir, { recursive: true, force: true });
}

/** The booking test/helpers/stack.ts's deliveryInput() makes. */
function bookingInput() {
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
    currency: 'USD',
  };
}

function partnerOrder(partnerReference) {
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
  };
}
