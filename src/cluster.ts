// WORKERS=N: N processes serve the one port (node:cluster hands each accepted
// connection to a worker in turn), sharing events, idempotency keys and limits
// through Redis. The primary only supervises: it starts the embedded sandbox when
// there is no UPSTREAM_URL (one sandbox for all, passed to the workers as their
// upstream), forks the workers, replaces one that dies, prints the banner once
// all of them listen, and on SIGTERM/SIGINT stops them all gracefully before it exits.
import cluster, { type Worker } from 'node:cluster';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Config } from './config.js';
import { startEmbeddedSandbox } from './embedded-sandbox.js';
import { createLogger } from './logger.js';
import type { Sandbox } from '@delivery-graph/sandbox';

/** What a worker tells the primary once it listens. */
export interface WorkerListening {
  type: 'delivery-graph:listening';
  url: string;
  /** Where webhooks are received (the main port, or WEBHOOK_PORT). */
  webhookUrl: string;
  /** Where /metrics is served, when it is. */
  metricsUrl: string | undefined;
}

/** In a worker: tells the primary where it serves. */
export function reportListening(where: { url: string; webhookUrl: string; metricsUrl: string | undefined }): void {
  const message: WorkerListening = {
    type: 'delivery-graph:listening',
    url: where.url,
    webhookUrl: where.webhookUrl,
    metricsUrl: where.metricsUrl,
  };
  process.send?.(message);
}

/**
 * Runs the primary. `banner` prints the start-up text once every worker
 * listens (with the sandbox, when there is one). Resolves when the primary is set
 * up; the process then lives until a signal stops the workers.
 */
export async function runPrimary(
  config: Config,
  banner: (where: WorkerListening, sandbox: Sandbox | undefined) => void,
): Promise<void> {
  const logger = createLogger(config.logLevel, undefined, config.logFormat);
  let sandbox: Sandbox | undefined;
  const env: Record<string, string> = {};
  if (!config.upstream.url) {
    // Its world kept in DATA_DIR/sandbox, as a single process keeps it; paused until the workers listen (setWebhookUrl
    // below).
    sandbox = await startEmbeddedSandbox(config, logger);
    // The workers take the primary's sandbox as their upstream, and its key to verify its webhooks.
    mkdirSync(config.dataDir, { recursive: true });
    const keyFile = path.join(config.dataDir, 'sandbox-webhook-public.pem');
    writeFileSync(keyFile, sandbox.publicKeyPem);
    Object.assign(env, {
      UPSTREAM_URL: sandbox.url,
      PLATFORM_ID: sandbox.platformId,
      // WEBHOOKS=off: the workers poll the sandbox, which sends them nothing.
      ...(config.webhooksOff ? {} : { WEBHOOK_PUBLIC_KEY_FILE: keyFile, WEBHOOK_ISSUER: sandbox.issuer }),
    });
  }

  let stopping = false;
  let announced = false;
  let failures = 0;
  const listening = new Set<number>();
  const fork = (): Worker => {
    const worker = cluster.fork(env);
    worker.on('message', (message: WorkerListening) => {
      if (message?.type !== 'delivery-graph:listening' || announced) return;
      // The banner (and the sandbox's webhooks) wait for every worker, so that the
      // first requests after it are spread over all of them.
      listening.add(worker.id);
      if (listening.size < config.workers) return;
      announced = true;
      if (!config.webhooksOff) sandbox?.setWebhookUrl(message.webhookUrl);
      banner(message, sandbox);
      logger.info({ workers: config.workers }, 'workers listening');
    });
    return worker;
  };
  cluster.on('exit', (worker, code, signal) => {
    if (stopping) return;
    // A worker that dies is replaced; the others go on serving meanwhile.
    failures += 1;
    logger.error({ worker: worker.id, code, signal }, 'a worker stopped; starting another');
    if (failures > config.workers * 5) {
      logger.fatal('workers keep stopping; giving up');
      process.exit(1);
    }
    fork();
  });
  for (let i = 0; i < config.workers; i += 1) fork();

  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    const started = performance.now();
    logger.info({ signal }, 'stopping the workers');
    const stopped = (exitCode: number) => {
      logger.info({ signal, exitCode, durationMs: Math.round(performance.now() - started) }, 'stopped');
      process.exit(exitCode);
    };
    const workers = Object.values(cluster.workers ?? {}).filter((worker): worker is Worker => worker !== undefined);
    let failed = false;
    Promise.all(
      workers.map(
        (worker) =>
          new Promise<void>((resolve) => {
            worker.once('exit', (code) => {
              if (code !== 0) failed = true;
              resolve();
            });
            worker.process.kill('SIGTERM');
          }),
      ),
    )
      .then(() => sandbox?.stop())
      .then(
        () => stopped(failed ? 1 : 0),
        () => stopped(1),
      );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}
