// Reconciliation's read budget (RECONCILE_MAX_READS_PER_SECOND) shared fairly
// across merchants: the reads due are served one owner at a time, in turn, so
// a merchant following 10,000 deliveries gets one read in every N (N the
// merchants with reads due), not the whole budget, and another merchant's
// repair waits behind at most one read of each other merchant per turn.
// Within a merchant, the most urgent first: a read that settles a
// contradiction, then one that confirms a cancel or failure; then the routine
// reads, followed deliveries and those nobody follows alike, the latest for its
// own cadence first (a followed delivery 60 ms late on a 100 ms interval before
// an unfollowed one 300 ms late on a 1 s pass), so that a merchant whose
// followed deliveries want more than its share still repairs the others, each
// kind as late for its cadence as the other.

/** A read that is due, as the picker sees it. */
export interface DueRead {
  /** Whose turn it takes (the owner, as owner records name it). */
  owner: string;
  /** Lower goes first within the owner (see READ_PRIORITY). */
  priority: number;
  /** How late it is for its cadence (time past due over the cadence): the latest goes first among equals. */
  lateness: number;
}

/**
 * Up to `count` of the due reads: one of each owner's in turn, owners in a fixed
 * (sorted) order starting after `after`, the owner served last time, so that a
 * budget of one read a tick still goes round. Returns them in the order picked,
 * and the owner served last.
 */
export function fairPick<T extends DueRead>(
  due: readonly T[],
  count: number,
  after: string | undefined,
): { picked: T[]; last: string | undefined } {
  const byOwner = new Map<string, T[]>();
  for (const read of due) {
    let reads = byOwner.get(read.owner);
    if (!reads) byOwner.set(read.owner, (reads = []));
    reads.push(read);
  }
  for (const [owner, reads] of byOwner) byOwner.set(owner, mostUrgent(reads, count));
  const owners = [...byOwner.keys()].sort();
  // The first owner after the one served last; from the start when none is.
  const start =
    after === undefined
      ? 0
      : Math.max(
          0,
          owners.findIndex((owner) => owner > after),
        );
  const turns = [...owners.slice(start), ...owners.slice(0, start)];
  const picked: T[] = [];
  let last = after;
  for (let round = 0; picked.length < count; round += 1) {
    let any = false;
    for (const owner of turns) {
      const read = byOwner.get(owner)![round];
      if (!read) continue;
      any = true;
      picked.push(read);
      last = owner;
      if (picked.length === count) break;
    }
    if (!any) break;
  }
  return { picked, last };
}

/** More urgent first: priority, then the latest for its cadence. */
const urgency = (a: DueRead, b: DueRead) => a.priority - b.priority || b.lateness - a.lateness;

/**
 * The `count` most urgent of one owner's due reads, most urgent first, without
 * sorting all of them: with reads behind, thousands are due at each tick and a
 * whole sort held the event loop for milliseconds; a heap of `count` does not.
 */
function mostUrgent<T extends DueRead>(reads: T[], count: number): T[] {
  if (reads.length <= count) return reads.sort(urgency);
  // A heap whose top is the least urgent kept: a more urgent read replaces it.
  const heap: T[] = [];
  const lessUrgent = (i: number, j: number) => urgency(heap[i]!, heap[j]!) > 0;
  const swap = (i: number, j: number) => ([heap[i], heap[j]] = [heap[j]!, heap[i]!]);
  for (const read of reads) {
    if (heap.length < count) {
      heap.push(read);
      for (let i = heap.length - 1; i > 0 && lessUrgent(i, (i - 1) >> 1); i = (i - 1) >> 1) swap(i, (i - 1) >> 1);
      continue;
    }
    if (count === 0 || urgency(read, heap[0]!) >= 0) continue;
    heap[0] = read;
    for (let i = 0; ;) {
      const [left, right] = [2 * i + 1, 2 * i + 2];
      let top = i;
      if (left < heap.length && lessUrgent(left, top)) top = left;
      if (right < heap.length && lessUrgent(right, top)) top = right;
      if (top === i) break;
      swap(i, top);
      i = top;
    }
  }
  return heap.sort(urgency);
}
