// The embedded sandbox as the upstream when UPSTREAM_URL is unset (or is
// "sandbox"): the demo merchants, its world kept in DATA_DIR/sandbox so a restart
// on the same folder is coherent, paused until it is told where webhooks go
// (setWebhookUrl). One process starts it (app.ts), or with WORKERS the primary
// for all of them (cluster.ts). It listens on SANDBOX_HOST (loopback unless told),
// its control routes need SANDBOX_CONTROL_TOKEN when set, and in production they
// change nothing. In production it is a warning too: nothing is really booked.
import path from 'node:path';
import { SIMULATOR_IN_PRODUCTION, type Config } from './config.js';
import type { Logger } from './logger.js';
import { DEMO_MERCHANTS, startSandbox, type Sandbox } from '@delivery-graph/sandbox';

export async function startEmbeddedSandbox(config: Config, logger: Logger): Promise<Sandbox> {
  const sandbox = await startSandbox({
    port: config.sandbox.port,
    host: config.sandbox.host,
    controlToken: config.sandbox.controlToken,
    production: config.production,
    merchants: DEMO_MERCHANTS,
    dataDir: path.join(config.dataDir, 'sandbox'),
    paused: true,
    knobs: { stepMs: config.sandbox.stepMs, returnRate: config.sandbox.returnRate },
  });
  if (config.production) logger.warn(SIMULATOR_IN_PRODUCTION);
  return sandbox;
}
