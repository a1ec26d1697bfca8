// GET /health on a fresh connection every few milliseconds, in a process of its
// own: an attack script's own event loop (thousands of sockets and timers) must
// not show up as the server's latency. Driven over IPC (bench/lib/worker.mjs).
import { setTimeout as sleep } from 'node:timers/promises';
import { serve } from '../lib/worker.mjs';

serve({
  /**
   * Probes `url` until `seconds` have passed; the latencies of 200 answers (ms) and the failures by status or error.
   */
  async probe({ url, seconds, everyMs = 50, timeoutMs = 5_000 }) {
    const latencies = [];
    const failures = {};
    const end = performance.now() + seconds * 1000;
    while (performance.now() < end) {
      const asked = performance.now();
      try {
        const response = await fetch(url, { headers: { connection: 'close' }, signal: AbortSignal.timeout(timeoutMs) });
        await response.text();
        if (response.status === 200) latencies.push(performance.now() - asked);
        else failures[response.status] = (failures[response.status] ?? 0) + 1;
      } catch (error) {
        const reason = error.cause?.code ?? error.name;
        failures[reason] = (failures[reason] ?? 0) + 1;
      }
      await sleep(everyMs);
    }
    return { latencies, failures };
  },
});
