// Realtime: signed webhooks → verified, stored, published → graphql-ws
// subscribers. Ack latency, webhook → subscriber latency, losses, maximum
// ingest; then fan-out to 10,000 subscribers and the memory each costs.
import { startFacade, startRedis, startUpstream } from '../lib/contenders.mjs';
import { median, percentile } from '../lib/load.mjs';
import { sleep } from '../lib/proc.mjs';
import { fmt, table, writeSection } from '../lib/report.mjs';
import { keyPair, signEvent, subscriberFleet, webhookPoster } from '../lib/webhooks.mjs';
import { KEY } from './single-read.mjs';

const uidOf = (i) => `00000000-0000-4000-9000-${String(i).padStart(12, '0')}`;

/** Waits until `check()` is true, polling; throws after timeoutMs. */
async function until(check, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/** Sends one warm-up event per delivery and waits until every subscriber saw its own: all subscriptions are live. */
async function warmUp(poster, privateKey, deliveries, perDelivery, received) {
  const before = received.count;
  await Promise.all(
    Array.from({ length: deliveries }, (_, d) => {
      const event = { uid: uidOf(d), event_name: 'delivery.created', status: 'warm-up' };
      return poster.post(signEvent(privateKey, event), event);
    }),
  );
  await until(() => received.count - before >= deliveries * perDelivery, 60_000, 'the warm-up events');
}

/** 1,000 subscribers on `subscribeOrigin`, webhooks at 500/s to `postOrigin`, then maximum ingest on `postOrigin`. */
async function measureRealtime({ quick, postOrigin, subscribeOrigin, privateKey }) {
  const poster = webhookPoster(postOrigin);
  // 1,000 subscribers: 100 deliveries × 10.
  const deliveries = 100;
  const perDelivery = 10;
  const sentAt = new Map();
  const latencies = [];
  const received = { count: 0 };
  const fleet = await subscriberFleet(subscribeOrigin, KEY, deliveries * perDelivery, (i) => uidOf(i % deliveries), (_i, event) => {
    received.count += 1;
    const sent = sentAt.get(event?.statusText);
    if (sent !== undefined) latencies.push(performance.now() - sent);
  });
  await warmUp(poster, privateKey, deliveries, perDelivery, received);

  const rate = 500;
  const seconds = quick ? 3 : 20;
  const total = rate * seconds;
  const events = Array.from({ length: total }, (_, n) => ({ uid: uidOf(n % deliveries), event_name: 'delivery.dropoff_enroute', status: `e${n}` }));
  const tokens = events.map((event) => signEvent(privateKey, event));
  const acks = [];
  let failed = 0;
  const baseline = received.count;
  const start = performance.now();
  const posts = [];
  for (let n = 0; n < total; n += 1) {
    const due = start + (n * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    const sent = performance.now();
    sentAt.set(events[n].status, sent);
    posts.push(
      poster.post(tokens[n], events[n]).then(
        (status) => (status === 200 ? acks.push(performance.now() - sent) : (failed += 1)),
        () => (failed += 1),
      ),
    );
  }
  await Promise.all(posts);
  const expected = acks.length * perDelivery;
  await until(() => received.count - baseline >= expected, 30_000, 'every event at every subscriber').catch(() => undefined);
  await sleep(200);
  const lost = expected - (received.count - baseline);
  await fleet.close();

  // Maximum verified-and-stored events/s: 64 concurrent posts, as fast as the facade acknowledges.
  const ingestTotal = quick ? 3_000 : 20_000;
  const ingestEvents = Array.from({ length: ingestTotal }, (_, n) => ({ uid: uidOf(1000 + (n % 500)), event_name: 'location.dropoff_enroute', driver_location: { lat: n, lng: n } }));
  const ingestTokens = ingestEvents.map((event) => signEvent(privateKey, event));
  let next = 0;
  let ingestOk = 0;
  const ingestStart = performance.now();
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < ingestTotal) {
        const n = next++;
        if ((await poster.post(ingestTokens[n], ingestEvents[n])) === 200) ingestOk += 1;
      }
    }),
  );
  const ingestRate = ingestOk / ((performance.now() - ingestStart) / 1000);
  await poster.close();
  return { acks, latencies, total, lost, failed, ingestRate, ingestTotal, deliveries, perDelivery, rate };
}

function realtimeRows(m) {
  return [
    ['webhook ack p50 / p99', `${fmt(percentile(m.acks, 50), 2)} / ${fmt(percentile(m.acks, 99), 2)} ms`, ''],
    ['webhook → subscriber p50 / p99', `${fmt(percentile(m.latencies, 50), 2)} / ${fmt(percentile(m.latencies, 99), 2)} ms`, 'p99 ≤ 10 ms'],
    ['events acknowledged', String(m.acks.length), `${m.total}`],
    ['messages lost', String(m.lost), '0'],
    ['webhooks refused or failed', String(m.failed), '0'],
    ['max verified-and-stored events/s', fmt(m.ingestRate, 0), '≥ 2,000'],
  ];
}

export async function realtime({ quick, command }) {
  const { publicKeyPem, privateKey } = keyPair();
  const upstream = await startUpstream();
  const facade = await startFacade(upstream.url, { publicKeyPem });
  const m = await measureRealtime({ quick, postOrigin: facade.origin, subscribeOrigin: facade.origin, privateKey });
  const body = [
    `One instance on the embedded SQLite store. ${m.deliveries * m.perDelivery} graphql-ws subscribers (${m.deliveries} deliveries × ${m.perDelivery}, one \`deliveryEvents(uids:)\` subscription per connection); ${m.total} signed webhooks posted at ${m.rate}/s, open loop. Latency is from the start of the POST to the subscriber's message, both in the load process. Ingest: ${m.ingestTotal} distinct signed events, 64 in flight, no subscribers of those deliveries.`,
    '',
    table(['metric', 'value', 'goal'], realtimeRows(m)),
  ].join('\n');
  writeSection('realtime', 'Realtime: webhooks to subscribers', body, { command, quick });
  await Promise.all([upstream.stop(), facade.stop()]);
}

/** The same measurement across two instances sharing Redis: webhooks to A, subscribers on B. */
export async function realtimeRedis({ quick, command }) {
  const redis = await startRedis();
  const { publicKeyPem, privateKey } = keyPair();
  const upstream = await startUpstream();
  const env = { REDIS_URL: redis.url };
  const a = await startFacade(upstream.url, { publicKeyPem, env });
  const b = await startFacade(upstream.url, { publicKeyPem, env });
  const m = await measureRealtime({ quick, postOrigin: a.origin, subscribeOrigin: b.origin, privateKey });
  const body = [
    `Two instances sharing one Redis (${redis.version}, \`appendonly yes\`, \`appendfsync always\`, on this machine): webhooks posted to instance A, the ${m.deliveries * m.perDelivery} subscribers connected to instance B; otherwise as the single-instance table above. Ingest is measured on A alone.`,
    '',
    table(['metric', 'value', 'goal'], realtimeRows(m)),
  ].join('\n');
  writeSection('realtime-redis', 'Realtime across instances on Redis', body, { command, quick });
  await Promise.all([upstream.stop(), a.stop(), b.stop()]);
  await redis.stop();
}

export async function fanOut({ quick, command }) {
  const { publicKeyPem, privateKey } = keyPair();
  const upstream = await startUpstream();
  const facade = await startFacade(upstream.url, { publicKeyPem });
  const poster = webhookPoster(facade.origin);
  const perDelivery = 10;
  const deliveries = quick ? 100 : 1000;
  const subscribers = deliveries * perDelivery;

  await sleep(500);
  const idleRss = facade.rssKb();
  const received = { count: 0, byDelivery: new Map() };
  const arrivals = [];
  const fleet = await subscriberFleet(facade.origin, KEY, subscribers, (i) => uidOf(i % deliveries), (i, event) => {
    received.count += 1;
    arrivals.push(performance.now());
    const d = i % deliveries;
    received.byDelivery.set(d, (received.byDelivery.get(d) ?? 0) + 1);
  });
  await warmUp(poster, privateKey, deliveries, perDelivery, received);
  await sleep(1000);
  const loadedRss = facade.rssKb();

  // One event: time until all subscribers of its delivery have it.
  const singles = [];
  for (let k = 0; k < 20; k += 1) {
    const d = k % deliveries;
    const before = received.byDelivery.get(d);
    const event = { uid: uidOf(d), event_name: 'delivery.dropoff_enroute', status: `single-${k}` };
    const token = signEvent(privateKey, event);
    const start = performance.now();
    await poster.post(token, event);
    await until(() => received.byDelivery.get(d) - before >= perDelivery, 10_000, 'one event at its subscribers');
    singles.push(performance.now() - start);
  }

  // A burst: one event to every delivery at once; time until all subscribers have theirs.
  const burst = Array.from({ length: deliveries }, (_, d) => ({ uid: uidOf(d), event_name: 'delivery.dropoff_arrived', status: 'burst' }));
  const burstTokens = burst.map((event) => signEvent(privateKey, event));
  const before = received.count;
  const burstStart = performance.now();
  await Promise.all(burst.map((event, d) => poster.post(burstTokens[d], event)));
  await until(() => received.count - before >= subscribers, 60_000, 'the burst at every subscriber');
  const burstMs = performance.now() - burstStart;

  const perSubscriberKb = (loadedRss - idleRss) / subscribers;
  const body = [
    `${subscribers} concurrent graphql-ws connections, one \`deliveryEvents(uids:)\` subscription each, ${perDelivery} per delivery. Memory is the facade's resident set (VmRSS) after the subscribers connected and one event reached each, minus its idle resident set.`,
    '',
    table(
      ['metric', 'value', 'goal'],
      [
        ['resident memory idle → with subscribers', `${fmt(idleRss / 1024, 0)} → ${fmt(loadedRss / 1024, 0)} MiB`, ''],
        ['resident memory per subscriber', `${fmt(perSubscriberKb, 1)} KB`, '≤ 30 KB'],
        [`one event → all ${perDelivery} subscribers of its delivery (median of 20)`, `${fmt(median(singles), 2)} ms`, ''],
        [`burst: one event per delivery → all ${subscribers} subscribers`, `${fmt(burstMs, 0)} ms`, ''],
      ],
    ),
  ].join('\n');
  writeSection('fan-out', 'Fan-out and memory', body, { command, quick });
  await fleet.close();
  await poster.close();
  await Promise.all([upstream.stop(), facade.stop()]);
}
