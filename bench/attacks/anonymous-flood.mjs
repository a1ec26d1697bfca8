// Anonymous flood (issue 20): a few connections POST distinct, valid GraphQL
// documents without any Authorization header, each as soon as the last was
// answered, for --duration; first ~10 KB documents that read many fields of
// several deliveries, then ~1 MB ones (a short query padded with `# …` comment
// lines up to GRAPHQL_MAX_BODY_BYTES). Meanwhile GET /health is probed every
// --probe-every, signed webhooks are posted at --webhook-rate, and the facade's
// resident memory (/proc/<pid>/status) and V8 heap used (its /metrics) are
// sampled. Each kind of document gets a fresh facade (the compiled build,
// production mode, SQLite, against the fixed upstream), and so does a first
// --baseline phase with the probes and webhooks alone and no flood: on a shared
// machine, it shows how much of the /health and webhook figures is the machine.
//
// The goal (issue 20): the facade's RSS stays within 150 MiB of its start,
// /health p99 under 100 ms, and every webhook acknowledged (200).
//
//   npm run bench -- anonymous-flood [--quick] [--duration=60s] [--connections=12]
//     [--documents=10kb,1mb] [--facade=<checkout or dist/main.js>[,…]] [--heap=default,1024]
//     [--webhook-rate=50] [--webhook-deadline=10s] [--probe-every=50ms] [--idle=10s] [--baseline=10s]
//     [--max-rss=6144] [--body-bytes=1048576]
// or, with dist/ built (and bench/node_modules installed): node bench/run.mjs anonymous-flood […]
//
// --facade runs other builds (a checkout with dist/ built, or a dist/main.js):
// one after the other in the same run and the same table, to compare old and
// new code side by side (this checkout's dist/main.js when not given).
// --heap runs each facade with NODE_OPTIONS=--max-old-space-size=<MiB> (or
// Node's default limit): every combination of --facade and --heap is a column.
// --max-rss (MiB) kills a facade whose RSS passes it, so that a leaking build
// cannot exhaust the machine; the column then says so.
// --baseline=0 leaves the phase without a flood out.
// --quick (CI): 3 s per kind, 4 connections, 1 s of baseline and of idle; printed, not recorded.
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { Pool, request } from 'undici';
import { FACADE_ENTRY, startFacade, startUpstream } from '../lib/contenders.mjs';
import { cpuMeter } from '../lib/cpu.mjs';
import { DOCUMENTS } from '../lib/flood-documents.mjs';
import { describeLoopDelay, loopDelayOf, metricValue, scrapeMetrics, worstLoopDelay } from '../lib/loop-delay.mjs';
import { ROOT, rssKb, sleep } from '../lib/proc.mjs';
import { fmt, table, thousands, writeSection } from '../lib/report.mjs';
import { percentile } from '../lib/stats.mjs';
import { ISSUER, keyPair, signEvent, webhookPoster } from '../lib/webhooks.mjs';
import { forkWorker } from '../lib/worker.mjs';

/** The merchant key of the keyed check (the fixed upstream takes any). */
const KEY = 'sk_bench_merchant';
/** The phase without a flood (--baseline). */
const BASELINE = 'no flood';
const GOAL = { rssGrowthMiB: 150, healthP99Ms: 100 };
const UNITS_MS = { ms: 1, s: 1_000, m: 60_000 };
/** Flood documents are numbered from 0; the checks before it use numbers the flood never reaches. */
const CHECK_N = 2 ** 40;

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

/** The builds to run: --facade's comma-separated checkouts or entry files, or this checkout's dist/main.js. */
function facadesOf(flag) {
  const raws = flag ? String(flag).split(',').filter(Boolean) : [FACADE_ENTRY];
  return raws.map((raw) => {
    const resolved = path.resolve(raw);
    const isDir = existsSync(resolved) && statSync(resolved).isDirectory();
    const entry = isDir ? path.join(resolved, 'dist/main.js') : resolved;
    if (!existsSync(entry)) throw new Error(`--facade: ${entry} does not exist (run npm run build in that checkout)`);
    // <checkout>/dist/main.js: the facade runs from its checkout, as it would there.
    const checkout = isDir
      ? resolved
      : path.basename(path.dirname(entry)) === 'dist'
        ? path.dirname(path.dirname(entry))
        : path.dirname(entry);
    const own = entry === FACADE_ENTRY;
    const git = spawnSync('git', ['-C', checkout, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
    const commit = git.status === 0 ? git.stdout.trim() : undefined;
    const dirty =
      commit &&
      spawnSync('git', ['-C', checkout, 'status', '--porcelain', '--untracked-files=no', '--', 'src'], {
        encoding: 'utf8',
      }).stdout.trim() !== '';
    const name = own ? 'this checkout' : path.basename(checkout);
    return { entry, cwd: checkout, own, label: `${name}${commit ? ` @${commit}${dirty ? '+changes' : ''}` : ''}` };
  });
}

/** --heap: "default" or a limit in MiB, comma-separated. */
function heapsOf(flag) {
  return String(flag ?? 'default')
    .split(',')
    .filter(Boolean)
    .map((raw) => {
      if (raw === 'default') return 'default';
      const mib = Number(raw);
      if (!Number.isInteger(mib) || mib < 64)
        throw new Error(`--heap: expected "default" or a limit in MiB, got "${raw}"`);
      return mib;
    });
}

/** The environment a facade gets for a heap limit (NODE_OPTIONS as the orchestrator has it, plus the limit). */
function heapEnv(heap) {
  if (heap === 'default') return {};
  return { NODE_OPTIONS: [process.env.NODE_OPTIONS, `--max-old-space-size=${heap}`].filter(Boolean).join(' ') };
}

/**
 * V8's heap limit for a process started with that environment, in MiB (Node's default depends on the machine's memory).
 */
function heapLimitMiB(heap) {
  const probe = spawnSync(process.execPath, ['-p', 'v8.getHeapStatistics().heap_size_limit'], {
    env: { ...process.env, ...heapEnv(heap) },
    encoding: 'utf8',
  });
  return Number(probe.stdout) / 2 ** 20;
}

/**
 * From one scrape of the facade's /metrics: nodejs_heap_size_used_bytes in MiB,
 * and the event-loop delay since the previous scrape; undefined when it does not answer in time.
 */
async function metricsOf(origin) {
  const text = await scrapeMetrics(origin);
  const heap = metricValue(text, 'nodejs_heap_size_used_bytes');
  return { heapMiB: heap === undefined ? undefined : heap / 2 ** 20, loop: loopDelayOf(text) };
}

const heapUsedMiB = async (origin) => (await metricsOf(origin)).heapMiB;

/** The current RSS in MiB, or undefined once the process is gone. */
function rssMiB(pid) {
  try {
    return rssKb(pid) / 1024;
  } catch {
    return undefined;
  }
}

/**
 * One POST of a document, keyed or not: the status, the first error's code and
 * the answer's start. A facade may answer a large body 413 and close the
 * connection while the body is still being written: the client then sees the
 * write fail (EPIPE, ECONNRESET) instead of the answer. That is an answer too
 * (the body was refused unread), reported as `closed`, never a crash of the run.
 */
async function postOnce(origin, body, key) {
  let response;
  try {
    response = await request(`${origin}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
      body,
      headersTimeout: 30_000,
      bodyTimeout: 30_000,
    });
  } catch (error) {
    return {
      status: 0,
      errors: [],
      data: undefined,
      hasData: false,
      text: '',
      closed: error.code ?? error.cause?.code ?? error.name ?? 'error',
    };
  }
  let text;
  try {
    text = await response.body.text();
  } catch (error) {
    return {
      status: response.statusCode,
      errors: [],
      data: undefined,
      hasData: false,
      text: '',
      closed: error.code ?? error.cause?.code ?? error.name ?? 'error',
    };
  }
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return {
    status: response.statusCode,
    errors: parsed?.errors ?? [],
    data: parsed?.data,
    hasData: parsed?.data != null,
    text,
  };
}

/** An answer in a few words: its status, its data's fields, and its errors (the first one's message and code). */
function describeAnswer({ status, errors, data, text, closed }) {
  if (closed)
    return `${status ? `${status}, then ` : ''}the connection closed while the body was written (${closed}): refused before it was read`;
  if (data === undefined && errors.length === 0) return `${status}, not a GraphQL answer: \`${text.slice(0, 120)}\``;
  const fields = data && typeof data === 'object' ? Object.values(data) : [];
  const what =
    data === null
      ? 'data null'
      : fields.every((value) => value === null)
        ? `data with ${fields.length} field(s), all null`
        : 'data';
  const first = errors[0];
  return `${status}, ${what}, ${errors.length} error(s)${first ? `, the first "${first.message}" (${first.extensions?.code ?? 'no code'})` : ''}`;
}

/** A distinct webhook event (about as large as a real one); every one differs, so none is skipped as a duplicate. */
function eventOf(n) {
  return {
    uid: `00000000-0000-4000-b000-${String(n % 1_000).padStart(12, '0')}`,
    event_name: 'location.dropoff_enroute',
    status: `flood ${n}`,
    driver_location: { lat: 37 + (n % 100) / 1_000, lng: -122 - (n % 77) / 1_000 },
    platform_payload: { n, order: { id: `F-${n}`, note: 'x'.repeat(500) } },
  };
}

/** A bounded tail of a stream's output (the facade's last words when it dies). */
function tailOf(stream, bytes = 4_096) {
  let tail = '';
  stream.on('data', (chunk) => {
    tail = (tail + chunk.toString()).slice(-bytes);
  });
  return () => tail;
}

/** The baseline's stand-in for the flood's result: nothing sent. */
const NO_FLOOD = {
  sent: 0,
  answered: 0,
  bytesSent: 0,
  outcomes: {},
  failures: {},
  samples: {},
  p50: NaN,
  p99: NaN,
  max: NaN,
};

/**
 * One kind of document against one fresh facade: the flood with the probes,
 * webhooks and samples around it. Kind BASELINE: the same for --baseline, with
 * no flood (what the probes and webhooks get from this machine as it is).
 */
async function floodPhase({ upstream, facadeSpec, heap, kind, settings, keys, flood }) {
  const baseline = kind === BASELINE;
  const documents = DOCUMENTS[kind];
  const facade = await startFacade(upstream.url, {
    publicKeyPem: keys.publicKeyPem,
    issuer: ISSUER,
    entry: facadeSpec.entry,
    cwd: facadeSpec.cwd,
    label: `anonymous-flood-${kind}`,
    // The production default, not startFacade's unlimited one (anonymous requests take none of it anyway).
    env: { RATE_LIMIT_PER_MINUTE: undefined, ...heapEnv(heap), ...settings.facadeEnv },
  });
  const { pid } = facade.child;
  const stderrTail = tailOf(facade.child.stderr);
  const stdoutTail = tailOf(facade.child.stdout);
  let exit;
  facade.child.once('exit', (code, signal) => (exit = { code, signal, at: performance.now() }));
  const origin = facade.origin;
  try {
    // The documents are valid and within the limits: with a key, one is answered with data and no error.
    // (Reported, not required: a build with other limits may refuse them even with a key, and is still measured.)
    let keyed;
    let anonymous;
    if (!baseline) {
      keyed = await postOnce(origin, documents.body(CHECK_N, settings.bodyBytes), KEY);
      keyed.accepted = keyed.status === 200 && keyed.errors.length === 0 && keyed.hasData;
      if (!keyed.accepted)
        console.warn(`    a ${kind} document with a key was not answered with data: ${describeAnswer(keyed)}`);
      // And without one: what every request of the flood will get.
      anonymous = await postOnce(origin, documents.body(CHECK_N + 1, settings.bodyBytes));
    }

    // Warm the webhook and /health paths up before the start is read.
    const poster = webhookPoster(origin);
    let n = 0;
    for (let i = 0; i < 20; i += 1, n += 1)
      await poster.post(signEvent(keys.privateKey, eventOf(n)), eventOf(n)).catch(() => 0);
    const probePool = new Pool(origin, { connections: 1, pipelining: 1, headersTimeout: 10_000, bodyTimeout: 10_000 });
    for (let i = 0; i < 20; i += 1)
      await (await probePool.request({ method: 'GET', path: '/health' })).body.arrayBuffer();
    await sleep(settings.settleMs);

    const memory = { start: rssMiB(pid), peak: rssMiB(pid), heapStart: await heapUsedMiB(origin) };
    memory.heapPeak = memory.heapStart;
    let capped;
    let sampling = true;
    let flooding = true;
    const rssSampler = (async () => {
      while (sampling && !exit) {
        const now = rssMiB(pid);
        if (now !== undefined) memory.peak = Math.max(memory.peak, now);
        if (now > settings.maxRssMiB && !capped) {
          capped = { at: performance.now(), rss: now };
          facade.child.kill('SIGKILL');
        }
        await sleep(100);
      }
    })();
    // Each scrape also ends an event-loop delay window: the worst of those during the flood is kept.
    const loopDelays = [];
    const heapSampler = (async () => {
      while (sampling && !exit) {
        const { heapMiB: used, loop } = await metricsOf(origin);
        if (used !== undefined) memory.heapPeak = Math.max(memory.heapPeak ?? 0, used);
        if (flooding && loop) loopDelays.push(loop);
        await sleep(1_000);
      }
    })();

    const health = [];
    let healthFailed = 0;
    const prober = (async () => {
      while (flooding) {
        const started = performance.now();
        try {
          const response = await probePool.request({ method: 'GET', path: '/health' });
          await response.body.arrayBuffer();
          if (response.statusCode === 200) health.push(performance.now() - started);
          else {
            healthFailed += 1;
            health.push(Infinity);
          }
        } catch {
          // Not answered (within 10 s, or at all): worse than any answer.
          healthFailed += 1;
          health.push(Infinity);
        }
        await sleep(Math.max(0, settings.probeEveryMs - (performance.now() - started)));
      }
    })();

    const webhooks = { sent: 0, acked: 0, other: new Map(), ackMs: [] };
    const posts = new Set();
    const webhookLoop = (async () => {
      const start = performance.now();
      for (let k = 0; flooding; k += 1, n += 1) {
        const due = start + (k * 1000) / settings.webhookRate;
        if (due > performance.now() + 1) await sleep(due - performance.now());
        if (!flooding) break;
        const event = eventOf(n);
        const sentAt = performance.now();
        webhooks.sent += 1;
        // Acknowledged means 200 within the deadline of being posted (waiting for a free connection included).
        const post = poster
          .post(signEvent(keys.privateKey, event), event, { signal: AbortSignal.timeout(settings.webhookDeadlineMs) })
          .then(
            (status) => {
              if (status === 200) {
                webhooks.acked += 1;
                webhooks.ackMs.push(performance.now() - sentAt);
              } else webhooks.other.set(String(status), (webhooks.other.get(String(status)) ?? 0) + 1);
            },
            (error) => {
              const reason =
                error.name === 'TimeoutError' || error.cause?.name === 'TimeoutError'
                  ? `no answer in ${settings.webhookDeadlineMs / 1000} s`
                  : (error.code ?? error.name ?? 'error');
              webhooks.other.set(reason, (webhooks.other.get(reason) ?? 0) + 1);
            },
          );
        posts.add(post);
        void post.finally(() => posts.delete(post));
      }
    })();

    const cpu = cpuMeter([
      { name: 'facade', pid },
      { name: 'flood', pid: flood.pid },
    ]);
    const floodStarted = performance.now();
    // The facade dying, or passing the memory cap, ends the flood early.
    const watcher = setInterval(() => {
      if (exit) void flood.call('stop').catch(() => undefined);
    }, 100);
    const attack = baseline
      ? (await sleep(settings.baselineMs), NO_FLOOD)
      : await flood.call('run', {
          origin,
          kind,
          connections: settings.connections,
          seconds: settings.durationMs / 1000,
          bodyBytes: settings.bodyBytes,
        });
    clearInterval(watcher);
    const floodMs = performance.now() - floodStarted;
    let cpuShares;
    try {
      cpuShares = cpu.stop();
    } catch {
      cpuShares = undefined; // the facade is gone: its /proc entry with it
    }
    memory.end = rssMiB(pid);
    flooding = false;
    await Promise.all([prober, webhookLoop]);
    // Posts still waiting end by their deadline.
    await Promise.all([...posts]);
    memory.heapEnd = exit ? undefined : await heapUsedMiB(origin);
    // Idle: nothing sent; does the memory come back down?
    await sleep(settings.idleMs);
    memory.idle = rssMiB(pid);
    memory.heapIdle = exit ? undefined : await heapUsedMiB(origin);
    sampling = false;
    await Promise.all([rssSampler, heapSampler]);
    await Promise.all([poster.close(), probePool.close()]);

    let ending = 'ran throughout';
    if (capped)
      ending = `killed by the bench ${fmt((capped.at - floodStarted) / 1000, 0)} s into the flood: RSS ${thousands(capped.rss)} MiB, over --max-rss=${thousands(settings.maxRssMiB)}`;
    else if (exit) {
      const words = (stderrTail() || stdoutTail())
        .split('\n')
        .find((line) => /heap out of memory|FATAL|Error/i.test(line))
        ?.trim();
      ending = `died ${fmt((exit.at - floodStarted) / 1000, 0)} s into the flood (${exit.signal ?? `exit code ${exit.code}`})${words ? `: "${words.slice(0, 120)}"` : ''}`;
    }
    return {
      kind,
      heap,
      facadeSpec,
      keyed,
      anonymous,
      attack,
      floodMs,
      memory,
      health,
      healthFailed,
      webhooks,
      cpuShares,
      ending,
      died: Boolean(exit),
      loopDelay: worstLoopDelay(loopDelays),
    };
  } finally {
    await facade.stop();
    rmSync(facade.dataDir, { recursive: true, force: true });
  }
}

const mib = (value) => (value === undefined ? 'n/a' : thousands(value));
const delta = (value, start) =>
  value === undefined || start === undefined
    ? 'n/a'
    : `${value >= start ? '+' : '−'}${thousands(Math.abs(value - start))}`;
const ms = (value) => (value === Infinity ? 'not answered' : fmt(value, 1));
const withMs = (value) => (Number.isFinite(value) ? `${fmt(value, 1)} ms` : ms(value));
const counts = (map) => {
  const entries = Object.entries(map instanceof Map ? Object.fromEntries(map) : map).sort((a, b) => b[1] - a[1]);
  return entries.length ? entries.map(([what, count]) => `${thousands(count)} × ${what}`).join('; ') : '0';
};

/** Whether a phase met the goal, and if not, what failed. */
function verdict(result) {
  const failed = [];
  const growth = result.memory.peak - result.memory.start;
  if (result.died) failed.push('facade died');
  if (!(growth <= GOAL.rssGrowthMiB)) failed.push(`RSS +${thousands(growth)} MiB`);
  const p99 = percentile(result.health, 99);
  if (!(p99 < GOAL.healthP99Ms)) failed.push(`/health p99 ${withMs(p99)}`);
  if (result.webhooks.acked !== result.webhooks.sent)
    failed.push(`${thousands(result.webhooks.sent - result.webhooks.acked)} webhooks not acknowledged`);
  return { met: failed.length === 0, failed };
}

function column(result) {
  const { attack, memory, health, webhooks } = result;
  const baseline = result.kind === BASELINE;
  const rate = attack.answered / (result.floodMs / 1000);
  const probeCount = health.length;
  const { met, failed } = verdict(result);
  const none = baseline ? '—' : undefined;
  return [
    none ?? `${thousands(attack.bytesSent / attack.sent / 1024)} KiB each`,
    baseline
      ? `no flood: ${fmt(result.floodMs / 1000, 1)} s of probes and webhooks alone`
      : `${fmt(result.floodMs / 1000, 1)} s`,
    result.ending.replace('into the flood', baseline ? 'into the baseline' : 'into the flood'),
    none ?? `${thousands(attack.sent)} / ${thousands(attack.answered)} (${fmt(rate, 1)}/s)`,
    none ?? counts(attack.outcomes),
    none ?? counts(attack.failures),
    none ?? `${fmt(attack.p50, 1)} / ${fmt(attack.p99, 1)} / ${fmt(attack.max, 0)}`,
    `${mib(memory.start)} / ${mib(memory.peak)} / ${mib(memory.end)} / ${mib(memory.idle)}`,
    `${delta(memory.peak, memory.start)} / ${delta(memory.end, memory.start)} / ${delta(memory.idle, memory.start)}`,
    none ?? (attack.answered ? fmt(((memory.peak - memory.start) * 1024) / attack.answered, 0) : 'n/a'),
    `${mib(memory.heapStart)} / ${mib(memory.heapPeak)} / ${mib(memory.heapEnd)} / ${mib(memory.heapIdle)}`,
    `${thousands(probeCount - result.healthFailed)} / ${thousands(result.healthFailed)}`,
    `${ms(percentile(health, 50))} / ${ms(percentile(health, 99))} / ${ms(health.length ? health.reduce((most, v) => (v > most ? v : most), 0) : NaN)}`,
    `${thousands(webhooks.sent)} / ${thousands(webhooks.acked)} / ${counts(webhooks.other)}`,
    fmt(percentile(webhooks.ackMs, 99), 1),
    describeLoopDelay(result.loopDelay),
    result.cpuShares
      ? `${fmt(result.cpuShares.byName.facade, 0)} / ${fmt(result.cpuShares.byName.flood, 0)} / ${fmt(result.cpuShares.others, 0)}`
      : 'n/a (facade gone)',
    baseline
      ? `(no flood: ${met ? 'met' : `not met by the machine alone: ${failed.join(', ')}`})`
      : met
        ? 'met'
        : `**not met**: ${failed.join(', ')}`,
  ];
}

const ROWS = [
  'document size (JSON body)',
  'flood ran',
  'facade',
  'requests sent / answered (answered/s)',
  'answers (status, first error code)',
  'not answered',
  'answer latency p50 / p99 / max (ms)',
  'RSS start / peak / end / after idle (MiB)',
  'RSS peak / end / idle − start (MiB)',
  'RSS peak − start per answered request (KiB)',
  'V8 heap used start / peak / end / after idle (MiB)',
  '/health probes answered / failed',
  '/health p50 / p99 / max (ms)',
  'webhooks sent / acknowledged (200 within the deadline) / not',
  'webhook ack p99 (ms)',
  'event-loop delay during the flood, max / p99 (the worst 1 s window, from /metrics)',
  'CPU facade / flood / rest of machine (% of a core)',
  `goal: RSS ≤ start + ${GOAL.rssGrowthMiB} MiB, /health p99 < ${GOAL.healthP99Ms} ms, every webhook acknowledged`,
];

export async function anonymousFlood({ quick, command, flags = {} }) {
  const settings = {
    durationMs: quick ? Math.min(duration(flags, 'duration', '3s'), 3_000) : duration(flags, 'duration', '60s'),
    connections: positive(flags, 'connections', quick ? 4 : 12),
    webhookRate: positive(flags, 'webhook-rate', 50),
    probeEveryMs: duration(flags, 'probe-every', '50ms'),
    webhookDeadlineMs: duration(flags, 'webhook-deadline', '10s'),
    idleMs: quick ? 1_000 : duration(flags, 'idle', '10s'),
    settleMs: quick ? 200 : 1_000,
    baselineMs: quick ? 1_000 : duration(flags, 'baseline', '10s'),
    maxRssMiB: positive(flags, 'max-rss', 6_144),
    bodyBytes: positive(flags, 'body-bytes', 1_048_576),
    // --facade-env=NAME=value,NAME=value: settings for every facade (e.g. KEYLESS_REFUSALS_PER_MINUTE=0 measures the
    // pipeline's own cost).
    facadeEnv: Object.fromEntries(
      String(flags['facade-env'] ?? '')
        .split(',')
        .filter(Boolean)
        .map((pair) => pair.split(/=(.*)/s, 2)),
    ),
  };
  const kinds = String(flags.documents ?? '10kb,1mb')
    .split(',')
    .filter(Boolean);
  for (const kind of kinds)
    if (!DOCUMENTS[kind])
      throw new Error(`--documents: unknown "${kind}"; known: ${Object.keys(DOCUMENTS).join(', ')}`);
  const facades = facadesOf(flags.facade);
  const heaps = heapsOf(flags.heap);
  const heapLabels = new Map(
    heaps.map((heap) => [
      heap,
      heap === 'default' ? `default heap (${thousands(heapLimitMiB(heap))} MiB)` : `--max-old-space-size=${heap}`,
    ]),
  );
  const heapLabel = (heap) => heapLabels.get(heap);
  console.log(
    `anonymous flood: ${kinds.join(' then ')} documents${
      Object.keys(settings.facadeEnv).length
        ? ` (facades with ${Object.entries(settings.facadeEnv)
            .map(([name, value]) => `${name}=${value}`)
            .join(' ')})`
        : ''
    }, ${settings.connections} connections, ${settings.durationMs / 1000} s each; /health every ${settings.probeEveryMs} ms, ${settings.webhookRate} webhooks/s; RSS cap ${settings.maxRssMiB} MiB`,
  );

  const keys = keyPair();
  const upstream = await startUpstream();
  const flood = forkWorker('flood');
  const results = [];
  try {
    for (const facadeSpec of facades) {
      for (const heap of heaps) {
        for (const kind of [...(settings.baselineMs > 0 ? [BASELINE] : []), ...kinds]) {
          console.log(`  ${facadeSpec.label}, ${heapLabel(heap)}: ${DOCUMENTS[kind]?.label ?? kind} …`);
          const result = await floodPhase({ upstream, facadeSpec, heap, kind, settings, keys, flood });
          results.push({ ...result, header: `${facadeSpec.label}, ${heapLabel(heap)}: ${kind}` });
          console.log(
            `    ${result.ending}; RSS ${mib(result.memory.start)} → peak ${mib(result.memory.peak)} MiB; /health p99 ${withMs(percentile(result.health, 99))}; webhooks ${result.webhooks.acked}/${result.webhooks.sent}`,
          );
        }
      }
    }
  } finally {
    await flood.stop();
    await upstream.stop();
  }

  const columns = results.map(column);
  const answers = [];
  for (const kind of kinds) {
    const first = results.find((result) => result.kind === kind);
    if (!first) continue;
    answers.push(
      `- ${DOCUMENTS[kind].label}: with a key, ${first.keyed.accepted ? `${first.keyed.status} with data and no error (the document is valid and within the limits)` : `**not accepted**: ${describeAnswer(first.keyed)}`}; ` +
        `without one, ${describeAnswer(first.anonymous)}.`,
    );
  }
  const facadeList = facades
    .map((spec) => `${spec.label} (\`${path.relative(ROOT, spec.entry) || spec.entry}\`)`)
    .join(', ');
  const body = [
    `${settings.connections} connections POST distinct, valid GraphQL documents with no Authorization header, each as soon as the last is answered, for ${settings.durationMs / 1000} s per kind of document and facade: ` +
      `~10 KB documents (8 aliased \`delivery(uid:)\` reads of most fields, about 1,300 tokens, the order, fields, page size and group varying with every document), and ~1 MB documents (a short query, then \`#\` comment lines up to a ${thousands(settings.bodyBytes)}-byte body, GRAPHQL_MAX_BODY_BYTES's default). ` +
      `Meanwhile GET /health every ${settings.probeEveryMs} ms (one keep-alive connection; a probe not answered within 10 s counts as not answered, above every latency), ${settings.webhookRate} signed webhooks/s (open loop, distinct events; acknowledged = 200 within ${settings.webhookDeadlineMs / 1000} s of being posted), RSS from /proc every 100 ms and V8's heap used from /metrics every second (when it answers within 2 s: a stalled facade's peak may be missed). ` +
      `Each column is a fresh facade (compiled, NODE_ENV=production, SQLite, fixed upstream, RATE_LIMIT_PER_MINUTE at its default); "after idle" is ${settings.idleMs / 1000} s after the flood, with nothing sent. A facade over ${thousands(settings.maxRssMiB)} MiB of RSS is killed. ` +
      `${settings.baselineMs > 0 ? `The "${BASELINE}" columns run the probes and webhooks alone for ${settings.baselineMs / 1000} s: what the machine (2 cores, shared) gives without any flood. ` : ''}` +
      `"Rest of machine" is the CPU that processes other than the facade, the flood and this orchestrator used meanwhile. Facades: ${facadeList}.`,
    '',
    'What the facade answers (checked on each fresh facade before its flood):',
    ...answers,
    '',
    table(
      ['', ...results.map((result) => result.header)],
      ROWS.map((row, k) => [row, ...columns.map((cells) => cells[k])]),
    ),
  ].join('\n');

  // The goal is this checkout's, measured with Node's default heap over a full run of both kinds.
  const own = results.filter(
    (result) => result.facadeSpec.own && result.heap === 'default' && result.kind !== BASELINE,
  );
  const goals =
    own.length === 2 && settings.durationMs >= 60_000
      ? [
          {
            id: 'anonymous-flood',
            measured: own
              .map(
                (result) =>
                  `${result.kind}: RSS ${delta(result.memory.peak, result.memory.start)} MiB, /health p99 ${withMs(percentile(result.health, 99))}, ${result.webhooks.acked}/${result.webhooks.sent} webhooks`,
              )
              .join('; '),
            met: own.every((result) => verdict(result).met),
          },
        ]
      : [];
  writeSection('anonymous-flood', 'Anonymous flood (issue 20)', body, { command, quick, goals });
}

// Run on its own: node bench/attacks/anonymous-flood.mjs [--quick] [--name=value …] (the same flags).
if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const flags = Object.fromEntries(
    args.filter((arg) => /^--[\w-]+=/.test(arg)).map((arg) => arg.slice(2).split(/=(.*)/s, 2)),
  );
  await anonymousFlood({
    quick: args.includes('--quick'),
    command: `node bench/attacks/anonymous-flood.mjs ${args.join(' ')}`.trim(),
    flags,
  });
}
