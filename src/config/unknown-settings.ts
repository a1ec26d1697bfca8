// Variables that look like settings of ours but are not: start-up names each with the setting it is closest to.
import { type Env } from './parse.js';
import { CONFIG_VARIABLES } from './variables.js';

/**
 * Variables of the project's own test and bench scripts, which the processes they start inherit: not misspellings of
 * ours.
 */
const PROJECT_TOOLING: ReadonlySet<string> = new Set([
  'REDIS_TEST_URL',
  'REDIS_SERVER_DIR',
  'WS_LEAK_CYCLES',
  'CRASH_TRIALS',
  'CRASH_EVENTS',
  'TEST_INSTALL_DEPS',
  'BENCH_WRITE',
  'BENCH_PROFILE',
]);
/**
 * Beginnings only our settings have: a variable that starts with one and is not
 * one of ours is most likely a misspelling (REDIS_ULR). Common words (DATA_, MAX_,
 * LOG_) and other programs' families (OTEL_, NODE_) are left out: the environment
 * is shared, and a warning about someone else's variable is noise.
 */
const SETTING_FAMILIES = [
  'APQ_',
  'BREAKER_',
  'CLIENT_TOKEN_',
  'CORS_',
  'FEDERATION_',
  'GRAPHQL_',
  'IDEMPOTENCY_',
  'KEYLESS_',
  'METRICS_',
  'PERSISTED_',
  'PLATFORM_',
  'RATE_LIMIT_',
  'RECONCILE_',
  'REDIS_',
  'SANDBOX_',
  'SHUTDOWN_',
  'SUBSCRIBER_',
  'SUBSCRIPTION_',
  'TRACKING_',
  'UPSTREAM_',
  'WEBHOOK_',
  'WS_',
];

/** Edits (insert, delete, substitute, swap two neighbours) that turn a into b. */
export function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i += 1) {
    for (let j = 1; j <= b.length; j += 1) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, rows[i - 2]![j - 2]! + 1);
      rows[i]![j] = best;
    }
  }
  return rows[a.length]![b.length]!;
}

export interface UnknownSetting {
  /** The variable as it is set. */
  variable: string;
  /** The setting of ours it is closest to. */
  closest: string;
}

/**
 * Variables that look like settings of ours but are not (REDIS_ULR, UPSTREAM_TIMEOUT,
 * redis_url): each with the known name closest to it. loadConfig ignores them;
 * start-up names them as a warning, since a misspelled setting is silently a default.
 */
export function unknownSettings(env: Env = process.env): UnknownSetting[] {
  const known = new Set(CONFIG_VARIABLES.map((variable) => variable.name));
  const found: UnknownSetting[] = [];
  for (const variable of Object.keys(env)) {
    if (known.has(variable) || PROJECT_TOOLING.has(variable) || env[variable] === undefined) continue;
    const upper = variable.toUpperCase();
    const ranked = [...known]
      .map((name) => ({ name, distance: editDistance(upper, name) }))
      .sort((a, b) => a.distance - b.distance);
    const closest = ranked[0]!;
    // Ours by its family, or one or two slips away from a name of ours (long names only: HOME is not HOST).
    const looksOurs =
      SETTING_FAMILIES.some((family) => upper.startsWith(family)) ||
      (upper.includes('_') && closest.distance <= (upper.length >= 10 ? 2 : 1));
    if (looksOurs) found.push({ variable, closest: closest.name });
  }
  return found;
}
