// Entry point: loadConfig → startApp → banner; stops gracefully on SIGTERM/SIGINT.
// With WORKERS=N the first process supervises N workers that each run startApp (cluster.ts).
import cluster from 'node:cluster';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { startApp } from './app.js';
import { reportListening, runPrimary } from './cluster.js';
import { DataDirInUseError } from './store/data-dir-lock.js';
import { StoreFileError } from './store/sqlite-file.js';
import { CONFIG_VARIABLES, ConfigError, loadConfig, type Config } from './config.js';
import { SandboxWorldInUseError, type Sandbox } from './sandbox/index.js';

function help(): string {
  const width = Math.max(...CONFIG_VARIABLES.map((v) => v.name.length));
  const lines = CONFIG_VARIABLES.map((v) => `  ${v.name.padEnd(width)}  ${v.help} (default: ${v.default})`);
  return [
    'delivery-graph: a GraphQL facade over the last-mile delivery service.',
    '',
    'Usage: npm start [-- --help]',
    '',
    'Configuration is read from environment variables (see .env.example):',
    ...lines,
  ].join('\n');
}

/** Where a process serves: the main port, the webhooks and /metrics. */
interface Where {
  url: string;
  webhookUrl: string;
  metricsUrl: string | undefined;
}

/** The start-up text: where everything is, and with the sandbox, a ready key and what to try. */
function banner(config: Config, { url, webhookUrl, metricsUrl }: Where, sandbox: Sandbox | undefined): string {
  const ws = url.replace('http', 'ws');
  const lines = [
    `delivery-graph is serving on ${url}`,
    ...(config.trackingPage ? [`  tracking page       ${url}/   (book a delivery, watch the courier move)`] : []),
    `  ${config.graphql.introspection ? 'GraphQL + GraphiQL' : 'GraphQL           '}  ${url}/graphql   (WebSocket: ${ws}/graphql)`,
    config.webhooksEnabled
      ? `  webhooks            ${webhookUrl}`
      : config.realtime.reconcileIntervalMs > 0
        ? `  webhooks            off (no WEBHOOK_PUBLIC_KEY_FILE): polling alone, followed deliveries are read every ${config.realtime.reconcileIntervalMs} ms (RECONCILE_INTERVAL_MS)`
        : '  webhooks            off (no WEBHOOK_PUBLIC_KEY_FILE) and RECONCILE_INTERVAL_MS=0: subscribers see only their first state',
    `  health / ready      ${url}/health   ${url}/ready`,
    ...(metricsUrl ? [`  metrics             ${metricsUrl}${config.metricsAccess.token ? '   (Authorization: Bearer <METRICS_TOKEN>)' : ''}`] : []),
  ];
  if (sandbox) {
    const merchant = sandbox.merchants[0]!;
    lines.push(
      '',
      `Upstream: the embedded sandbox at ${sandbox.url} (platform "${sandbox.platformId}"); set UPSTREAM_URL to use a real one.`,
      `  merchant key: ${merchant.key}   (send it as "Authorization: Bearer <key>")`,
      '',
      ...(config.trackingPage
        ? [`Watch a delivery move: open ${url}/ and press "Book a sandbox delivery".`, '']
        : []),
      'Try it:',
      `  curl -s ${url}/graphql -H 'content-type: application/json' -H 'authorization: Bearer ${merchant.key}' \\`,
      `    -d '{"query":"{ availability { group service available } }"}'`,
      '',
      `Or follow one from GraphQL: book it (README, "Cookbook"), then in GraphiQL at ${url}/graphql run`,
      '  subscription { deliveryUpdated(uid: "<uid>") { status name receivedAt courierLocation { lat lng } } }',
      `  with the header {"Authorization": "Bearer ${merchant.key}"}. Milestones come every ${config.sandbox.stepMs} ms (SANDBOX_STEP_MS).`,
    );
  }
  return lines.join('\n');
}

/** Every port this configuration listens on, with the variable that sets it (0, any free port, cannot be taken). */
function wantedPorts(config: Config): { variable: string; port: number; host: string }[] {
  const wanted = [{ variable: 'PORT', port: config.port, host: config.host }];
  if (!config.upstream.url) wanted.push({ variable: 'SANDBOX_PORT', port: config.sandbox.port, host: config.host });
  if (config.webhook.port !== undefined) wanted.push({ variable: 'WEBHOOK_PORT', port: config.webhook.port, host: config.host });
  if (config.metricsAccess.port !== undefined) wanted.push({ variable: 'METRICS_PORT', port: config.metricsAccess.port, host: config.metricsAccess.host });
  return wanted.filter((w) => w.port !== 0);
}

/** Whether listening on port and host fails, and how ('EADDRINUSE', 'EACCES', …); undefined when it is free. */
function listenProblem(port: number, host: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
    probe.listen(port, host, () => probe.close(() => resolve(undefined)));
  });
}

/**
 * The one line for a start that failed on a port. The start has let go of every port it
 * had opened, so each wanted port is tried here: the line names all busy ones at once,
 * not the first the start happened to meet.
 */
async function portProblems(config: Config, error: NodeJS.ErrnoException & { port?: number }): Promise<string> {
  const wanted = wantedPorts(config);
  const problems: { variable: string; port: number; host: string; code: string }[] = [];
  for (const w of wanted) {
    const code = await listenProblem(w.port, w.host);
    if (code === 'EADDRINUSE' || code === 'EACCES') problems.push({ ...w, code });
  }
  // The port went free meanwhile (or the failure was elsewhere): say what the start met.
  if (!problems.length) {
    const met = wanted.find((w) => w.port === error.port) ?? { variable: 'PORT', port: Number(error.port), host: config.host };
    problems.push({ ...met, code: error.code! });
  }
  const described = problems.map(({ port, host, code }) => `port ${port} on ${host} ${code === 'EADDRINUSE' ? 'is already in use' : 'may not be used by this user'}`);
  const settings = problems.map(({ variable, port }) => `${variable}=${port + 1}`).join(' ');
  return `${described.join(', ')}; set ${problems.map((p) => p.variable).join(' and ')} to ${problems.length > 1 ? 'free ports' : 'a free port'} (e.g. ${settings} npm start)`;
}

async function main(): Promise<void> {
  if (process.argv.includes('--help') || process.argv.includes('-h')) {
    console.log(help());
    return;
  }
  // A local .env file, when there is one, fills in variables not already set.
  if (existsSync('.env')) process.loadEnvFile('.env');
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`delivery-graph: bad configuration: ${error.message}`);
      process.exit(1);
    }
    throw error;
  }

  if (config.workers > 1 && cluster.isPrimary) {
    await runPrimary(config, (where, sandbox) => console.log(banner(config, where, sandbox)));
    return;
  }
  let app;
  try {
    app = await startApp(config);
  } catch (error) {
    // Another process on this DATA_DIR (or on its sandbox world), or a store file that is damaged or emptied: one line, naming it and what to do.
    if (error instanceof DataDirInUseError || error instanceof SandboxWorldInUseError || error instanceof StoreFileError) {
      console.error(`delivery-graph: ${error.message}`);
      process.exit(1);
    }
    // A port taken by another process is the commonest way to fail: name every busy one and what to change, in one line.
    const { code } = error as NodeJS.ErrnoException;
    if (code === 'EADDRINUSE' || code === 'EACCES') {
      console.error(`delivery-graph: ${await portProblems(config, error as NodeJS.ErrnoException & { port?: number })}`);
      process.exit(1);
    }
    throw error;
  }
  if (cluster.isWorker) {
    // One of WORKERS: the primary prints the banner; this one says where it serves.
    reportListening(app);
  } else {
    console.log(banner(config, app, app.sandbox));
  }

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.logger.info({ signal }, 'stopping');
    app.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        app.logger.error({ err: error }, 'stop failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

main().catch((error: unknown) => {
  console.error('delivery-graph failed to start:', error instanceof Error ? error.message : error);
  process.exit(1);
});
