// The sandbox's record of the requests it answered, for tests that count
// upstream calls: a ring of the most recent ones, so a long-running sandbox
// (`npm start`) does not keep every request it ever saw.
import type { SandboxRequestRecord } from './types.js';

export class RequestLog {
  /** Oldest first; handed out as `sandbox.requests`, so it is only ever changed in place. */
  readonly records: SandboxRequestRecord[] = [];
  private total = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('requestLogSize must be an integer >= 1');
  }

  /** Requests answered since start, including the ones no longer kept. */
  get count(): number {
    return this.total;
  }

  add(record: Omit<SandboxRequestRecord, 'seq'>): void {
    this.total += 1;
    this.records.push({ seq: this.total, ...record });
    // One in, one out: shift() is cheap at this size, and the array stays the one callers hold.
    while (this.records.length > this.capacity) this.records.shift();
  }

  clear(): void {
    this.records.length = 0;
  }

  /** Records with a seq after `mark`; seqs are consecutive, so the kept ones start at records[0].seq. */
  since(mark: number): SandboxRequestRecord[] {
    if (!Number.isInteger(mark) || mark < 0 || mark > this.total) {
      throw new RangeError(`mark must be an earlier requestCount (0..${this.total}), got ${mark}`);
    }
    const firstKept = this.records[0]?.seq ?? this.total + 1;
    if (mark + 1 < firstKept) {
      throw new RangeError(
        `requests ${mark + 1}..${firstKept - 1} are no longer kept (the log keeps the last ${this.capacity}, and resetRequests empties it)`,
      );
    }
    return this.records.slice(mark + 1 - firstKept);
  }
}
