// What a person reads at start: --help (every setting), and the banner that says
// where everything is (main.ts prints it once the app listens; with WORKERS, once
// every worker does).
import { CONFIG_VARIABLES, SANDBOX_UPSTREAM, type Config } from './config.js';
import type { Logger } from './logger.js';
import type { Sandbox } from '@delivery-graph/sandbox';

/** What `--help` prints: every setting with its help and default. */
export function help(): string {
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
export interface Where {
  url: string;
  webhookUrl: string;
  metricsUrl: string | undefined;
}

/**
 * The start-up text: where everything is, and with the sandbox, a ready key and what to try. Only what this mode
 * serves.
 */
function banner(config: Config, { url, webhookUrl, metricsUrl }: Where, sandbox: Sandbox | undefined): string {
  const ws = url.replace('http', 'ws');
  // Two pages follow a delivery: ours (live, over GraphQL) and the upstream's own, which trackingUrl names.
  const lines = [
    `delivery-graph is serving on ${url}`,
    ...(config.trackingPage
      ? [
          `  tracking page       ${url}/   (ours: ${url}/#uid=<uid> follows a delivery live; a delivery's trackingUrl is the upstream's own page)`,
        ]
      : []),
    `  ${config.graphql.introspection ? 'GraphQL + GraphiQL' : 'GraphQL           '}  ${url}/graphql   (WebSocket: ${ws}/graphql)`,
    config.webhooksEnabled
      ? `  webhooks            ${webhookUrl}`
      : config.realtime.reconcileIntervalMs > 0
        ? `  webhooks            off (${config.webhooksOff ? 'WEBHOOKS=off' : 'no WEBHOOK_PUBLIC_KEY_FILE'}): polling alone, followed deliveries are read every ${config.realtime.reconcileIntervalMs} ms (RECONCILE_INTERVAL_MS)`
        : `  webhooks            off (${config.webhooksOff ? 'WEBHOOKS=off' : 'no WEBHOOK_PUBLIC_KEY_FILE'}) and RECONCILE_INTERVAL_MS=0: subscribers see only their first state`,
    `  health / ready      ${url}/health   ${url}/ready`,
    ...(metricsUrl
      ? [
          `  metrics             ${metricsUrl}${config.metricsAccess.token ? '   (Authorization: Bearer <METRICS_TOKEN>)' : ''}`,
        ]
      : []),
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
      ...(config.trackingPage ? [`Watch a delivery move: open ${url}/ and press "Book a sandbox delivery".`, ''] : []),
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
export function announce(config: Config, logger: Logger, where: Where, sandbox: Sandbox | undefined): void {
  const text = banner(config, where, sandbox);
  if (config.logFormat === 'pretty') return void console.log(text);
  process.stderr.write(`${text}\n`);
  logger.info(
    {
      url: where.url,
      webhookUrl: where.webhookUrl,
      metricsUrl: where.metricsUrl ?? null,
      trackingPage: config.trackingPage ? `${where.url}/` : null,
      upstream: sandbox ? sandbox.url : config.upstream.url,
      sandbox: sandbox !== undefined,
    },
    'serving',
  );
}
