// Reconciliation's upstream cost: the compiled facade with webhooks off (no
// WEBHOOK_PUBLIC_KEY_FILE: polling alone, RECONCILE_INTERVAL_MS at its 5 s
// default) follows 1,000 deliveries, one deliveryUpdated subscription each, for
// a fixed time; the fixed upstream counts the reads it answers. Its deliveries
// never change, so this is the cost of reading, not of pushing changes.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { randomUUID } from 'node:crypto';
import { startFacade, startUpstream } from '../lib/contenders.mjs';
import { cpuMeter, describeCpu } from '../lib/cpu.mjs';
import { describeLoopDelay, loopDelayWindow } from '../lib/loop-delay.mjs';
import { sleep } from '../lib/proc.mjs';
import { fmt, table, thousands, writeSection } from '../lib/report.mjs';

const DELIVERIES = 1_000;
/** WS_MAX_SUBSCRIPTIONS is 100 per socket by default. */
const PER_SOCKET = 100;
const SUBSCRIPTION = 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { status } }';

async function upstreamCount(upstream) {
  return (await (await fetch(`${upstream.origin}/__count`)).json()).count;
}

export async function reconcile({ quick, command }) {
  const seconds = quick ? 15 : 60;
  const upstream = await startUpstream();
  const facade = await startFacade(upstream.url, { label: 'reconcile', env: { LOG_LEVEL: 'warn' } });
  const clients = [];
  try {
    const uids = Array.from({ length: DELIVERIES }, () => randomUUID());
    let firsts = 0;
    let errors = 0;
    const allLive = new Promise((resolve) => {
      const done = () => firsts + errors >= DELIVERIES && resolve();
      uids.forEach((uid, i) => {
        if (i % PER_SOCKET === 0) {
          clients.push(createClient({ url: `${facade.origin.replace('http', 'ws')}/graphql`, webSocketImpl: WebSocket, connectionParams: { authorization: 'Bearer sk_bench' }, retryAttempts: 0 }));
        }
        let first = true;
        clients.at(-1).subscribe(
          { query: SUBSCRIPTION, variables: { uid } },
          {
            next: () => {
              if (first) (first = false), (firsts += 1), done();
            },
            error: () => ((errors += 1), done()),
            complete: () => undefined,
          },
        );
      });
    });
    await allLive;
    if (errors > 0) throw new Error(`${errors} of ${DELIVERIES} subscriptions failed to start`);
    // Starting cost two reads each (the access check, the key's confirmation); counted from here on.
    const before = await upstreamCount(upstream);
    const loop = await loopDelayWindow([{ name: 'facade', origin: facade.origin }]);
    const meter = cpuMeter([
      { name: 'facade', pid: facade.child.pid },
      { name: 'upstream', pid: upstream.child.pid },
    ]);
    const started = performance.now();
    await sleep(seconds * 1000);
    const cpu = meter.stop();
    const loopDelay = (await loop.stop()).facade;
    const minutes = (performance.now() - started) / 60_000;
    const reads = (await upstreamCount(upstream)) - before - 1; // less the /__count itself
    const perThousandPerMinute = (reads / minutes) * (1000 / DELIVERIES);
    const body = [
      `The compiled facade (\`node dist/main.js\`, NODE_ENV=production) against the fixed upstream, with no WEBHOOK_PUBLIC_KEY_FILE: polling alone, RECONCILE_INTERVAL_MS at its default for that case (5 s), RECONCILE_MAX_READS_PER_SECOND 100. ${DELIVERIES} deliveryUpdated subscriptions (one per delivery, ${PER_SOCKET} per socket) in the orchestrator; after all had their first state, the upstream's GETs counted for ${seconds} s. The canned deliveries never change: the cost of reading alone. With webhooks on (30 s default) the same arithmetic gives at most 2,000 per 1,000 a minute, fewer as events put reads off.`,
      '',
      table(['metric', 'value'], [
        ['followed deliveries', thousands(DELIVERIES)],
        ['upstream reads in the window', thousands(reads)],
        // 1,000 deliveries every 5–6 s want about 10,900 a minute; RECONCILE_MAX_READS_PER_SECOND (100) allows 6,000.
        ['upstream reads per 1,000 followed deliveries per minute', `**${thousands(perThousandPerMinute)}** (wanted: one per 5–6 s each, about 10,900; allowed: 100/s, 6,000)`],
        ['CPU, % of one core', describeCpu(cpu, 2)],
        // All the facade's CPU in the window (idle timers and pings included), divided by the reads.
        ['facade CPU per read', `${fmt((cpu.byName.facade * 10 * minutes * 60_000) / Math.max(1, reads), 0)} µs`],
        ['event-loop delay in the window (from /metrics)', describeLoopDelay(loopDelay)],
      ]),
    ].join('\n');
    writeSection('reconcile', 'Reconciliation by polling (issue 21)', body, { command, quick });
  } finally {
    for (const client of clients) await client.dispose();
    await facade.stop();
    await upstream.stop();
  }
}
