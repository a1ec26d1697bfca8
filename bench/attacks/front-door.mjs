// The front door under the attacks and deployments of issue 29, each facade
// side by side with an older build (--baseline=<checkout with dist/ built>):
//
// connection-caps: 70 idle keep-alive connections from one address with
//   MAX_CONNECTIONS=60, with WEBHOOK_PORT and on a shared PORT; meanwhile the
//   upstream posts signed webhooks (from 127.0.0.1, to WEBHOOK_PORT or PORT) and
//   two merchants on other addresses (127.0.0.2, 127.0.0.3) read a delivery.
//   Goal: every webhook acknowledged, every read answered.
// keepalive-webhook: one kept-alive connection, as a load balancer's: GET
//   /health or POST /graphql, then a webhook whose token is 40 KB, on the same
//   connection, round after round. Goal: every webhook stored (200).
// idle-headers: bench/attacks/large-headers.mjs for each build (3,000
//   connections to /graphql holding 12 KiB of headers until the deadline, then
//   trickling 200 KiB, with WEBHOOK_PORT and on a shared port, and to /webhooks
//   on a shared port): RSS side by side.
//   Goal (issue 37): 12 KiB held, peak RSS at most the older build's.
//
//   npm run bench -- connection-caps keepalive-webhook idle-headers [--quick] [--baseline=<checkout>] [--seconds=15]
//
// Other loopback addresses (127.0.0.2…) are the same host to Linux: they stand
// for other clients. --quick: a few seconds each, fewer idle connections;
// printed, not recorded.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, rmSync, statSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import path from 'node:path';
import { Agent, Pool, request } from 'undici';
import { FACADE_ENTRY, startFacade, startUpstream } from '../lib/contenders.mjs';
import { ROOT, BENCH, sleep } from '../lib/proc.mjs';
import { fmt, table, thousands, writeSection } from '../lib/report.mjs';
import { percentile } from '../lib/stats.mjs';
import { ISSUER, keyPair, signEvent } from '../lib/webhooks.mjs';

const KEY = 'sk_bench_merchant';
const UID = '00000000-0000-4000-b000-000000000001';
const READ = JSON.stringify({ query: `{ delivery(uid: "${UID}") { uid status } }` });

/** This checkout's build, and with --baseline another checkout's (its dist/ built), as columns. */
function buildsOf(flags) {
  const own = { label: `this checkout${commitOf(ROOT)}`, entry: FACADE_ENTRY, cwd: ROOT, root: ROOT };
  if (!existsSync(FACADE_ENTRY)) throw new Error(`${FACADE_ENTRY} does not exist: npm run build first`);
  if (!flags.baseline) return [own];
  const root = path.resolve(String(flags.baseline));
  const entry = path.join(root, 'dist/main.js');
  if (!existsSync(root) || !statSync(root).isDirectory() || !existsSync(entry))
    throw new Error(`--baseline: ${entry} does not exist (a checkout with npm run build done)`);
  return [own, { label: `${path.basename(root)}${commitOf(root)}`, entry, cwd: root, root }];
}

function commitOf(checkout) {
  const git = spawnSync('git', ['-C', checkout, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  return git.status === 0 ? ` @${git.stdout.trim()}` : '';
}

function freePort() {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

const counts = (map) => {
  const entries = [...map.entries()].sort((a, b) => b[1] - a[1]);
  return entries.length ? entries.map(([what, count]) => `${thousands(count)} × ${what}`).join('; ') : '0';
};
const bump = (map, key) => map.set(key, (map.get(key) ?? 0) + 1);
const reasonOf = (error) => error.code ?? error.cause?.code ?? error.name ?? 'error';

/**
 * `count` connections from `localAddress`, each sending GET /health and then
 * idling; resolves once each has its first answer or is closed. `sockets` to
 * close them afterwards; `outcomes` by first status (or "closed, no answer").
 */
async function holdIdle(port, count, localAddress) {
  const sockets = [];
  const outcomes = new Map();
  await Promise.all(
    Array.from({ length: count }, async () => {
      const socket = connect({ port, host: '127.0.0.1', localAddress });
      sockets.push(socket);
      socket.on('error', () => undefined);
      let received = '';
      await new Promise((resolve) => {
        socket.on('data', (chunk) => {
          received += chunk.toString('latin1');
          if (received.includes('\r\n\r\n')) resolve();
        });
        socket.on('close', resolve);
        socket.on('connect', () => socket.write('GET /health HTTP/1.1\r\nhost: attacker\r\n\r\n'));
      });
      bump(outcomes, /^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 'closed, no answer');
    }),
  );
  return {
    sockets,
    outcomes,
    open: () => sockets.filter((socket) => !socket.destroyed && socket.readyState === 'open').length,
  };
}

/** One phase of connection-caps: a fresh facade, the attacker, then webhooks and merchants for `seconds`. */
async function capsPhase({ build, setup, upstream, keys, seconds }) {
  const webhookPort = setup === 'WEBHOOK_PORT' ? await freePort() : undefined;
  const facade = await startFacade(upstream.url, {
    publicKeyPem: keys.publicKeyPem,
    issuer: ISSUER,
    entry: build.entry,
    cwd: build.cwd,
    label: 'connection-caps',
    // The caps at their defaults (startFacade turns the one per address off for the other scenarios).
    env: {
      MAX_CONNECTIONS: '60',
      MAX_CONNECTIONS_PER_ADDRESS: undefined,
      ...(webhookPort ? { WEBHOOK_PORT: String(webhookPort) } : {}),
    },
  });
  const origin = facade.origin;
  const webhookOrigin = webhookPort ? `http://127.0.0.1:${webhookPort}` : origin;
  const attacker = await holdIdle(Number(new URL(origin).port), 70, '127.0.0.5');
  await sleep(200);
  const heldAfterAttack = attacker.open();
  // The upstream's sender keeps a few connections, as a real one does; the merchants one each.
  const sender = new Pool(webhookOrigin, { connections: 4, localAddress: '127.0.0.1' });
  const merchants = ['127.0.0.2', '127.0.0.3'].map((localAddress) => new Agent({ localAddress, connections: 1 }));
  const webhooks = { sent: 0, acked: 0, other: new Map() };
  const reads = { sent: 0, answered: 0, other: new Map(), ms: [] };
  const until = performance.now() + seconds * 1000;
  let n = 0;
  const webhookLoop = (async () => {
    while (performance.now() < until) {
      const event = {
        uid: UID,
        event_name: 'location.dropoff_enroute',
        status: `caps ${n}`,
        driver_location: { lat: 37 + (n % 100) / 1000, lng: -122 },
      };
      n += 1;
      webhooks.sent += 1;
      try {
        const response = await sender.request({
          method: 'POST',
          path: '/webhooks',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${signEvent(keys.privateKey, event)}` },
          body: JSON.stringify(event),
          headersTimeout: 10_000,
        });
        await response.body.text();
        if (response.statusCode === 200) webhooks.acked += 1;
        else bump(webhooks.other, String(response.statusCode));
      } catch (error) {
        bump(webhooks.other, reasonOf(error));
      }
      await sleep(20);
    }
  })();
  const readLoops = merchants.map(async (dispatcher) => {
    while (performance.now() < until) {
      const started = performance.now();
      reads.sent += 1;
      try {
        const response = await request(`${origin}/graphql`, {
          method: 'POST',
          dispatcher,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
          body: READ,
          headersTimeout: 10_000,
        });
        const body = await response.body.json().catch(() => undefined);
        if (response.statusCode === 200 && body?.data?.delivery?.uid === UID) {
          reads.answered += 1;
          reads.ms.push(performance.now() - started);
        } else bump(reads.other, `${response.statusCode}${body?.error ? ` ${body.error}` : ''}`);
      } catch (error) {
        bump(reads.other, reasonOf(error));
      }
      await sleep(50);
    }
  });
  await Promise.all([webhookLoop, ...readLoops]);
  for (const socket of attacker.sockets) socket.destroy();
  await Promise.all([sender.close(), ...merchants.map((agent) => agent.close())]);
  await facade.stop();
  rmSync(facade.dataDir, { recursive: true, force: true });
  return { build, setup, attacker, heldAfterAttack, webhooks, reads };
}

export async function connectionCaps({ quick, command, flags = {} }) {
  const seconds = quick ? 3 : Number(flags.seconds ?? 15);
  const builds = buildsOf(flags);
  const keys = keyPair();
  const upstream = await startUpstream();
  const results = [];
  try {
    for (const setup of ['WEBHOOK_PORT', 'shared PORT']) {
      for (const build of builds) {
        console.log(`  ${build.label}, ${setup} …`);
        const result = await capsPhase({ build, setup, upstream, keys, seconds });
        console.log(
          `    attacker ${counts(result.attacker.outcomes)}; webhooks ${result.webhooks.acked}/${result.webhooks.sent}; reads ${result.reads.answered}/${result.reads.sent}`,
        );
        results.push(result);
      }
    }
  } finally {
    await upstream.stop();
  }
  const met = (result) => result.webhooks.acked === result.webhooks.sent && result.reads.answered === result.reads.sent;
  const body = [
    `70 connections from 127.0.0.5 each send GET /health and then idle (kept alive), against a fresh facade (compiled, production, SQLite, fixed upstream) with MAX_CONNECTIONS=60 and the other caps at their defaults; ` +
      `then for ${seconds} s the upstream posts signed webhooks from 127.0.0.1 (one after another, 20 ms apart, over up to 4 kept-alive connections) to WEBHOOK_PORT or PORT, ` +
      `and two merchants on 127.0.0.2 and 127.0.0.3 read a delivery every 50 ms (one connection each). Goal: every webhook acknowledged (200), every read answered.`,
    '',
    table(
      ['', ...results.map((result) => `${result.build.label}, ${result.setup}`)],
      [
        ['attacker: first answers', ...results.map((result) => counts(result.attacker.outcomes))],
        ['attacker: connections still held', ...results.map((result) => thousands(result.heldAfterAttack))],
        [
          'webhooks sent / acknowledged / not',
          ...results.map(
            ({ webhooks }) => `${thousands(webhooks.sent)} / ${thousands(webhooks.acked)} / ${counts(webhooks.other)}`,
          ),
        ],
        [
          'merchant reads sent / answered / not',
          ...results.map(
            ({ reads }) => `${thousands(reads.sent)} / ${thousands(reads.answered)} / ${counts(reads.other)}`,
          ),
        ],
        [
          'merchant read p50 / p99 (ms)',
          ...results.map(({ reads }) => `${fmt(percentile(reads.ms, 50), 1)} / ${fmt(percentile(reads.ms, 99), 1)}`),
        ],
        ['goal: every webhook and read answered', ...results.map((result) => (met(result) ? 'met' : '**not met**'))],
      ],
    ),
  ].join('\n');
  const own = results.filter((result) => result.build.root === ROOT);
  const goals = quick
    ? []
    : [
        {
          id: 'connection-caps',
          measured: own
            .map(
              (result) =>
                `${result.setup}: ${result.webhooks.acked}/${result.webhooks.sent} webhooks, ${result.reads.answered}/${result.reads.sent} reads`,
            )
            .join('; '),
          met: own.every(met),
        },
      ];
  writeSection('connection-caps', 'Connections from one address (issue 29)', body, { command, quick, goals });
}

/** A webhook token of about `bytes` (a large order echoed in the event). */
function largeToken(privateKey, bytes, n) {
  const event = {
    uid: UID,
    event_name: 'location.dropoff_enroute',
    status: `large ${n}`,
    platform_payload: { notes: 'n'.repeat(Math.ceil((bytes * 3) / 4)) },
  };
  return { token: signEvent(privateKey, event), body: JSON.stringify({ uid: UID, n }) };
}

export async function keptAliveWebhook({ quick, command, flags = {} }) {
  const rounds = quick ? 6 : Number(flags.rounds ?? 60);
  const builds = buildsOf(flags);
  const keys = keyPair();
  const upstream = await startUpstream();
  const results = [];
  const firsts = [
    ['GET /health', { method: 'GET', path: '/health' }],
    [
      'POST /graphql',
      {
        method: 'POST',
        path: '/graphql',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
        body: READ,
      },
    ],
  ];
  try {
    for (const build of builds) {
      const facade = await startFacade(upstream.url, {
        publicKeyPem: keys.publicKeyPem,
        issuer: ISSUER,
        entry: build.entry,
        cwd: build.cwd,
        label: 'keepalive-webhook',
      });
      try {
        for (const [name, first] of firsts) {
          // One connection, reused for every path, as nginx keepalive, Envoy or a cloud balancer does.
          const pool = new Pool(facade.origin, { connections: 1, pipelining: 1 });
          let connects = 0;
          pool.on('connect', () => (connects += 1));
          const outcome = { first: name, stored: 0, other: new Map(), tokenBytes: 0 };
          for (let round = 0; round < rounds; round += 1) {
            try {
              const before = await pool.request(first);
              await before.body.text();
              const { token, body } = largeToken(keys.privateKey, 40_000, round);
              outcome.tokenBytes = token.length;
              const response = await pool.request({
                method: 'POST',
                path: '/webhooks',
                headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
                body,
              });
              await response.body.text();
              if (response.statusCode === 200) outcome.stored += 1;
              else bump(outcome.other, String(response.statusCode));
            } catch (error) {
              bump(outcome.other, reasonOf(error));
            }
          }
          outcome.connects = connects;
          await pool.close();
          results.push({ build, ...outcome });
          console.log(
            `  ${build.label}, after ${name}: ${outcome.stored}/${rounds} stored (${counts(outcome.other)}), ${connects} connection(s)`,
          );
        }
      } finally {
        await facade.stop();
        rmSync(facade.dataDir, { recursive: true, force: true });
      }
    }
  } finally {
    await upstream.stop();
  }
  const body = [
    `One kept-alive connection (undici Pool, 1 connection), as a load balancer's: ${rounds} rounds of a first request, then a signed webhook whose token is about 40 KB (${thousands(results[0]?.tokenBytes)} bytes: a large order echoed in the event) on the same connection. ` +
      'A fresh facade per build (compiled, production, SQLite, fixed upstream). Goal: every webhook stored (200).',
    '',
    table(
      ['', ...results.map((result) => `${result.build.label}: after ${result.first}`)],
      [
        ['webhooks stored (200) / sent', ...results.map((result) => `${result.stored} / ${rounds}`)],
        ['not stored', ...results.map((result) => counts(result.other))],
        ['connections opened', ...results.map((result) => String(result.connects))],
        ['goal: every webhook stored', ...results.map((result) => (result.stored === rounds ? 'met' : '**not met**'))],
      ],
    ),
  ].join('\n');
  const own = results.filter((result) => result.build.root === ROOT);
  const goals = quick
    ? []
    : [
        {
          id: 'keepalive-webhook',
          measured: own.map((result) => `after ${result.first}: ${result.stored}/${rounds} stored`).join('; '),
          met: own.every((result) => result.stored === rounds),
        },
      ];
  writeSection('keepalive-webhook', 'Large webhooks on a kept-alive connection (issue 29)', body, {
    command,
    quick,
    goals,
  });
}

/** Runs bench/attacks/large-headers.mjs for one build and returns its JSON. */
function largeHeaders(build, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [path.join(BENCH, 'attacks/large-headers.mjs'), '--dist', '--root', build.root, ...args],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    child.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`large-headers.mjs exited ${code}`));
      resolve(JSON.parse(out.slice(out.indexOf('{'))));
    });
  });
}

export async function idleHeaders({ quick, command, flags = {} }) {
  const connections = quick ? 300 : Number(flags.connections ?? 3000);
  const seconds = quick ? 3 : 15;
  const builds = buildsOf(flags);
  const variants = [
    ['12 KiB held until the deadline', ['--header-kib', '12']],
    ['200 KiB trickled, WEBHOOK_PORT', ['--header-kib', '200', '--webhook-port']],
    ['200 KiB trickled, shared port', ['--header-kib', '200']],
    // What a shared port held on the older build too, for its webhook path: the most a connection may hold there.
    ['200 KiB trickled to /webhooks, shared port', ['--header-kib', '200', '--path', '/webhooks']],
  ];
  // Issue 37's goal: an idle connection costs no more than on the older build.
  const GOAL_VARIANT = variants[0][0];
  const GOAL_RATIO = 1.0;
  // The goal's variant runs several rounds, the builds alternating (and which goes first): a single run of either
  // moves by several % on a shared machine. Each build shows its median round.
  const goalRounds = quick ? 1 : Number(flags.rounds ?? 3);
  const results = [];
  for (const [variant, args] of variants) {
    const rounds = variant === GOAL_VARIANT ? goalRounds : 1;
    const runs = new Map(builds.map((build) => [build, []]));
    for (let round = 0; round < rounds; round += 1) {
      for (const build of round % 2 ? [...builds].reverse() : builds) {
        console.log(`  ${build.label}, ${variant}${rounds > 1 ? `, round ${round + 1} of ${rounds}` : ''} …`);
        const result = await largeHeaders(build, [
          ...args,
          '--connections',
          String(connections),
          '--seconds',
          String(seconds),
          '--after',
          quick ? '1' : '5',
        ]);
        runs.get(build).push(result);
        console.log(
          `    RSS ${result.rssMiB.before} → peak ${result.rssMiB.peak} MiB; answers ${JSON.stringify(result.answers)}`,
        );
      }
    }
    for (const build of builds) {
      const sorted = runs.get(build).sort((a, b) => a.rssMiB.peak - b.rssMiB.peak);
      const median = sorted[Math.floor((sorted.length - 1) / 2)];
      results.push({ build, variant, result: median, peaks: runs.get(build).map((each) => each.rssMiB.peak) });
    }
  }
  // Peak RSS (the process with its idle connections) against the other build's, in the same variant.
  const ratioOf = (result) => {
    const baseline = results.find((other) => other.variant === result.variant && other.build !== result.build);
    return baseline && result.build.root === ROOT ? result.result.rssMiB.peak / baseline.result.rssMiB.peak : undefined;
  };
  const shownRatio = (result) => {
    const ratio = ratioOf(result);
    if (ratio === undefined) return '—';
    const over = result.variant === GOAL_VARIANT && ratio > GOAL_RATIO ? ` (**over ${fmt(GOAL_RATIO, 1)}×**)` : '';
    return `${fmt(ratio, 2)}×${over}`;
  };
  const body = [
    `bench/attacks/large-headers.mjs for each build (compiled, embedded sandbox): ${thousands(connections)} connections to /graphql (or /webhooks) trickle headers in 8 KiB lines every 200 ms for ${seconds} s, never ending them, while a prober asks GET /health on fresh connections. ` +
      'With 12 KiB each connection is held until HEADERS_TIMEOUT_MS (10 s): what an idle connection costs. With 200 KiB and WEBHOOK_PORT the main port refuses each head as it passes 16 KiB; ' +
      "on a shared port this checkout's parser takes webhook-sized heads (the 16 KiB of /graphql is checked on the parsed head), so each is held until the deadline, where the older build refused it at 16 KiB; both builds hold such heads to the webhook path of a shared port. " +
      `Goal (issue 37): ${GOAL_VARIANT}, peak RSS at most ${fmt(GOAL_RATIO, 1)}× the other build's (on a shared machine a single run moves by several %).`,
    '',
    table(
      ['', ...results.map((each) => `${each.build.label}: ${each.variant}`)],
      [
        [
          'answers (first status)',
          ...results.map(
            ({ result }) =>
              Object.entries(result.answers)
                .map(([status, count]) => `${thousands(count)} × ${status}`)
                .join('; ') || 'none',
          ),
        ],
        [
          'closed by the server after p50 / max (ms)',
          ...results.map(
            ({ result }) => `${thousands(result.closedAfterMs.p50)} / ${thousands(result.closedAfterMs.max)}`,
          ),
        ],
        [
          'RSS before / peak / at end / after (MiB)',
          ...results.map(
            ({ result }) =>
              `${result.rssMiB.before} / ${result.rssMiB.peak} / ${result.rssMiB.atEnd} / ${result.rssMiB.after}`,
          ),
        ],
        [
          'RSS peak − before (MiB)',
          ...results.map(({ result }) => thousands(result.rssMiB.peak - result.rssMiB.before)),
        ],
        [
          'most open: connections, KiB each',
          ...results.map(
            ({ result }) => `${thousands(result.mostOpen.connections)}, ${result.mostOpen.kiBPerConnection ?? 'n/a'}`,
          ),
        ],
        ['facade CPU (share of a core)', ...results.map(({ result }) => fmt(result.facadeCpuShare, 2))],
        [
          '/health answered / failed, p99 (ms)',
          ...results.map(
            ({ result }) =>
              `${result.prober.answered} / ${JSON.stringify(result.prober.failed)}, ${result.prober.p99Ms}`,
          ),
        ],
        [
          'peak RSS of each round, sorted (MiB; the median shown above)',
          ...results.map(({ peaks }) => peaks.join(', ')),
        ],
        ["peak RSS against the other build's", ...results.map(shownRatio)],
      ],
    ),
  ].join('\n');
  // The goal needs the other build beside this one, and the full 3,000 connections.
  const goalRatio = results
    .filter((each) => each.variant === GOAL_VARIANT)
    .map(ratioOf)
    .find((ratio) => ratio !== undefined);
  const goals =
    quick || goalRatio === undefined || connections < 3000
      ? []
      : [
          {
            id: 'idle-headers',
            measured: results
              .map((each) => [each.variant, ratioOf(each)])
              .filter(([, ratio]) => ratio !== undefined)
              .map(([variant, ratio]) => `${variant}: ${fmt(ratio, 2)}×`)
              .join('; '),
            met: goalRatio <= GOAL_RATIO,
          },
        ];
  writeSection('idle-headers', 'Idle connections with large headers, side by side (issues 29, 37)', body, {
    command,
    quick,
    goals,
  });
}
