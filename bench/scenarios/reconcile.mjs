// Reconciliation's upstream cost: the compiled facade with webhooks off (no
// WEBHOOK_PUBLIC_KEY_FILE: polling alone, RECONCILE_INTERVAL_MS at its 5 s
// default) follows 1,000 deliveries, one deliveryUpdated subscription each, for
// a fixed time; the fixed upstream counts the reads it answers. Its deliveries
// never change, so this is the cost of reading, not of pushing changes.
// Then the reads added for unfinished deliveries nobody follows (issue 30): a
// fresh facade reads 1,000 deliveries once through GraphQL (which records them
// as the key's), nobody subscribes, and the upstream counts the passes' reads
// over whole passes.
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
          clients.push(
            createClient({
              url: `${facade.origin.replace('http', 'ws')}/graphql`,
              webSocketImpl: WebSocket,
              connectionParams: { authorization: 'Bearer sk_bench' },
              retryAttempts: 0,
            }),
          );
        }
        let first = true;
        clients.at(-1).subscribe(
          { query: SUBSCRIPTION, variables: { uid } },
          {
            next: () => {
              if (!first) return;
              first = false;
              firsts += 1;
              done();
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
      table(
        ['metric', 'value'],
        [
          ['followed deliveries', thousands(DELIVERIES)],
          ['upstream reads in the window', thousands(reads)],
          // 1,000 deliveries every 5–6 s want about 10,900 a minute; RECONCILE_MAX_READS_PER_SECOND (100) allows 6,000.
          [
            'upstream reads per 1,000 followed deliveries per minute',
            `**${thousands(perThousandPerMinute)}** (wanted: one per 5–6 s each, about 10,900; allowed: 100/s, 6,000)`,
          ],
          ['CPU, % of one core', describeCpu(cpu, 2)],
          // All the facade's CPU in the window (idle timers and pings included), divided by the reads.
          ['facade CPU per read', `${fmt((cpu.byName.facade * 10 * minutes * 60_000) / Math.max(1, reads), 0)} µs`],
          ['event-loop delay in the window (from /metrics)', describeLoopDelay(loopDelay)],
        ],
      ),
    ].join('\n');
    writeSection('reconcile', 'Reconciliation by polling (issue 21)', body, { command, quick });
  } finally {
    for (const client of clients) await client.dispose();
    await facade.stop();
    await upstream.stop();
  }
  await reconcileUnfollowed({ quick, command });
}

/** RECONCILE_UNFOLLOWED_INTERVAL_MS's defaults: ten RECONCILE_INTERVAL_MS (5 s without webhooks, 30 s with). */
const UNFOLLOWED_DEFAULT_MS = { polling: 50_000, webhooks: 300_000 };
const READ = 'query($uid: ID!) { delivery(uid: $uid) { status } }';

/**
 * Reads added for unfinished deliveries nobody follows, per 1,000 a minute.
 * Full: RECONCILE_UNFOLLOWED_INTERVAL_MS at its default without webhooks (50 s),
 * over three whole passes. Quick: 500 deliveries on a 10 s pass over two, scaled to
 * the default. With webhooks (300 s) the same arithmetic is computed, not measured.
 */
async function reconcileUnfollowed({ quick, command }) {
  const deliveries = quick ? 500 : 1_000;
  const intervalMs = quick ? 10_000 : UNFOLLOWED_DEFAULT_MS.polling;
  const passes = quick ? 2 : 3;
  const upstream = await startUpstream();
  const env = { LOG_LEVEL: 'warn', ...(quick ? { RECONCILE_UNFOLLOWED_INTERVAL_MS: String(intervalMs) } : {}) };
  const facade = await startFacade(upstream.url, { label: 'reconcile-unfollowed', env });
  try {
    const uids = Array.from({ length: deliveries }, () => randomUUID());
    // One read each through the facade: the upstream lets the key read it, so it is the key's (an owner record), and
    // the key is in memory.
    let next = 0;
    const readOne = async () => {
      while (next < uids.length) {
        const uid = uids[next++];
        const response = await fetch(`${facade.origin}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: 'Bearer sk_bench' },
          body: JSON.stringify({ query: READ, variables: { uid } }),
        });
        const result = await response.json();
        if (result.data?.delivery?.status !== 'DROPOFF_ENROUTE')
          throw new Error(`reading ${uid} through the facade: ${JSON.stringify(result)}`);
      }
    };
    await Promise.all(Array.from({ length: 20 }, readOne));
    // The first pass comes an interval after the key did: from its first read on, whole passes are counted.
    const setup = await upstreamCount(upstream);
    while ((await upstreamCount(upstream)) - setup < 2) await sleep(100);
    const before = await upstreamCount(upstream);
    const started = performance.now();
    await sleep(passes * intervalMs);
    const minutes = (performance.now() - started) / 60_000;
    // Less the /__count calls of the window itself (one at each end).
    const reads = (await upstreamCount(upstream)) - before - 1;
    const perThousand = (reads / minutes) * (1000 / deliveries);
    const atDefault = perThousand * (intervalMs / UNFOLLOWED_DEFAULT_MS.polling);
    const withWebhooks = perThousand * (intervalMs / UNFOLLOWED_DEFAULT_MS.webhooks);
    const wanted = (1000 * 60_000) / intervalMs;
    const body = [
      `The compiled facade against the fixed upstream, webhooks off (RECONCILE_INTERVAL_MS 5 s, so RECONCILE_UNFOLLOWED_INTERVAL_MS ${quick ? `set to ${intervalMs / 1000} s for the quick run` : 'at its default, 50 s'}), RECONCILE_MAX_READS_PER_SECOND 100. ${thousands(deliveries)} deliveries read once each through GraphQL (each then the key's, its key in the facade's memory) and followed by nobody; the canned deliveries never change and never end. The upstream's GETs counted over ${passes} whole passes (${fmt(minutes * 60, 0)} s) from the first pass's first read. Each unfinished delivery is read once a pass; a delivery with webhooks coming is skipped, so these are the most it costs.`,
      '',
      table(
        ['metric', 'value'],
        [
          ['unfinished deliveries nobody follows', thousands(deliveries)],
          ['upstream reads in the window', thousands(reads)],
          [
            `reads per 1,000 unfinished deliveries per minute, at this run's ${intervalMs / 1000} s pass`,
            `${thousands(perThousand)} (one a pass each: ${thousands(wanted)})`,
          ],
          [
            'the same at the default without webhooks (50 s pass)',
            `**${thousands(atDefault)}** (computed: 1,200 at most, about 1,140 as pass starts spread by up to a tenth)`,
          ],
          [
            'the same at the default with webhooks (300 s pass; scaled from this run)',
            `**${thousands(withWebhooks)}** (computed: 200 at most, about 190 with the spread)`,
          ],
        ],
      ),
    ].join('\n');
    writeSection('reconcile-unfollowed', 'Reconciliation of deliveries nobody follows (issue 30)', body, {
      command,
      quick,
    });
  } finally {
    await facade.stop();
    await upstream.stop();
  }
}
