// The value parsers every area of the configuration shares, and the error they stop the start with: one line that
// names the variable and says what is wrong with its value.

export type Env = Record<string, string | undefined>;

export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(
    readonly variable: string,
    problem: string,
  ) {
    super(`${variable}: ${problem}`);
  }
}

/** The variable's value, trimmed; blank counts as unset. */
export function text(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === '' ? undefined : value;
}

export function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `expected a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `expected ${min} to ${max}, got ${value}`);
  return value;
}

const DURATION_UNITS_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration such as 30d, 12h, 90m, 5s or 250ms, in milliseconds. */
export function duration(env: Env, name: string, fallback: string, minMs: number): number {
  const raw = text(env, name) ?? fallback;
  const match = /^(\d+)\s*(ms|s|m|h|d)$/i.exec(raw);
  if (!match) throw new ConfigError(name, `expected a duration such as 30d, 12h, 90m or 5s, got "${raw}"`);
  const ms = Number(match[1]) * DURATION_UNITS_MS[match[2]!.toLowerCase()]!;
  if (ms < minMs || ms > 10 * 365 * 86_400_000)
    throw new ConfigError(name, `expected ${minMs / 1000} s to 10 years, got "${raw}"`);
  return ms;
}

/** A share from 0 to 1, e.g. 0.1. */
export function fraction(env: Env, name: string, fallback: number): number {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!/^\d*\.?\d+$/.test(raw) || !(value >= 0 && value <= 1))
    throw new ConfigError(name, `expected a number from 0 to 1, got "${raw}"`);
  return value;
}

export function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  const value = raw.toLowerCase() as T;
  if (!allowed.includes(value)) throw new ConfigError(name, `expected one of ${allowed.join(', ')}, got "${raw}"`);
  return value;
}

/** An http(s) URL, or undefined when the variable is unset. */
export function httpUrlOf(env: Env, name: string): URL | undefined {
  const raw = text(env, name);
  if (raw === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(name, `not a URL: "${raw}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new ConfigError(name, `expected http or https, got ${url.protocol}`);
  return url;
}

/** An optional listen port that must not be one the facade already uses (0: any free port, never a clash). */
export function extraPort(
  env: Env,
  name: string,
  taken: ReadonlyArray<[string, number | undefined]>,
): number | undefined {
  if (text(env, name) === undefined) return undefined;
  const port = integer(env, name, 0, 0, 65535);
  for (const [other, value] of taken) {
    if (port !== 0 && port === value) throw new ConfigError(name, `${port} is ${other} as well; choose another port`);
  }
  return port;
}
