// Builds the two endpoint-group clients over one pool to the upstream origin.
import type { Config } from '../config.js';
import { UnauthenticatedError } from '../errors.js';
import type { BreakerState } from './breaker.js';
import { UpstreamHttp, type ApiGroupName, type BreakerStates, type UpstreamCallRecord } from './http.js';
import { KnownKeys } from './known-keys.js';
import { PartnerClient } from './partner.js';
import { PlatformClient } from './platform.js';

export interface Upstream {
  platform: PlatformClient;
  partner: PartnerClient;
  /** What the upstream last said about each merchant key (hashes only), learned from every call. */
  keys: KnownKeys;
  /**
   * A keyless availability GET outside the breakers: the status of any answer, or the error of none (health checks).
   */
  probe(): Promise<number>;
  /** Each group's circuit now: closed, open (failing fast) or half-open (one trial call). */
  breakerState(): BreakerStates;
  /** Hears every change of a group's circuit; returns the way to stop listening. */
  onBreakerChange(listener: (group: ApiGroupName, state: BreakerState) => void): () => void;
  close(): Promise<void>;
}

export function createUpstream(
  config: Pick<Config['upstream'], 'timeoutMs' | 'connections' | 'maxResponseBytes'> &
    Partial<Pick<Config['upstream'], 'breaker' | 'keyRefusalMemoryMs'>> & { url: string; platformId: string },
  onCall?: (record: UpstreamCallRecord) => void,
): Upstream {
  // A request waiting on another's first try of a key waits no longer than that call may take.
  const keys = new KnownKeys({ maxWaitMs: config.timeoutMs, refusedTtlMs: config.keyRefusalMemoryMs });
  const http = new UpstreamHttp({
    baseUrl: config.url,
    timeoutMs: config.timeoutMs,
    connections: config.connections,
    maxResponseBytes: config.maxResponseBytes,
    breaker: config.breaker,
    onCall,
    keys,
  });
  return {
    platform: new PlatformClient(http, config.platformId),
    partner: new PartnerClient(http),
    keys,
    probe: () => http.probe(),
    breakerState: () => http.breakerState(),
    onBreakerChange: (listener) => http.onBreakerChange(listener),
    close: () => http.close(),
  };
}

/**
 * Puts a key to the upstream with its cheapest keyed call, the platform group's
 * availability; only when that group refuses it, the partner group's (a key may
 * be valid there alone). The upstream clients learn the answers (Upstream.keys);
 * a failure that is not a refusal (down, slow) leaves the key unjudged.
 */
export async function judgeKey(
  upstream: Pick<Upstream, 'platform' | 'partner'>,
  key: string,
  signal: AbortSignal,
): Promise<void> {
  try {
    await upstream.platform.availability(key, { signal });
    return;
  } catch (error) {
    if (!(error instanceof UnauthenticatedError)) return;
  }
  await upstream.partner.availability(key, { signal }).catch(() => undefined);
}
