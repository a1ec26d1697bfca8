// The event loop's delay as /metrics reports it: a timer due every few ms, how
// late it fired each time (the longest hold of the loop, to within that much)
// and a histogram for the p99, since the previous scrape.
import { Gauge, type Registry } from 'prom-client';
import { PREFIX } from './collected-metrics.js';

/**
 * The event loop's delay is sampled by a timer due every this many ms: a hold of
 * the loop longer than that always shows, to within that much. prom-client's
 * nodejs_eventloop_lag_* sample every 10 ms, which hides the holds of 5-10 ms
 * this facade is kept under (docs/limits.md).
 */
const LOOP_DELAY_RESOLUTION_MS = 2;

/** Steps of the sampler's histogram, ms, and how many (200 ms; the delays beyond are counted in one more). */
const LOOP_DELAY_STEP_MS = 0.1;
const LOOP_DELAY_STEPS = 2_000;

/**
 * A timer due every `resolutionMs`: how late it fired each time, the longest and
 * a histogram (for the p99) since the last read. In JavaScript, not perf_hooks'
 * monitorEventLoopDelay: that one's reset() forgets when its timer last fired, so
 * a hold just after a read (a scrape) was never counted.
 */
function loopDelaySampler(resolutionMs: number): { read(): { maxMs: number; p99Ms: number }; stop(): void } {
  const counts = new Uint32Array(LOOP_DELAY_STEPS + 1);
  let samples = 0;
  let maxMs = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    const late = Math.max(0, now - last - resolutionMs);
    last = now;
    counts[Math.min(LOOP_DELAY_STEPS, Math.floor(late / LOOP_DELAY_STEP_MS))]! += 1;
    samples += 1;
    if (late > maxMs) maxMs = late;
  }, resolutionMs);
  // The sampler alone must not keep a process alive.
  timer.unref();
  return {
    read() {
      let p99Ms = 0;
      for (let step = 0, seen = 0; step <= LOOP_DELAY_STEPS && samples > 0; step += 1) {
        seen += counts[step]!;
        if (seen >= samples * 0.99) {
          // Its step's upper bound; in the last step (past 200 ms), the longest.
          p99Ms = step === LOOP_DELAY_STEPS ? maxMs : Math.min(maxMs, (step + 1) * LOOP_DELAY_STEP_MS);
          break;
        }
      }
      const read = { maxMs, p99Ms };
      counts.fill(0);
      samples = 0;
      maxMs = 0;
      return read;
    },
    stop: () => clearInterval(timer),
  };
}

/** The two gauges of the loop's delay since the previous scrape; returns the way to stop its timer. */
export function registerLoopDelay(registry: Registry): () => void {
  // How late the sampling timer fired, beyond its schedule: the longest time anything held the loop
  // (to within the resolution), and how the loop's turns go. Since the previous scrape, as prom-client's.
  const loopDelay = loopDelaySampler(LOOP_DELAY_RESOLUTION_MS);
  // Read by the first gauge's collect, which runs before the second's (registration order).
  let loopDelayP99 = 0;
  new Gauge({
    name: `${PREFIX}event_loop_delay_max_seconds`,
    help: `Longest the event loop was held since the previous scrape: how late a timer due every ${LOOP_DELAY_RESOLUTION_MS} ms fired at worst (to within ${LOOP_DELAY_RESOLUTION_MS} ms)`,
    registers: [registry],
    collect() {
      const { maxMs, p99Ms } = loopDelay.read();
      this.set(maxMs / 1000);
      loopDelayP99 = p99Ms / 1000;
    },
  });
  new Gauge({
    name: `${PREFIX}event_loop_delay_p99_seconds`,
    help: `99th percentile of how late a timer due every ${LOOP_DELAY_RESOLUTION_MS} ms fired, since the previous scrape`,
    registers: [registry],
    collect() {
      this.set(loopDelayP99);
    },
  });
  return () => loopDelay.stop();
}
