// HTTP load, summarised the same way for every contender. These run inside the
// http-load process (bench/load/http-load.mjs), never in the orchestrator.
import autocannon from 'autocannon';
import { percentile } from './stats.mjs';

/** Runs one load and returns requests/s and latency percentiles (ms). */
/** What a request's URL or body holds where each request puts a delivery uid of its own. */
export const UID_SLOT = '00000000-0000-4000-8000-000000000000';

export async function load({
  url,
  method = 'GET',
  headers = {},
  body,
  connections = 32,
  duration = 10,
  amount,
  timeout,
  overallRate,
  expectBody,
  uniqueIds = false,
  uidLimit,
  graphql = false,
}) {
  // With uniqueIds, UID_SLOT in the path or body becomes a fresh uuid per request: no two requests read the same
  // delivery.
  // With uidLimit as well, the uids go round 1..uidLimit: reads of deliveries read before.
  let n = 0;
  const next = () => (n = uidLimit ? (n % uidLimit) + 1 : n + 1);
  const fresh = (text) =>
    text === undefined
      ? text
      : text.replace(UID_SLOT, () => `00000000-0000-4000-8000-${String(next()).padStart(12, '0')}`);
  const target = new URL(url);
  const result = await autocannon({
    url,
    method,
    headers,
    body,
    connections,
    duration,
    // A fixed number of requests instead of a duration (the probes that count CPU per read).
    ...(amount ? { amount } : {}),
    // Seconds before a request counts as timed out (autocannon's default 10; a contender under valgrind needs more).
    ...(timeout ? { timeout } : {}),
    overallRate,
    pipelining: 1,
    ...(uniqueIds
      ? {
          requests: [
            {
              method,
              path: `${target.pathname}${target.search}`,
              headers,
              body,
              setupRequest: (request) => ({ ...request, path: fresh(request.path), body: fresh(request.body) }),
            },
          ],
        }
      : {}),
    ...(expectBody ? { expectBody } : {}),
    // A GraphQL answer with errors (a refusal, a failed read) is not a served request.
    ...(graphql ? { verifyBody: (text) => !text.includes('"errors"') } : {}),
  });
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests: result.requests.total,
    errors: result.errors + result.timeouts + (result.mismatches ?? 0),
    non2xx: result.non2xx,
  };
}

/**
 * Sends requests at a fixed rate (open loop: on schedule, whether or not earlier
 * ones finished) and measures each with a microsecond clock; autocannon's
 * millisecond histogram is too coarse for a sub-millisecond difference.
 */
export async function fixedRate({ url, method = 'GET', headers = {}, body, rate = 200, duration = 10 }) {
  const { Pool } = await import('undici');
  const target = new URL(url);
  const pool = new Pool(target.origin, { connections: 16, pipelining: 1 });
  const latencies = [];
  let errors = 0;
  const total = Math.round(rate * duration);
  const interval = 1000 / rate;
  const start = performance.now();
  const inFlight = [];
  for (let i = 0; i < total; i += 1) {
    const due = start + i * interval;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
    const sent = performance.now();
    inFlight.push(
      pool
        .request({ method, path: target.pathname + target.search, headers, body })
        .then(async (response) => {
          await response.body.arrayBuffer();
          if (response.statusCode >= 300) errors += 1;
          latencies.push(performance.now() - sent);
        })
        .catch(() => {
          errors += 1;
        }),
    );
  }
  await Promise.all(inFlight);
  await pool.close();
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99), requests: latencies.length, errors };
}
