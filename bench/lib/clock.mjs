// The clock the load processes share. Latency across processes (a webhook sent
// by one, its message received by another) needs one clock both read: Linux's
// CLOCK_MONOTONIC, which process.hrtime reads, is one clock for the whole
// machine, in nanoseconds, and NTP never steps it. (performance.timeOrigin +
// performance.now() is wall time pinned once at each process's start, so two
// processes can disagree by however far apart those two readings were taken.)

/** Milliseconds on the machine's monotonic clock, with sub-microsecond resolution. */
export const sharedNow = () => Number(process.hrtime.bigint()) / 1e6;

/** Epoch milliseconds as this process sees them (its time origin plus its own monotonic time). */
export const epochNow = () => performance.timeOrigin + performance.now();

/**
 * How far a worker's clocks are from this process's: round trips over the IPC
 * pipe, each reading both clocks on both sides; the quickest round trip bounds
 * the error (the worker read its clock somewhere inside it). Returns the offsets
 * (worker minus here) of the shared clock and of the epoch clock, and that round trip, in ms.
 */
export async function clockOffset(worker, trips = 200) {
  let best;
  for (let k = 0; k < trips; k += 1) {
    const sent = sharedNow();
    const sentEpoch = epochNow();
    const theirs = await worker.call('__clock');
    const back = sharedNow();
    const backEpoch = epochNow();
    const rtt = back - sent;
    if (!best || rtt < best.rtt)
      best = { rtt, shared: theirs.shared - (sent + back) / 2, epoch: theirs.epoch - (sentEpoch + backEpoch) / 2 };
  }
  return best;
}

/**
 * How closely two workers' clocks agree, each checked against this process:
 * the difference of their offsets, within half the sum of the two round trips.
 */
export async function clockAgreement(a, b) {
  const [ca, cb] = [await clockOffset(a), await clockOffset(b)];
  return {
    sharedMs: ca.shared - cb.shared,
    epochMs: ca.epoch - cb.epoch,
    boundMs: (ca.rtt + cb.rtt) / 2,
  };
}

/** "0.3 µs ± 41 µs": a clock check for the tables. */
export function describeAgreement({ sharedMs, boundMs }) {
  return `${(sharedMs * 1000).toFixed(1)} µs ± ${(boundMs * 1000).toFixed(0)} µs`;
}
