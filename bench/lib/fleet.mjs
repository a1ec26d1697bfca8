// A graphql-ws subscriber fleet spread over several processes of
// bench/load/subscribers.mjs (10,000 connections and 10,000 messages a second
// are more than one process takes without falling behind, which would read as
// the facade's latency): process k holds subscribers k·size … (k+1)·size − 1,
// subscriber i follows uids[i % uids.length]. The orchestrator merges what each
// measures.
import { clockAgreement } from './clock.mjs';
import { percentile } from './stats.mjs';
import { forkWorker } from './worker.mjs';

/** Subscribers one process holds by default. */
export const SUBSCRIBERS_PER_PROCESS = 5_000;

/**
 * Forks the processes and connects `subscribers` subscriptions to `origins`
 * (one facade, or several: see subscribers.mjs's connect). Resolves once all are connected.
 */
export async function startFleet({
  origins,
  key,
  subscribers,
  uids,
  processes = Math.max(1, Math.ceil(subscribers / SUBSCRIBERS_PER_PROCESS)),
}) {
  const size = Math.ceil(subscribers / processes);
  const parts = [];
  for (let first = 0; first < subscribers; first += size)
    parts.push({ worker: forkWorker('subscribers'), first, count: Math.min(size, subscribers - first) });
  const each = (command, args = () => ({})) =>
    Promise.all(parts.map((part, k) => part.worker.call(command, args(part, k))));
  try {
    await each('connect', ({ first, count }) => ({ origins, key, count, first, uids }));
  } catch (error) {
    await Promise.all(parts.map(({ worker }) => worker.stop()));
    throw error;
  }
  return {
    subscribers,
    /** The processes, for CPU meters. */
    processes: parts.map(({ worker }, k) => ({
      name: parts.length > 1 ? `subscribers ${k + 1}` : 'subscribers',
      pid: worker.pid,
    })),
    /** Messages each process has received so far. */
    received: () => each('received'),
    /** Until every process has every message of the acknowledged events beyond `before` (from received()). */
    async waitForEvents({ acked, before, timeoutMs }) {
      const answers = await each('waitForEvents', (_part, k) => ({ acked, before: before[k], timeoutMs }));
      return {
        timedOut: answers.some((a) => a.timedOut),
        received: answers.reduce((sum, a) => sum + a.received, 0),
        expected: answers.reduce((sum, a) => sum + a.expected, 0),
      };
    },
    /**
     * Until every subscriber (count 'all'), or every follower of event n's delivery (ofEvent), has the tag; when the
     * last got it.
     */
    async waitForTag({ tag, count, ofEvent, timeoutMs }) {
      const answers = await each('waitForTag', () => ({ tag, count, ofEvent, timeoutMs }));
      return {
        timedOut: answers.some((a) => a.timedOut),
        count: answers.reduce((sum, a) => sum + a.count, 0),
        last: Math.max(...answers.map((a) => a.last).filter(Number.isFinite)),
      };
    },
    /** The poster's clock against each process's; the worst agreement. */
    async clocks(poster) {
      let worst;
      for (const { worker } of parts) {
        const agreement = await clockAgreement(poster, worker);
        if (!worst || Math.abs(agreement.sharedMs) + agreement.boundMs > Math.abs(worst.sharedMs) + worst.boundMs)
          worst = agreement;
      }
      return worst;
    },
    /**
     * The run's latencies over the whole fleet (see subscribers.mjs's latencies):
     * percentiles, losses, and the events whose slowest subscriber waited over
     * `slowMs`, with how many runs of consecutive events they form.
     */
    async latencies({ prefix, sentAt, acked, slowMs }) {
      const answers = await each('latencies', () => ({ prefix, sentAt, acked }));
      const samples = new Float64Array(answers.reduce((sum, a) => sum + a.samples.length, 0));
      let offset = 0;
      for (const a of answers) {
        samples.set(a.samples, offset);
        offset += a.samples.length;
      }
      const sum = (key) => answers.reduce((total, a) => total + a[key], 0);
      let slowEvents = 0;
      let slowRuns = 0;
      let longestRun = 0;
      for (let n = 0, run = 0; n < sentAt.length; n += 1) {
        if (answers.some((a) => a.slowest[n] > slowMs)) {
          slowEvents += 1;
          run += 1;
          if (run === 1) slowRuns += 1;
          longestRun = Math.max(longestRun, run);
        } else run = 0;
      }
      const delivered = sum('delivered');
      const expected = sum('expected');
      return {
        p50: percentile(samples, 50),
        p99: percentile(samples, 99),
        p999: percentile(samples, 99.9),
        max: percentile(samples, 100),
        delivered,
        expected,
        lost: expected - delivered,
        duplicates: sum('duplicates'),
        misrouted: sum('misrouted'),
        unacknowledged: sum('unacknowledged'),
        slowEvents,
        slowRuns,
        longestRun,
      };
    },
    async close() {
      await each('close');
      await Promise.all(parts.map(({ worker }) => worker.stop()));
    },
  };
}
