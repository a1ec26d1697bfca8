// Start-up: time from `node` start to the facade serving, and idle memory.
import { startFacade, startUpstream } from '../lib/contenders.mjs';
import { loopDelayOf, scrapeMetrics } from '../lib/loop-delay.mjs';
import { median } from '../lib/stats.mjs';
import { sleep } from '../lib/proc.mjs';
import { fmt, table, writeSection } from '../lib/report.mjs';

export async function startup({ quick, command }) {
  const runs = quick ? 2 : 7;
  const upstream = await startUpstream();
  const ready = [];
  const rss = [];
  const loops = [];
  for (let i = 0; i < runs; i += 1) {
    const facade = await startFacade(upstream.url, { label: 'startup' });
    ready.push(facade.readyMs);
    await sleep(1000);
    rss.push(facade.rssKb());
    // The first scrape's window runs from the start to now.
    loops.push(loopDelayOf(await scrapeMetrics(facade.origin))?.maxMs ?? NaN);
    await facade.stop();
  }
  const body = [
    `The compiled facade (\`node dist/main.js\`, NODE_ENV=production) against a fixed upstream; ${runs} starts. Ready = its "serving on" line, the HTTP server listening; idle memory read 1 s later.`,
    '',
    table(
      ['metric', 'median', 'min', 'max'],
      [
        [
          'node start → ready',
          `${fmt(median(ready), 0)} ms`,
          `${fmt(Math.min(...ready), 0)} ms`,
          `${fmt(Math.max(...ready), 0)} ms`,
        ],
        [
          'idle resident memory',
          `${fmt(median(rss) / 1024, 1)} MiB`,
          `${fmt(Math.min(...rss) / 1024, 1)} MiB`,
          `${fmt(Math.max(...rss) / 1024, 1)} MiB`,
        ],
        [
          'event-loop delay max, start to 1 s after ready (from /metrics)',
          `${fmt(median(loops), 1)} ms`,
          `${fmt(Math.min(...loops), 1)} ms`,
          `${fmt(Math.max(...loops), 1)} ms`,
        ],
      ],
    ),
  ].join('\n');
  writeSection('startup', 'Start-up', body, { command, quick });
  await upstream.stop();
}
