// HTTP load in a process of its own: autocannon (maximum throughput), the
// fixed-rate open-loop client, and sequential requests for the batch read.
// Driven by the orchestrator over IPC (bench/lib/worker.mjs).
import { fixedRate, load } from '../lib/load.mjs';
import { median, percentile } from '../lib/stats.mjs';
import { serve } from '../lib/worker.mjs';

serve({
  autocannon: (options) => load(options),
  fixedRate: (options) => fixedRate(options),

  /**
   * One request at a time, `iterations` times: wall time of each, and how many
   * requests the fixed upstream served for it (its counter reset before each).
   */
  async sequential({ url, headers, body, iterations, upstreamOrigin }) {
    const walls = [];
    const counts = [];
    for (let i = 0; i < iterations; i += 1) {
      await fetch(`${upstreamOrigin}/__reset`);
      const started = performance.now();
      const response = await fetch(url, { method: 'POST', headers, body });
      const result = await response.json();
      walls.push(performance.now() - started);
      if (result.errors) throw new Error(JSON.stringify(result.errors).slice(0, 300));
      counts.push((await (await fetch(`${upstreamOrigin}/__count`)).json()).count);
    }
    return { wall: median(walls), wallP99: percentile(walls, 99), requests: median(counts) };
  },
});
