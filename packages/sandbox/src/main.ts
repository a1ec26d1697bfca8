// `npm run sandbox`: the sandbox upstream on its own, for demos and manual
// testing. Configured by flags, but for two variables: SANDBOX_CONTROL_TOKEN (a
// secret stays out of the process list) and NODE_ENV (production locks the controls).
// The same identity on every start: the demo merchants, and its world and
// signing key kept in --data-dir, as `npm start` keeps the embedded one's.
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import {
  CONTROL_TOKEN_HEADER,
  DEFAULT_REQUEST_LOG_SIZE,
  DEFAULT_WEBHOOK_HISTORY_SIZE,
  DEMO_MERCHANTS,
  isLoopbackHost,
  SandboxWorldInUseError,
  SIGNING_KEY_FILE,
  startSandbox,
  type SandboxKnobs,
} from './index.js';
import { DEFAULT_STEP_MS } from './knobs.js';
import { OUTCOME_PAYLOAD_FIELD, OUTCOMES, PLANS, STEP } from './state.js';
import { WEBHOOKS_PAYLOAD_FIELD } from './webhook-script.js';

const USAGE = `Usage: npm run sandbox -- [options]

  --port <n>             listen port (default 4010; 0 = any free port)
  --host <addr>          listen address (default 127.0.0.1); beyond loopback the /sandbox
                         control routes need SANDBOX_CONTROL_TOKEN, set in the environment
  --webhook-url <url>    where to POST signed webhooks (default: none, poll instead); change
                         it while it runs: PUT /sandbox/webhook-url {"url": "<url>"}
                         ({"url": null}: none)
  --data-dir <dir>       where the sandbox keeps its world (deliveries, webhooks not yet
                         sent, histories, revoked keys) and its signing key, so a restart
                         goes on where it stood (default ./data/sandbox: the folder
                         \`npm start\` keeps its embedded sandbox in with the default DATA_DIR)
  --key-file <p>         the webhook signing key (PKCS#8 PEM), made once and kept
                         (default <data-dir>/${SIGNING_KEY_FILE})
  --in-memory            keep nothing: a new world each start (and a new signing key,
                         unless --key-file is given)
  --step-ms <n>          ms between lifecycle milestones; 0 = manual (default ${DEFAULT_STEP_MS})
  --latency-ms <n>       delay added to every API response (default 0)
  --error-rate <0..1>    share of API requests answered 503 (default 0)
  --duplicate-rate <0..1> share of webhooks sent twice (default 0)
  --reorder-rate <0..1>  share of webhooks sent after the next one (default 0)
  --drop-rate <0..1>     share of webhooks never sent, as after five failed retries (default 0)
  --webhook-order <o>    each delivery's webhooks as_emitted (default), or gathered until
                         it ends and sent reversed or shuffled
  --seed <n>             replayable draws: every booking's faults and outcome follow
                         from this seed and its place in line (default: unseeded)
  --return-rate <0..1>   share of picked-up deliveries that fail or are canceled by
                         the provider, then go back to the pickup (default 0)
  --outcomes <weights>   draw each booking's outcome by weight instead, e.g.
                         delivered=6,failed_then_delivered=1,canceled_before_pickup=1
  --read-scope <s>       whose deliveries a key may read: merchant (its own, default)
                         or platform (any of its platform's, as the document allows)
  --reassign-rate <0..1> share of deliveries that get another courier once, on the way
                         to the pickup (default 0; POST /sandbox/deliveries/<uid>/reassign
                         does it for one delivery)
  --request-log-size <n> most recent requests kept for inspection (default ${DEFAULT_REQUEST_LOG_SIZE})
  --history-size <n>     finished deliveries whose webhook history is kept, the most
                         recent to finish (default ${DEFAULT_WEBHOOK_HISTORY_SIZE})
  --public-key-file <p>  where to write the webhook public key (default ./data/sandbox-public.pem)
  --help                 show this text

Merchant keys: ${DEMO_MERCHANTS.map((m) => m.key).join(' and ')} (platform "${DEMO_MERCHANTS[0]!.platformId}"), the
same as the sandbox \`npm start\` embeds.

To force one delivery's outcome, whatever --return-rate says, put "${OUTCOME_PAYLOAD_FIELD}"
in its platform_payload (or a seeded order's partner_payload), e.g.
{"platform_payload": {"${OUTCOME_PAYLOAD_FIELD}": "failed_then_returned"}}. The payload is
still stored and returned untouched. Values, and the events after pickup_arrived:
${OUTCOMES.map(
  (o) =>
    `  ${o.padEnd(37)}${PLANS[o]
      .slice(STEP.pickupArrived + 1)
      .map((m) => m.event)
      .join(', ')}`,
).join('\n')}

To script one delivery's webhooks, put "${WEBHOOKS_PAYLOAD_FIELD}" in the same payload, e.g.
{"${WEBHOOKS_PAYLOAD_FIELD}": {"order": "shuffled", "seed": 7, "drop": ["delivery.pickup_complete"],
"duplicate": [3], "hold": ["location.*"]}}; see packages/sandbox/README.md.
GET /sandbox/deliveries/<uid>/history shows every event in true order and what became of it.

Knobs can also be changed while it runs: POST /sandbox/knobs {"returnRate": 0.2}.

Control routes (/sandbox/...): open on loopback; with SANDBOX_CONTROL_TOKEN set (16 characters
or more; required beyond loopback) each needs it as the ${CONTROL_TOKEN_HEADER} header. With
NODE_ENV=production they change nothing and /sandbox/info is refused (403).
`;

const NUMERIC_KNOBS: Record<string, keyof SandboxKnobs> = {
  'step-ms': 'stepMs',
  'latency-ms': 'latencyMs',
  'error-rate': 'errorRate',
  'duplicate-rate': 'duplicateRate',
  'reorder-rate': 'reorderRate',
  'drop-rate': 'dropRate',
  seed: 'seed',
  'return-rate': 'returnRate',
  'reassign-rate': 'reassignRate',
};

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      port: { type: 'string' },
      host: { type: 'string' },
      'webhook-url': { type: 'string' },
      'step-ms': { type: 'string' },
      'latency-ms': { type: 'string' },
      'error-rate': { type: 'string' },
      'duplicate-rate': { type: 'string' },
      'reorder-rate': { type: 'string' },
      'drop-rate': { type: 'string' },
      'webhook-order': { type: 'string' },
      seed: { type: 'string' },
      outcomes: { type: 'string' },
      'return-rate': { type: 'string' },
      'read-scope': { type: 'string' },
      'reassign-rate': { type: 'string' },
      'request-log-size': { type: 'string' },
      'history-size': { type: 'string' },
      'public-key-file': { type: 'string' },
      'data-dir': { type: 'string' },
      'key-file': { type: 'string' },
      'in-memory': { type: 'boolean' },
      help: { type: 'boolean' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }

  const knobs = knobsFrom(values);
  const port = values.port === undefined ? 4010 : parseNumber('port', values.port);
  const webhookUrl = values['webhook-url'];
  if (webhookUrl !== undefined && !URL.canParse(webhookUrl))
    throw new UsageError('--webhook-url must be an absolute URL');

  const rawLogSize = values['request-log-size'];
  const requestLogSize = rawLogSize === undefined ? undefined : parseNumber('request-log-size', rawLogSize);
  const rawHistorySize = values['history-size'];
  const webhookHistorySize = rawHistorySize === undefined ? undefined : parseNumber('history-size', rawHistorySize);
  if (values['in-memory'] && values['data-dir'] !== undefined)
    throw new UsageError('--in-memory keeps nothing: give it or --data-dir, not both');
  const dataDir = values['in-memory'] ? undefined : resolve(values['data-dir'] ?? './data/sandbox');
  const keyFile =
    values['key-file'] === undefined ? dataDir && join(dataDir, SIGNING_KEY_FILE) : resolve(values['key-file']);

  const host = values.host ?? '127.0.0.1';
  const controlToken = process.env.SANDBOX_CONTROL_TOKEN || undefined;
  if (controlToken === undefined && !isLoopbackHost(host))
    throw new UsageError(
      `--host ${host} is beyond loopback: set SANDBOX_CONTROL_TOKEN for the /sandbox control routes`,
    );
  const sandbox = await startSandbox({
    port,
    host,
    controlToken,
    production: process.env.NODE_ENV === 'production',
    webhookUrl,
    knobs,
    requestLogSize,
    webhookHistorySize,
    merchants: DEMO_MERCHANTS,
    dataDir,
    signingKeyFile: keyFile,
  });
  const publicKeyFile = resolve(values['public-key-file'] ?? './data/sandbox-public.pem');
  await mkdir(dirname(publicKeyFile), { recursive: true });
  await writeFile(publicKeyFile, sandbox.publicKeyPem);

  const lines = [
    `sandbox upstream listening: ${sandbox.url}`,
    `platform id:     ${sandbox.platformId}`,
    `webhook issuer:  ${sandbox.issuer}`,
    `public key file: ${publicKeyFile}`,
    `signing key:     ${keyFile ?? 'made for this run (--in-memory)'}`,
    `world:           ${dataDir ? `${dataDir} (${sandbox.deliveryCount} deliveries kept)` : 'in memory (--in-memory): gone at stop'}`,
    `webhooks:        ${webhookUrl ?? 'off (no --webhook-url)'}   (change: PUT ${sandbox.origin}/sandbox/webhook-url)`,
    'merchant keys:',
    ...sandbox.merchants.map((m) => `  ${m.key}  ${m.name} (platform ${m.platformId})`),
    process.env.NODE_ENV === 'production'
      ? 'control:         locked (NODE_ENV=production): the /sandbox routes change nothing'
      : `control:         ${sandbox.origin}/sandbox/info${controlToken ? `   (with the ${CONTROL_TOKEN_HEADER} header)` : ''}`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);

  const shutdown = (signal: string) => {
    process.stdout.write(`${signal}: stopping sandbox\n`);
    sandbox.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGINT', () => shutdown('SIGINT'));
  process.once('SIGTERM', () => shutdown('SIGTERM'));
}

class UsageError extends Error {}

/** The knobs the flags set; startSandbox checks them with every other way of setting them (applyKnobs). */
function knobsFrom(values: Record<string, string | boolean | undefined>): Partial<SandboxKnobs> {
  const knobs: Record<string, unknown> = {};
  for (const [flag, knob] of Object.entries(NUMERIC_KNOBS)) {
    const raw = values[flag];
    if (typeof raw === 'string') knobs[knob] = parseNumber(flag, raw);
  }
  if (values['read-scope'] !== undefined) knobs.readScope = values['read-scope'];
  if (values['webhook-order'] !== undefined) knobs.webhookOrder = values['webhook-order'];
  if (typeof values.outcomes === 'string') knobs.outcomeWeights = parseWeights(values.outcomes);
  return knobs as Partial<SandboxKnobs>;
}

/** `delivered=6,failed_then_delivered=1`: outcome=weight pairs (the knob checks names and weights). */
function parseWeights(raw: string): Record<string, number> {
  const weights: Record<string, number> = {};
  for (const pair of raw.split(',')) {
    const [outcome, weight] = pair.split('=');
    if (!outcome || weight === undefined)
      throw new UsageError(`--outcomes takes outcome=weight pairs separated by commas, got "${raw}"`);
    weights[outcome.trim()] = parseNumber('outcomes', weight);
  }
  return weights;
}

function parseNumber(flag: string, raw: string): number {
  const value = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(value)) throw new UsageError(`--${flag} must be a number, got "${raw}"`);
  return value;
}

main().catch((error: unknown) => {
  if (error instanceof SandboxWorldInUseError) {
    process.stderr.write(`sandbox: ${error.message}\n`);
    process.exit(1);
  }
  // Usage and knob problems are one line; anything else is a real failure.
  const known =
    error instanceof UsageError ||
    error instanceof RangeError ||
    (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS');
  process.stderr.write(`sandbox: ${(error as Error).message}\n${known ? `\n${USAGE}` : ''}`);
  process.exit(known ? 2 : 1);
});
