// GET /ready answers for this instance only: its store answers and it is not
// stopping. The upstream's health is reported, never used to pull the instance:
// an upstream outage hits every instance at once, and a load balancer that pulled
// them all would turn typed UPSTREAM_UNAVAILABLE errors into its own 503s and
// drop the webhooks the upstream retries only five times.
import type { ServerResponse } from 'node:http';
import { DeliveryGraphError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Upstream } from '../upstream/clients.js';

/** The store must answer within this, or the instance reads as not ready. */
export const STORE_CHECK_TIMEOUT_MS = 1_000;
/** A store answer is reused this long, so a burst of probes costs one write. */
const STORE_CHECK_REUSE_MS = 1_000;

export interface UpstreamHealth {
  /** unknown until the first background check has answered. */
  state: 'up' | 'down' | 'unknown';
  /** When the last check answered (ISO 8601 UTC). */
  checkedAt: string | null;
  /** Why it reads as down: the error code of the check. */
  errorCode: string | null;
}

export interface Readiness {
  /** The upstream as the last background check found it. */
  upstream(): UpstreamHealth;
  /** Resolves when the first check has answered, or after `waitMs`, whichever comes first. */
  firstCheck(waitMs: number): Promise<void>;
  /** Answers GET /ready. */
  handle(res: ServerResponse, draining: boolean): void;
  stop(): void;
}

export interface ReadinessOptions {
  /** Resolves when the store answers (a write for SQLite, a PING for Redis); rejects otherwise. */
  checkStore(): Promise<void>;
  upstream: Upstream;
  logger: Logger;
  /** Time between background checks of the upstream. */
  upstreamCheckMs: number;
}

function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

export function createReadiness(options: ReadinessOptions): Readiness {
  const { upstream, logger } = options;
  let health: UpstreamHealth = { state: 'unknown', checkedAt: null, errorCode: null };
  let lastStoreCheck: { at: number; error: string | null } | undefined;
  let storeCheck: Promise<string | null> | undefined;

  const checkUpstream = async () => {
    let next: UpstreamHealth;
    try {
      // Without a key and outside the breakers: any answer below 500, a 401 included, shows the upstream is there.
      const status = await upstream.probe();
      next =
        status < 500
          ? { state: 'up', checkedAt: new Date().toISOString(), errorCode: null }
          : { state: 'down', checkedAt: new Date().toISOString(), errorCode: 'UPSTREAM_UNAVAILABLE' };
    } catch (error) {
      next = {
        state: 'down',
        checkedAt: new Date().toISOString(),
        errorCode: error instanceof DeliveryGraphError ? error.code : 'UPSTREAM_UNAVAILABLE',
      };
    }
    if (next.state !== health.state && health.state !== 'unknown') {
      logger[next.state === 'down' ? 'warn' : 'info'](
        { upstream: next.state, code: next.errorCode },
        'upstream health changed',
      );
    }
    health = next;
  };
  let checking: Promise<void> | undefined;
  const tick = () => {
    checking ??= checkUpstream().finally(() => (checking = undefined));
  };
  tick();
  const first = checking!;
  const timer = setInterval(tick, options.upstreamCheckMs);
  timer.unref();

  /** null when the store answered; otherwise why not. Concurrent probes share one check. */
  const storeProblem = (): Promise<string | null> => {
    if (lastStoreCheck && Date.now() - lastStoreCheck.at < STORE_CHECK_REUSE_MS)
      return Promise.resolve(lastStoreCheck.error);
    storeCheck ??= within(options.checkStore(), STORE_CHECK_TIMEOUT_MS, 'the store')
      .then(
        () => null,
        (error: unknown) => (error instanceof Error ? error.message : String(error)),
      )
      .then((error) => {
        if (error) logger.warn({ reason: error }, 'readiness: the store did not answer');
        lastStoreCheck = { at: Date.now(), error };
        storeCheck = undefined;
        return error;
      });
    return storeCheck;
  };

  const json = (res: ServerResponse, status: number, body: unknown) => {
    res
      .writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' })
      .end(JSON.stringify(body));
  };

  return {
    upstream: () => health,
    async firstCheck(waitMs) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([first, new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)))]);
      clearTimeout(timer);
    },
    handle(res, draining) {
      if (draining) return json(res, 503, { status: 'stopping', upstream: health });
      void storeProblem().then((problem) =>
        problem === null
          ? json(res, 200, { status: 'ready', store: 'ok', upstream: health })
          : json(res, 503, { status: 'store unavailable', store: problem, upstream: health }),
      );
    },
    stop() {
      clearInterval(timer);
    },
  };
}
