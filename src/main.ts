// Entry point: loadConfig → startApp → banner; stops gracefully on SIGTERM/SIGINT.
// With WORKERS=N the first process supervises N workers that each run startApp (cluster.ts).
import cluster from 'node:cluster';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { startApp } from './app.js';
import { reportListening, runPrimary } from './cluster.js';
import { DataDirInUseError } from './store/data-dir-lock.js';
import { StoreFileError } from './store/sqlite-file.js';
import { CONFIG_VARIABLES, ConfigError, loadConfig, SANDBOX_UPSTREAM, unknownSettings, type Config } from './config.js';
import { createLogger, type Logger } from './logger.js';
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

/** The start-up text: where everything is, and with the sandbox, a ready key and what to try. Only what this mode serves. */
function banner(config: Config, { url, webhookUrl, metricsUrl }: Where, sandbox: Sandbox | undefined): string {
  const ws = url.replace('http', 'ws');
  // Two pages follow a delivery: ours (live, over GraphQL) and the upstream's own, which trackingUrl names.
  const lines = [
    `delivery-graph is serving on ${url}`,
    ...(config.trackingPage ? [`  tracking page       ${url}/   (ours: ${url}/#uid=<uid> follows a delivery live; a delivery's trackingUrl is the upstream's own page)`] : []),
    `  ${config.graphql.introspection ? 'GraphQL + GraphiQL' : 'GraphQL           '}  ${url}/graphql   (WebSocket: ${ws}/graphql)`,
    config.webhooksEnabled
      ? `  webhooks            ${webhookUrl}`
      : config.realtime.reconcileIntervalMs > 0
        ? `  webhooks            off (no WEBHOOK_PUBLIC_KEY_FILE): polling alone, followed deliveries are read every ${config.realtime.reconcileIntervalMs} ms (RECONCILE_INTERVAL_MS)`
        : '  webhooks            off (no WEBHOOK_PUBLIC_KEY_FILE) and RECONCILE_INTERVAL_MS=0: subscribers see only their first state',
    `  health / ready      ${url}/health   ${url}/ready`,
    ...(metricsUrl ? [`  metrics             ${metricsUrl}${config.metricsAccess.token ? '   (Authorization: Bearer <METRICS_TOKEN>)' : ''}`] : []),
    ...(sandbox ? [] : [`  upstream            ${config.upstream.url}   (platform "${config.upstream.platformId}")`]),
  ];
  if (sandbox) {
    const merchant = sandbox.merchants[0]!;
    lines.push(
      '',
      config.production
        ? `Upstream: the embedded sandbox at ${sandbox.url} (platform "${sandbox.platformId}"), a simulator: UPSTREAM_URL=${SANDBOX_UPSTREAM} asked for it, and nothing is really booked.`
        : `Upstream: the embedded sandbox at ${sandbox.url} (platform "${sandbox.platformId}"); set UPSTREAM_URL to use a real one.`,
      `  merchant key: ${merchant.key}   (send it as "Authorization: Bearer <key>")`,
      `  A sandbox delivery's trackingUrl is the sandbox's own page on ${new URL(sandbox.url).host}, not this service's tracking page.`,
      '',
      ...(config.trackingPage
        ? [`Watch a delivery move: open ${url}/ and press "Book a sandbox delivery".`, '']
        : []),
      'Try it:',
      `  curl -s ${url}/graphql -H 'content-type: application/json' -H 'authorization: Bearer ${merchant.key}' \\`,
      `    -d '{"query":"{ availability { group service available } }"}'`,
      '',
      config.graphql.introspection
        ? `Or follow one from GraphQL: book it (README, "Cookbook"), then in GraphiQL at ${url}/graphql run`
        : `Or follow one from GraphQL: book it (README, "Cookbook"), then over graphql-ws at ${ws}/graphql run`,
      '  subscription { deliveryUpdated(uid: "<uid>") { status name receivedAt courierLocation { lat lng } } }',
      `  with the ${config.graphql.introspection ? 'header {"Authorization": "Bearer' : 'connection_init payload {"authorization": "Bearer'} ${merchant.key}"}. Milestones come every ${config.sandbox.stepMs} ms (SANDBOX_STEP_MS).`,
    );
  }
  return lines.join('\n');
}

/**
 * Where the banner goes. It is for a person; with JSON logs stdout belongs to a
 * collector that parses every line, so the banner goes to stderr (where start-up
 * failures are written too, in plain words), and stdout gets the same facts as one
 * JSON line. In a terminal (LOG_FORMAT=pretty) both are stdout.
 */
function announce(config: Config, logger: Logger, where: Where, sandbox: Sandbox | undefined): void {
  const text = banner(config, where, sandbox);
  if (config.logFormat === 'pretty') return void console.log(text);
  process.stderr.write(`${text}\n`);
  logger.info(
    { url: where.url, webhookUrl: where.webhookUrl, metricsUrl: where.metricsUrl ?? null, trackingPage: config.trackingPage ? `${where.url}/` : null, upstream: sandbox ? sandbox.url : config.upstream.url, sandbox: sandbox !== undefined },
    'serving',
  );
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
  // In production the process is started by a supervisor (node dist/main.js), not npm start.
  return `${described.join(', ')}; set ${problems.map((p) => p.variable).join(' and ')} to ${problems.length > 1 ? 'free ports' : 'a free port'} (e.g. ${settings}${config.production ? '' : ' npm start'})`;
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

  const logger = createLogger(config.logLevel, undefined, config.logFormat);
  // A misspelled setting is silently its default: name it (once, not once per worker).
  if (!cluster.isWorker) {
    for (const { variable, closest } of unknownSettings()) logger.warn({ variable, closest }, `${variable} is not a setting of delivery-graph and is ignored; did you mean ${closest}?`);
  }

  if (config.workers > 1 && cluster.isPrimary) {
    await runPrimary(config, (where, sandbox) => announce(config, logger, where, sandbox));
    return;
  }
  let app;
  try {
    app = await startApp(config, { logger });
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
    announce(config, logger, app, app.sandbox);
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
