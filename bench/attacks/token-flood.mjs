// Token flood (issue 29): one client token sends distinct fragment-heavy
// documents (28 aliased `delivery(uid:)` reads spreading one fragment, 2 KB of
// text that resolves 1,456 fields; bench/lib/flood-documents.mjs) inside its
// rate limit, each twice in a row (the second run of a plan is the one a facade
// compiles), while a merchant reads a delivery at a fixed rate. Each facade
// (this checkout, then --baseline's) is fresh (compiled, production, SQLite,
// fixed upstream, every limit at its default) and goes through three phases:
// the merchant's reads alone (--before), the same with the flood (--duration),
// then the reads alone again (--idle, so that the heap is collected).
//
// It reports the merchant's read p50/p99 before and during the flood, the
// facade's RSS (from /proc), and from its /metrics the V8 heap used and what
// the document cache counts (delivery_graph_document_cache_bytes). The heap is
// also read once collected: each facade runs with a bench-only preload
// (bench/lib/gc-on-signal.mjs, --expose-gc) that collects it on SIGUSR2, before
// the flood and after the idle phase, so that its growth is what the facade
// still holds, set against the growth of the cache's count.
// test/integration/document-weights.test.ts measures the cache's count against
// the heap in a test; this is the same question under load.
//
// The goals (issue 29): RSS growth under 300 MB, the merchant's read p99 during
// the flood no more than 4x its p99 before it, and the heap held within 10 % of
// what the document cache counts.
//
//   npm run bench -- token-flood [--quick] [--baseline=<checkout with dist/ built>] [--duration=60s]
//     [--before=15s] [--idle=15s] [--rate=6.6] [--read-rate=50] [--heap=<MiB>] [--max-rss=4096]
// or, with dist/ built (and bench/node_modules installed): node bench/run.mjs token-flood […]
//
// --rate is the token's operations a second (issue 29: 6.6, inside
// CLIENT_TOKEN_RATE_LIMIT_PER_MINUTE's 600 a minute); --heap runs the facades
// with --max-old-space-size (issue 29 used 1024: the old code died of it);
// --max-rss (MiB) kills a facade whose RSS passes it. --quick (CI): 3 s per
// phase, printed, not recorded.
import { existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { startFacade, startUpstream } from '../lib/contenders.mjs';
import { fragmentHeavyDocument } from '../lib/flood-documents.mjs';
import { rssKb, sleep } from '../lib/proc.mjs';
import { fmt, table, thousands, writeSection } from '../lib/report.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { FACADE_SINGLE_READ, KEY } from '../scenarios/single-read.mjs';

const GOAL = { rssGrowthMiB: 300, p99Ratio: 4, heapWithin: 0.1 };
const UNITS_MS = { ms: 1, s: 1_000, m: 60_000 };
/** The delivery the merchant reads and the token is made for (the fixed upstream answers any). */
const UID = '00000000-0000-4000-8000-0000000000a1';
const MIB = 2 ** 20;
/** Collects a facade's heap on SIGUSR2 (bench-only, preloaded). */
const GC_ON_SIGNAL = fileURLToPath(new URL('../lib/gc-on-signal.mjs', import.meta.url));
/** In production /metrics is on the main port only with a token. */
const METRICS_TOKEN = 'token-flood-metrics-token-0123456789';

/** "60s", "500ms", "2m", or plain seconds → ms. */
function duration(flags, name, fallback) {
  const raw = String(flags[name] ?? fallback);
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(raw);
  if (!match) throw new Error(`--${name}: expected a duration such as 500ms, 60s or 2m, got "${raw}"`);
  return Number(match[1]) * UNITS_MS[match[2] ?? 's'];
}

function positive(flags, name, fallback) {
  const value = Number(flags[name] ?? fallback);
  if (!(value > 0)) throw new Error(`--${name}: expected a positive number, got "${flags[name]}"`);
  return value;
}

/** The facade's /metrics figures this scenario reads, in bytes; undefined when it does not answer within 2 s. */
async function metricsOf(origin) {
  try {
    const response = await request(`${origin}/metrics`, {
      headers: { authorization: `Bearer ${METRICS_TOKEN}` },
      headersTimeout: 2_000,
      bodyTimeout: 2_000,
    });
    const text = await response.body.text();
    const value = (name) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1]);
    return {
      heapUsed: value('nodejs_heap_size_used_bytes'),
      cacheBytes: value('delivery_graph_document_cache_bytes'),
      cacheEntries: value('delivery_graph_document_cache_entries'),
    };
  } catch {
    return undefined;
  }
}

/** The facade's /metrics figures once its heap is collected (SIGUSR2, gc-on-signal.mjs). */
async function collectedMetricsOf(pid, origin) {
  process.kill(pid, 'SIGUSR2');
  // The signal is handled on the facade's loop: a /metrics answer comes after it.
  await sleep(200);
  return metricsOf(origin);
}

function rssMiB(pid) {
  try {
    return rssKb(pid) / 1024;
  } catch {
    return undefined;
  }
}

async function graphql(origin, credential, query, variables) {
  const response = await request(`${origin}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${credential}` },
    body: JSON.stringify({ query, variables }),
  });
  return JSON.parse(await response.body.text());
}

/** One facade through its three phases. */
async function phase({ upstream, spec, settings, http, flood }) {
  const facade = await startFacade(upstream.url, {
    entry: spec.entry,
    cwd: spec.cwd,
    label: `token-flood-${spec.name}`,
    execArgv: ['--expose-gc', '--import', GC_ON_SIGNAL],
    // Every limit at its production default (startFacade lifts the merchant's rate limit otherwise). The fixed upstream
    // answers every key for every uid, as a key-scoped upstream would: a read is then the merchant's proof a token
    // needs (73fe34c ignores the setting).
    env: {
      RATE_LIMIT_PER_MINUTE: undefined,
      METRICS_TOKEN,
      UPSTREAM_READ_SCOPE: 'key',
      ...(settings.heapMiB
        ? {
            NODE_OPTIONS: [process.env.NODE_OPTIONS, `--max-old-space-size=${settings.heapMiB}`]
              .filter(Boolean)
              .join(' '),
          }
        : {}),
    },
  });
  const { pid } = facade.child;
  let exit;
  facade.child.once('exit', (code, signal) => (exit = { code, signal, at: performance.now() }));
  const origin = facade.origin;
  try {
    const minted = await graphql(
      origin,
      KEY,
      'mutation($uids: [ID!]!) { createClientToken(uids: $uids, ttlSeconds: 3600) { ... on MutationCreateClientTokenSuccess { data { token } } ... on Error { message } } }',
      { uids: [UID] },
    );
    const token = minted.data?.createClientToken?.data?.token;
    if (!token) throw new Error(`${spec.label}: no client token: ${JSON.stringify(minted).slice(0, 300)}`);
    const check = await graphql(
      origin,
      token,
      `
        query ($uid: ID!) {
          delivery(uid: $uid) {
            uid
            status
          }
        }
      `,
      { uid: UID },
    );
    if (check.data?.delivery?.uid !== UID)
      throw new Error(`${spec.label}: the token cannot read its delivery: ${JSON.stringify(check).slice(0, 300)}`);

    const read = {
      url: `${origin}/graphql`,
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ query: FACADE_SINGLE_READ, variables: { uid: UID } }),
    };
    // Warm: the read compiled, the connections open, and the token's kind of document through every path once
    // (numbered past the flood's), so that what the first of them sets up is not counted as the flood's.
    await http.call('fixedRate', { ...read, rate: settings.readRate, duration: 1 });
    for (let n = 0; n < 2; n += 1) {
      for (let run = 0; run < 2; run += 1) {
        const warm = await graphql(origin, token, fragmentHeavyDocument(1e9 + n, UID));
        if (warm.errors)
          throw new Error(
            `${spec.label}: the token's document was refused: ${JSON.stringify(warm.errors).slice(0, 300)}`,
          );
      }
    }
    const start = { rss: rssMiB(pid), metrics: await collectedMetricsOf(pid, origin) };
    const memory = { rssPeak: start.rss, heapPeak: start.metrics?.heapUsed, cachePeak: start.metrics?.cacheBytes };
    let sampling = true;
    let capped;
    const samplers = [
      (async () => {
        while (sampling && !exit) {
          const now = rssMiB(pid);
          if (now !== undefined) memory.rssPeak = Math.max(memory.rssPeak, now);
          if (now > settings.maxRssMiB && !capped) {
            capped = { at: performance.now(), rss: now };
            facade.child.kill('SIGKILL');
          }
          await sleep(100);
        }
      })(),
      (async () => {
        while (sampling && !exit) {
          const now = await metricsOf(origin);
          if (now) {
            memory.heapPeak = Math.max(memory.heapPeak ?? 0, now.heapUsed);
            memory.cachePeak = Math.max(memory.cachePeak ?? 0, now.cacheBytes);
          }
          await sleep(500);
        }
      })(),
    ];

    const before = await http.call('fixedRate', {
      ...read,
      rate: settings.readRate,
      duration: settings.beforeMs / 1000,
    });
    const floodStarted = performance.now();
    const watcher = setInterval(() => {
      if (exit) void flood.call('stop').catch(() => undefined);
    }, 100);
    const [during, attack] = await Promise.all([
      http.call('fixedRate', { ...read, rate: settings.readRate, duration: settings.durationMs / 1000 }),
      flood.call('paced', {
        origin,
        authorization: `Bearer ${token}`,
        uid: UID,
        rate: settings.rate,
        seconds: settings.durationMs / 1000,
        repeats: 2,
      }),
    ]);
    clearInterval(watcher);
    const floodMs = performance.now() - floodStarted;
    const end = { rss: rssMiB(pid), metrics: exit ? undefined : await metricsOf(origin) };
    const after = exit
      ? undefined
      : await http.call('fixedRate', { ...read, rate: settings.readRate, duration: settings.idleMs / 1000 });
    sampling = false;
    const idleEnd = { rss: rssMiB(pid), metrics: exit ? undefined : await collectedMetricsOf(pid, origin) };
    await Promise.all(samplers);

    let ending = 'ran throughout';
    if (capped)
      ending = `killed by the bench ${fmt((capped.at - floodStarted) / 1000, 0)} s into the flood: RSS ${thousands(capped.rss)} MiB, over --max-rss=${thousands(settings.maxRssMiB)}`;
    else if (exit)
      ending = `died ${fmt((exit.at - floodStarted) / 1000, 0)} s into the flood (${exit.signal ?? `exit code ${exit.code}`})`;
    return { spec, start, end, idleEnd, memory, before, during, after, attack, floodMs, ending, died: Boolean(exit) };
  } finally {
    await facade.stop();
  }
}

const mib = (bytes) => (Number.isFinite(bytes) ? thousands(bytes / MIB) : 'n/a');
const signed = (value) => (Number.isFinite(value) ? `${value >= 0 ? '+' : '−'}${thousands(Math.abs(value))}` : 'n/a');
const counts = (map) => {
  const entries = Object.entries(map ?? {}).sort((a, b) => b[1] - a[1]);
  return entries.length ? entries.map(([what, count]) => `${thousands(count)} × ${what}`).join('; ') : '0';
};

/**
 * What the facade's heap held after the idle phase against what its document cache counted, both collected and as
 * growth since the start.
 */
function heapVsCache(result) {
  const heapHeld = result.idleEnd.metrics?.heapUsed - result.start.metrics?.heapUsed;
  const counted = result.idleEnd.metrics?.cacheBytes - result.start.metrics?.cacheBytes;
  return { heapHeld, counted, ratio: heapHeld / counted };
}

function verdict(result) {
  const failed = [];
  if (result.died) failed.push('facade died');
  const growth = result.memory.rssPeak - result.start.rss;
  if (!(growth <= GOAL.rssGrowthMiB)) failed.push(`RSS +${thousands(growth)} MiB`);
  const ratio = result.during.p99 / result.before.p99;
  if (!(ratio <= GOAL.p99Ratio)) failed.push(`read p99 ${fmt(ratio, 1)}× its p99 before`);
  const { ratio: held } = heapVsCache(result);
  if (!(Math.abs(held - 1) <= GOAL.heapWithin)) failed.push(`heap held ${fmt(held, 2)}× what the cache counts`);
  return { met: failed.length === 0, failed };
}

function column(result) {
  const { start, end, idleEnd, memory, before, during, after, attack } = result;
  const { heapHeld, counted, ratio } = heapVsCache(result);
  const { met, failed } = verdict(result);
  return [
    result.ending,
    `${thousands(attack.sent)} / ${thousands(attack.answered)} (${thousands(attack.documents)} documents, ${fmt(attack.answered / (result.floodMs / 1000), 1)}/s)`,
    counts(attack.outcomes) + (Object.keys(attack.failures).length ? `; not answered: ${counts(attack.failures)}` : ''),
    `${fmt(attack.p50, 1)} / ${fmt(attack.p99, 1)} / ${fmt(attack.max, 0)}`,
    `${fmt(before.p50, 1)} / ${fmt(before.p99, 1)} (${thousands(before.requests)}, ${before.errors} errors)`,
    `${fmt(during.p50, 1)} / ${fmt(during.p99, 1)} (${thousands(during.requests)}, ${during.errors} errors)`,
    after ? `${fmt(after.p50, 1)} / ${fmt(after.p99, 1)}` : 'n/a',
    `**${fmt(during.p99 / before.p99, 1)}×**`,
    `${thousands(start.rss)} / ${thousands(memory.rssPeak)} / ${thousands(end.rss)} / ${thousands(idleEnd.rss)} (peak ${signed(memory.rssPeak - start.rss)})`,
    `${mib(start.metrics?.heapUsed)} / ${mib(memory.heapPeak)} / ${mib(end.metrics?.heapUsed)} / ${mib(idleEnd.metrics?.heapUsed)}`,
    `${mib(start.metrics?.cacheBytes)} / ${mib(memory.cachePeak)} / ${mib(idleEnd.metrics?.cacheBytes)} (${thousands(idleEnd.metrics?.cacheEntries)} entries)`,
    `${mib(heapHeld)} held / ${mib(counted)} counted: **${fmt(ratio, 2)}×**`,
    met ? 'met' : `**not met**: ${failed.join(', ')}`,
  ];
}

const ROWS = [
  'facade',
  'token operations sent / answered (distinct documents, answered/s)',
  'their answers (status, first error code)',
  'token operation latency p50 / p99 / max (ms)',
  "merchant's read before the flood: p50 / p99 ms (reads, errors)",
  "merchant's read during the flood: p50 / p99 ms (reads, errors)",
  "merchant's read after it: p50 / p99 ms",
  "merchant's read p99 during / before",
  'RSS start / peak / end / after idle (MiB)',
  'V8 heap used start (collected) / peak / end / after idle (collected) (MiB, /metrics)',
  'document cache counted start / peak / after idle (MiB, /metrics)',
  'heap growth (collected, after idle − start) / cache count growth',
  `goal: RSS ≤ start + ${GOAL.rssGrowthMiB} MiB, read p99 ≤ ${GOAL.p99Ratio}× before, heap within ${GOAL.heapWithin * 100} % of the count`,
];

export async function tokenFlood({ quick, command, flags = {} }) {
  const settings = {
    durationMs: quick ? 3_000 : duration(flags, 'duration', '60s'),
    beforeMs: quick ? 3_000 : duration(flags, 'before', '15s'),
    idleMs: quick ? 2_000 : duration(flags, 'idle', '15s'),
    rate: positive(flags, 'rate', 6.6),
    readRate: positive(flags, 'read-rate', 50),
    heapMiB: flags.heap ? positive(flags, 'heap', 1024) : undefined,
    maxRssMiB: positive(flags, 'max-rss', 4_096),
  };
  const specs = [
    {
      name: 'this',
      label: 'this checkout',
      entry: join(resolve(new URL('../..', import.meta.url).pathname), 'dist/main.js'),
      cwd: undefined,
    },
  ];
  if (flags.baseline) {
    const dir = resolve(flags.baseline);
    const entry = join(dir, 'dist/main.js');
    if (!existsSync(entry)) throw new Error(`--baseline: ${entry} does not exist (run npm run build in that checkout)`);
    specs.push({ name: 'baseline', label: `${basename(dir)} (--baseline)`, entry, cwd: dir });
  }
  console.log(
    `token flood: ${settings.rate} token operations/s (each document twice) for ${settings.durationMs / 1000} s, the merchant reading at ${settings.readRate}/s; ${specs.map((spec) => spec.label).join(' then ')}${settings.heapMiB ? `, --max-old-space-size=${settings.heapMiB}` : ''}`,
  );
  const upstream = await startUpstream();
  const http = forkWorker('http-load');
  const flood = forkWorker('flood');
  const results = [];
  try {
    for (const spec of specs) {
      console.log(`  ${spec.label} …`);
      const result = await phase({ upstream, spec, settings, http, flood });
      results.push(result);
      const { ratio } = heapVsCache(result);
      console.log(
        `    ${result.ending}; read p99 ${fmt(result.before.p99, 1)} → ${fmt(result.during.p99, 1)} ms; RSS +${thousands(result.memory.rssPeak - result.start.rss)} MiB; heap held ${fmt(ratio, 2)}× the cache's count`,
      );
    }
  } finally {
    await Promise.all([http.stop(), flood.stop(), upstream.stop()]);
  }

  const body = [
    `One client token sends issue 29's documents (28 aliased \`delivery(uid:)\` reads spreading one fragment, about 2 KB, 1,456 fields; every document distinct) at ${settings.rate} operations/s, open loop, each document twice in a row, for ${settings.durationMs / 1000} s, ` +
      `while the merchant reads one delivery (the single read's document) at ${settings.readRate}/s: ${settings.beforeMs / 1000} s of reads alone before the flood, the flood, then ${settings.idleMs / 1000} s of reads alone. ` +
      `Each column is a fresh facade (compiled, NODE_ENV=production, SQLite, the fixed upstream, every limit at its default${settings.heapMiB ? `, --max-old-space-size=${settings.heapMiB}` : ''}). ` +
      `RSS from /proc every 100 ms, V8's heap used and the document cache's count from /metrics every 500 ms; "collected": read after a bench-only preload (bench/lib/gc-on-signal.mjs, --expose-gc) collected the heap on SIGUSR2, at the start and after the idle phase, so the heap's growth is what the facade still holds. A facade over ${thousands(settings.maxRssMiB)} MiB of RSS is killed.`,
    '',
    table(
      ['', ...results.map((result) => result.spec.label)],
      ROWS.map((row, k) => [row, ...results.map((result) => column(result)[k])]),
    ),
  ].join('\n');
  const own = results[0];
  const goals =
    own && settings.durationMs >= 60_000
      ? [
          {
            id: 'token-flood',
            measured: `read p99 ${fmt(own.during.p99 / own.before.p99, 1)}× before, RSS ${signed(own.memory.rssPeak - own.start.rss)} MiB, heap held ${fmt(heapVsCache(own).ratio, 2)}× the count`,
            met: verdict(own).met,
          },
        ]
      : [];
  writeSection('token-flood', 'Token flood (issue 29)', body, { command, quick, goals });
}

// Run on its own: node bench/attacks/token-flood.mjs [--quick] [--name=value …] (the same flags).
if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const flags = Object.fromEntries(
    args.filter((arg) => /^--[\w-]+=/.test(arg)).map((arg) => arg.slice(2).split(/=(.*)/s, 2)),
  );
  await tokenFlood({
    quick: args.includes('--quick'),
    command: `node bench/attacks/token-flood.mjs ${args.join(' ')}`.trim(),
    flags,
  });
}
