// A token bucket per merchant key: RATE_LIMIT_PER_MINUTE operations, refilled
// continuously, so a key may burst up to a minute's worth and then runs at the
// steady rate. Buckets are keyed by a hash of the key, never the key itself.
import { createHash } from 'node:crypto';

/** Full buckets idle this long are dropped, so abandoned keys cost no memory. */
const SWEEP_EVERY_MS = 60_000;

interface Bucket {
  tokens: number;
  /** When `tokens` was last brought up to date (ms, monotonic). */
  at: number;
}

export class KeyRateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly perMs: number;
  private lastSweep: number;

  constructor(
    /** Bucket size and refill per minute; 0 disables the limit. */
    readonly perMinute: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.perMs = perMinute / 60_000;
    this.lastSweep = now();
  }

  /** Takes one token for this key: 0 when allowed, otherwise whole seconds until a token is there. */
  take(key: string): number {
    if (this.perMinute === 0) return 0;
    const now = this.now();
    if (now - this.lastSweep >= SWEEP_EVERY_MS) this.sweep(now);
    const id = createHash('sha256').update(key).digest('base64url');
    let bucket = this.buckets.get(id);
    if (!bucket) {
      bucket = { tokens: this.perMinute, at: now };
      this.buckets.set(id, bucket);
    } else {
      bucket.tokens = Math.min(this.perMinute, bucket.tokens + (now - bucket.at) * this.perMs);
      bucket.at = now;
    }
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.perMs / 1000));
  }

  /** Keys currently tracked (hashes only). */
  get size(): number {
    return this.buckets.size;
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [id, bucket] of this.buckets) {
      if (bucket.tokens + (now - bucket.at) * this.perMs >= this.perMinute) this.buckets.delete(id);
    }
  }
}
