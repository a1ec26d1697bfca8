// Soak: signed webhooks at a steady 200/s for a long while against the built
// facade with a short retention, sampling what it keeps on disk (the SQLite file,
// its -wal and -shm) or in Redis, and its resident memory, every 30 s. With
// retention working, both level off once the first events expire.
// Not in `npm run bench`'s default list (an hour by default); run it by name:
//   npm run bench -- soak [--duration=60m] [--retention=2m] [--rate=200] [--sample=30s]
//   npm run bench -- soak-redis [same flags]
// or, with dist/ built and without installing the bench's own dependencies:
//   node -e "import('./bench/scenarios/soak.mjs').then((m) => m.soak({ flags: { duration: '5m' } }))"
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import { startFacade, startRedis, startUpstream } from '../lib/contenders.mjs';
import { describeLoopDelay, loopDelayOf, scrapeMetrics } from '../lib/loop-delay.mjs';
import { sleep } from '../lib/proc.mjs';
import { fmt, table } from '../lib/report.mjs';
import { ISSUER, keyPair, signEvent, webhookPoster } from '../lib/webhooks.mjs';

const UNITS_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/** (Not load.mjs's: this scenario runs without the bench's own dependencies, see the header.) */
function p99(values) {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(0.99 * sorted.length))];
}

/** "90s", "5m", "1h" → ms. */
function duration(flags, name, fallback) {
  const raw = flags[name] ?? fallback;
  const match = /^(\d+)(ms|s|m|h)$/.exec(raw);
  if (!match) throw new Error(`--${name}: expected a duration such as 30s, 5m or 1h, got "${raw}"`);
  return Number(match[1]) * UNITS_MS[match[2]];
}

/** Disk the data directory takes, as du counts it (allocated blocks), with the WAL and shared-memory files. */
function diskBytes(dir) {
  let bytes = 0;
  for (const name of readdirSync(dir)) {
    const stat = statSync(path.join(dir, name));
    if (stat.isFile()) bytes += stat.blocks * 512;
  }
  return bytes;
}

const uidOf = (i) => `00000000-0000-4000-a000-${String(i).padStart(12, '0')}`;
const NAMES = [
  'delivery.created',
  'delivery.assigned',
  'location.pickup_enroute',
  'delivery.pickup_complete',
  'location.dropoff_enroute',
  'delivery.dropoff_complete',
];
/** About the size of a real event's payload (addresses, items, platform data): ~1.5 KB of JSON. */
const FILLER = 'x'.repeat(1_000);

/** The n-th event: 1,000 deliveries in turn, every event distinct (no duplicate to skip). */
function eventOf(n) {
  return {
    uid: uidOf(n % 1_000),
    event_name: NAMES[Math.floor(n / 1_000) % NAMES.length],
    status: `soak ${n}`,
    driver_location: { lat: 52 + (n % 100) / 1_000, lng: 13 + (n % 77) / 1_000 },
    platform_payload: { n, order: { id: `O-${n}`, note: FILLER } },
  };
}

async function runSoak({ flags, storeLabel, env, measureStore }) {
  const durationMs = duration(flags, 'duration', '60m');
  const sampleMs = duration(flags, 'sample', '30s');
  const retention = flags.retention ?? '2m';
  const rate = Number(flags.rate ?? 200);
  const { publicKeyPem, privateKey } = keyPair();
  const upstream = await startUpstream();
  const facade = await startFacade(upstream.url, {
    publicKeyPem,
    issuer: ISSUER,
    env: { EVENT_RETENTION: retention, ...env },
  });
  const poster = webhookPoster(facade.origin);
  console.log(
    `soak (${storeLabel}): ${rate} signed webhooks/s for ${durationMs / 60_000} min, EVENT_RETENTION=${retention}, a sample every ${sampleMs / 1000} s`,
  );

  const samples = [];
  let sent = 0;
  let acked = 0;
  let failed = 0;
  let window = [];
  const sample = async (atMs) => {
    const store = await measureStore(facade);
    // The event-loop delay since the previous sample (each scrape starts a new window): retention passes run meanwhile.
    const loop = loopDelayOf(await scrapeMetrics(facade.origin));
    const row = {
      minutes: atMs / 60_000,
      sent,
      acked,
      failed,
      rssMiB: facade.rssKb() / 1024,
      ackP99: p99(window),
      loop,
      ...store,
    };
    window = [];
    samples.push(row);
    console.log(
      `  ${fmt(row.minutes, 1)} min: ${row.acked} acknowledged, ${row.failed} failed; ${row.storeLabel} ${row.store}; RSS ${fmt(row.rssMiB, 0)} MiB; ack p99 ${fmt(row.ackP99, 1)} ms; event loop ${describeLoopDelay(row.loop)}`,
    );
  };

  const start = performance.now();
  await sample(0);
  let nextSample = sampleMs;
  const inFlight = new Set();
  // Open loop at the rate: signing happens on the way (an hour's tokens would not fit in memory).
  for (let n = 0; ; n += 1) {
    const due = start + (n * 1000) / rate;
    const now = performance.now();
    if (due - start >= durationMs) break;
    if (due > now + 1) await sleep(due - now);
    if (performance.now() - start >= nextSample) {
      await sample(nextSample);
      nextSample += sampleMs;
    }
    const event = eventOf(n);
    const sentAt = performance.now();
    sent += 1;
    const post = poster.post(signEvent(privateKey, event), event).then(
      (status) => {
        if (status === 200) {
          acked += 1;
          window.push(performance.now() - sentAt);
        } else failed += 1;
      },
      () => (failed += 1),
    );
    inFlight.add(post);
    post.finally(() => inFlight.delete(post));
  }
  await Promise.all(inFlight);
  await sample(durationMs);
  await poster.close();
  await Promise.all([facade.stop(), upstream.stop()]);

  const label = samples[0].storeLabel;
  console.log(
    `\n${table(
      [
        'minutes',
        'sent',
        'acknowledged',
        'failed',
        label,
        'facade RSS (MiB)',
        'ack p99 (ms)',
        'event-loop delay since the last sample, max / p99',
      ],
      samples.map((row) => [
        fmt(row.minutes, 1),
        String(row.sent),
        String(row.acked),
        String(row.failed),
        row.store,
        fmt(row.rssMiB, 0),
        fmt(row.ackP99, 1),
        describeLoopDelay(row.loop),
      ]),
    )}\n`,
  );
  return { samples, facadeDataDir: facade.dataDir };
}

/** On the embedded SQLite store: the data directory's size. */
export async function soak({ flags = {} }) {
  await runSoak({
    flags,
    storeLabel: 'SQLite',
    env: {},
    measureStore: async (facade) => ({
      storeLabel: 'data dir (du, MiB)',
      store: fmt(diskBytes(facade.dataDir) / 2 ** 20, 1),
    }),
  });
}

/** On Redis: its used memory, entries in the log, and keys. */
export async function soakRedis({ flags = {} }) {
  const redis = await startRedis();
  const client = new Redis(redis.url);
  try {
    await runSoak({
      flags,
      storeLabel: 'Redis',
      env: { REDIS_URL: redis.url, CLIENT_TOKEN_SECRET: 'bench-client-token-secret-shared-by-instances' },
      measureStore: async () => {
        const memory = Number(/used_memory:(\d+)/.exec(await client.info('memory'))?.[1] ?? 0);
        const [keys, log] = await Promise.all([client.dbsize(), client.xlen('dg:log')]);
        return {
          storeLabel: 'Redis used memory (MiB) / log entries / keys',
          store: `${fmt(memory / 2 ** 20, 1)} / ${log} / ${keys}`,
        };
      },
    });
  } finally {
    client.disconnect();
    await redis.stop();
  }
}
