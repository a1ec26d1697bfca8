// Keyless floods (issue 29): what needs no key is not free, and a made-up key
// is no key. Three floods, each against a fresh facade, each from --connections
// clients (3, as the review had it) posting one distinct document as soon as the
// last was answered (bench/load/flood.mjs, bench/lib/flood-documents.mjs):
//   - introspection: the costliest introspection a caller without a key may
//     still run (2 aliased listings of every type, about 6,900 values and
//     150 KB answered), the facade in development (introspection on);
//   - fragments: 220-fragment `__typename` documents (cheap to answer, slow to
//     validate), the facade in production;
//   - made-up-key: the same documents with `Authorization: Bearer <made-up key>`,
//     in production (nothing they ask reaches the upstream, so the key is never
//     judged).
// Meanwhile a merchant with an accepted key reads one delivery at --read-rate
// (open loop, a microsecond clock: the fixed-rate client of the single read),
// for --duration before the flood and --duration during it. The goal: the
// merchant's read p99 during each flood no more than 4× its p99 before it.
//
// --baseline=<checkout> runs that checkout's build too (its dist/main.js; e.g.
// /work/baseline at 73fe34c), each flood against both, side by side in one table.
//
//   npm run bench -- keyless-flood [--quick] [--duration=30s] [--read-rate=50] [--connections=3]
//     [--floods=introspection,fragments,made-up-key] [--baseline=<checkout>] [--facade-env=NAME=value,…]
// or, with dist/ built (and bench/node_modules installed): node bench/run.mjs keyless-flood […]
//
// --quick (CI): 3 s before and 3 s during each flood; printed, not recorded.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { FACADE_ENTRY, startFacade, startUpstream } from '../lib/contenders.mjs';
import { cpuMeter } from '../lib/cpu.mjs';
import { KEYLESS_DOCUMENTS } from '../lib/flood-documents.mjs';
import { ROOT, sleep } from '../lib/proc.mjs';
import { fmt, table, thousands, writeSection } from '../lib/report.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { FACADE_SINGLE_READ, KEY } from '../scenarios/single-read.mjs';

const GOAL_RATIO = 4;
const UNITS_MS = { ms: 1, s: 1_000, m: 60_000 };
/** The delivery the merchant reads (the fixed upstream answers any uid). */
const MERCHANT_UID = '00000000-0000-4000-8000-00000000f10d';

function duration(flags, name, fallback) {
  const raw = String(flags[name] ?? fallback);
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(raw);
  if (!match) throw new Error(`--${name}: expected a duration such as 500ms, 30s or 2m, got "${raw}"`);
  return Number(match[1]) * UNITS_MS[match[2] ?? 's'];
}

function positive(flags, name, fallback) {
  const value = Number(flags[name] ?? fallback);
  if (!(value > 0)) throw new Error(`--${name}: expected a positive number, got "${flags[name]}"`);
  return value;
}

/** This checkout, and --baseline's when given. */
function facadesOf(baseline) {
  const facades = [{ label: 'this checkout', entry: FACADE_ENTRY, cwd: ROOT }];
  if (baseline) {
    const dir = path.resolve(String(baseline));
    const entry = path.join(dir, 'dist/main.js');
    if (!existsSync(entry)) throw new Error(`--baseline: ${entry} does not exist (run npm run build in that checkout)`);
    facades.push({ label: `baseline (${path.basename(dir)})`, entry, cwd: dir });
  }
  return facades;
}

/** The merchant's read at a fixed rate for `ms`: p50/p99 (ms) and failures. */
function merchantReads(http, origin, settings, ms) {
  return http.call('fixedRate', {
    url: `${origin}/graphql`,
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ query: FACADE_SINGLE_READ, variables: { uid: MERCHANT_UID } }),
    rate: settings.readRate,
    duration: ms / 1000,
  });
}

/** One flood against one fresh facade: the merchant's reads before it and during it. */
async function floodPhase({ upstream, facadeSpec, kind, settings, flood, http }) {
  const documents = KEYLESS_DOCUMENTS[kind];
  const facade = await startFacade(upstream.url, {
    entry: facadeSpec.entry,
    cwd: facadeSpec.cwd,
    label: `keyless-flood-${kind}`,
    // RATE_LIMIT_PER_MINUTE at its default: what a made-up key got from it was part of the finding.
    env: { RATE_LIMIT_PER_MINUTE: undefined, ...documents.env, ...settings.facadeEnv },
  });
  try {
    const { origin } = facade;
    // The merchant's key accepted, and both paths warm, before anything is measured.
    await merchantReads(http, origin, { ...settings, readRate: 50 }, 1_000);
    const before = await merchantReads(http, origin, settings, settings.durationMs);
    const cpu = cpuMeter([
      { name: 'facade', pid: facade.child.pid },
      { name: 'flood', pid: flood.pid },
    ]);
    // The flood starts first and outlasts the reads, so every read of the second window is sent during it.
    const attack = flood.call('run', {
      origin,
      kind,
      connections: settings.connections,
      seconds: (settings.durationMs + settings.leadMs * 2) / 1000,
      bodyBytes: 0,
    });
    await sleep(settings.leadMs);
    const during = await merchantReads(http, origin, settings, settings.durationMs);
    const flooded = await attack;
    const shares = cpu.stop();
    return { kind, facadeSpec, before, during, flooded, shares };
  } finally {
    await facade.stop();
  }
}

const ms = (value) => fmt(value, 1);
const counts = (map) => {
  const entries = Object.entries(map).sort((a, b) => b[1] - a[1]);
  return entries.length ? entries.map(([what, count]) => `${thousands(count)} × ${what}`).join('; ') : '0';
};

function verdict(result) {
  const ratio = result.during.p99 / result.before.p99;
  return { ratio, met: Number.isFinite(ratio) && ratio <= GOAL_RATIO && result.during.errors === 0 };
}

function column(result) {
  const { before, during, flooded, shares } = result;
  const { ratio, met } = verdict(result);
  return [
    `${thousands(flooded.answered)} in ${fmt(flooded.elapsedMs / 1000, 1)} s (${fmt(flooded.answered / (flooded.elapsedMs / 1000), 1)}/s)`,
    counts(flooded.outcomes),
    `${ms(flooded.p50)} / ${ms(flooded.p99)}`,
    `${ms(before.p50)} / ${ms(before.p99)} (${thousands(before.requests)} reads, ${before.errors} failed)`,
    `${ms(during.p50)} / ${ms(during.p99)} (${thousands(during.requests)} reads, ${during.errors} failed)`,
    `${fmt(ratio, 2)}×`,
    `${fmt(shares.byName.facade, 0)} / ${fmt(shares.byName.flood, 0)} / ${fmt(shares.others, 0)}`,
    met ? 'met' : '**not met**',
  ];
}

const ROWS = [
  'flood answers (answered/s)',
  'flood answers (status, first error code)',
  'flood answer latency p50 / p99 (ms)',
  "merchant's read p50 / p99 before the flood (ms)",
  "merchant's read p50 / p99 during the flood (ms)",
  'p99 during ÷ p99 before',
  'CPU during: facade / flood / rest of machine (% of a core)',
  `goal: p99 during ≤ ${GOAL_RATIO}× before, no read failed`,
];

export async function keylessFlood({ quick, command, flags = {} }) {
  const settings = {
    durationMs: quick ? Math.min(duration(flags, 'duration', '3s'), 3_000) : duration(flags, 'duration', '30s'),
    leadMs: quick ? 300 : 1_000,
    readRate: positive(flags, 'read-rate', 50),
    connections: positive(flags, 'connections', 3),
    // --facade-env=NAME=value,NAME=value: settings for every facade (e.g. KEYLESS_WORK_MS_PER_MINUTE=0 shows the flood
    // uncharged).
    facadeEnv: Object.fromEntries(
      String(flags['facade-env'] ?? '')
        .split(',')
        .filter(Boolean)
        .map((pair) => pair.split(/=(.*)/s, 2)),
    ),
  };
  const kinds = String(flags.floods ?? Object.keys(KEYLESS_DOCUMENTS).join(','))
    .split(',')
    .filter(Boolean);
  for (const kind of kinds)
    if (!KEYLESS_DOCUMENTS[kind])
      throw new Error(`--floods: unknown "${kind}"; known: ${Object.keys(KEYLESS_DOCUMENTS).join(', ')}`);
  const facades = facadesOf(flags.baseline);
  console.log(
    `keyless floods: ${kinds.join(', ')}; ${settings.connections} connections each; the merchant's read at ${settings.readRate}/s for ${settings.durationMs / 1000} s before and during; facades: ${facades.map((f) => f.label).join(', ')}`,
  );

  const upstream = await startUpstream();
  const flood = forkWorker('flood');
  const http = forkWorker('http-load');
  const results = [];
  try {
    for (const kind of kinds) {
      // Each flood against every facade in turn, so the columns to compare were measured minutes apart at most.
      for (const facadeSpec of facades) {
        console.log(`  ${facadeSpec.label}: ${KEYLESS_DOCUMENTS[kind].label} …`);
        const result = await floodPhase({ upstream, facadeSpec, kind, settings, flood, http });
        results.push(result);
        const { ratio } = verdict(result);
        console.log(
          `    merchant p99 ${ms(result.before.p99)} → ${ms(result.during.p99)} ms (${fmt(ratio, 2)}×); flood: ${counts(result.flooded.outcomes)}`,
        );
      }
    }
  } finally {
    await Promise.all([flood.stop(), http.stop()]);
    await upstream.stop();
  }

  const body = [
    `${settings.connections} connections each POST distinct documents without an accepted key, each as soon as the last is answered, against a fresh facade per flood (compiled, SQLite, fixed upstream, RATE_LIMIT_PER_MINUTE and the keyless budgets at their defaults${
      Object.keys(settings.facadeEnv).length
        ? `, and ${Object.entries(settings.facadeEnv)
            .map(([name, value]) => `${name}=${value}`)
            .join(' ')}`
        : ''
    }). ` +
      `Meanwhile a merchant whose key the upstream accepted reads one delivery (the single read's ~25 fields) at ${settings.readRate}/s, open loop, for ${settings.durationMs / 1000} s before the flood and ${settings.durationMs / 1000} s during it (the flood starts ${settings.leadMs / 1000} s earlier and ends later). All from one client address, as three clients behind one NAT would be.`,
    '',
    ...kinds.map((kind) => `- ${kind}: ${KEYLESS_DOCUMENTS[kind].label}.`),
    '',
    table(
      ['', ...results.map((result) => `${result.kind}: ${result.facadeSpec.label}`)],
      ROWS.map((row, k) => [row, ...results.map((result) => column(result)[k])]),
    ),
  ].join('\n');
  const own = results.filter((result) => result.facadeSpec.entry === FACADE_ENTRY);
  const goals =
    own.length === Object.keys(KEYLESS_DOCUMENTS).length && settings.durationMs >= 30_000
      ? [
          {
            id: 'keyless-flood',
            measured: own
              .map(
                (result) =>
                  `${result.kind}: p99 ${ms(result.before.p99)} → ${ms(result.during.p99)} ms (${fmt(verdict(result).ratio, 2)}×)`,
              )
              .join('; '),
            met: own.every((result) => verdict(result).met),
          },
        ]
      : [];
  writeSection('keyless-flood', 'Keyless floods (issue 29)', body, { command, quick, goals });
}

// Run on its own: node bench/attacks/keyless-flood.mjs [--quick] [--name=value …] (the same flags).
if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const flags = Object.fromEntries(
    args.filter((arg) => /^--[\w-]+=/.test(arg)).map((arg) => arg.slice(2).split(/=(.*)/s, 2)),
  );
  await keylessFlood({
    quick: args.includes('--quick'),
    command: `node bench/attacks/keyless-flood.mjs ${args.join(' ')}`.trim(),
    flags,
  });
}
