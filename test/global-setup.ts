// Before a tier's first test file: make sure the programs its tests need are on
// the machine, so `npm ci && npm test` runs everything on a fresh Debian machine.
// Missing ones are installed from Debian's packages by the project's own scripts
// (scripts/redis-server.sh, scripts/chromium.sh), when apt-get can run as root or
// through password-less sudo. Otherwise those tests are skipped with a line saying
// why (and fail in CI). TEST_INSTALL_DEPS=false turns this off. Each tier that
// needs a program names this file in vitest.config.ts; the unit tier does not.
import { execFileSync, spawnSync } from 'node:child_process';
import type { TestProject } from 'vitest/node';
import { findChromium } from './helpers/browser.js';
import { findRedisServer } from './helpers/redis.js';

interface Program {
  what: string;
  script: string;
  found: () => string | undefined;
}

const REDIS: Program = {
  what: "Debian's redis-server (for the Redis tests)",
  script: 'scripts/redis-server.sh',
  found: findRedisServer,
};
const CHROMIUM: Program = {
  what: "Debian's chromium (for the tracking page's browser test)",
  script: 'scripts/chromium.sh',
  found: findChromium,
};

/** What each tier's tests start; a tier not listed here needs nothing installed. */
const NEEDS: Record<string, Program[]> = { integration: [REDIS], slow: [REDIS], browser: [CHROMIUM] };

function canInstall(): boolean {
  if (spawnSync('sh', ['-c', 'command -v apt-get'], { stdio: 'ignore' }).status !== 0) return false;
  if (process.getuid?.() === 0) return true;
  return spawnSync('sudo', ['-n', 'true'], { stdio: 'ignore' }).status === 0;
}

export default function setup(project: TestProject): void {
  if (process.env.TEST_INSTALL_DEPS === 'false') return;
  const missing = (NEEDS[project.name] ?? []).filter((program) => !program.found());
  if (!missing.length) return;
  if (!canInstall()) {
    console.warn(
      `test setup: cannot install ${missing.map((m) => m.what).join(' and ')} here (needs apt-get as root or password-less sudo); those tests will be skipped`,
    );
    return;
  }
  for (const { what, script } of missing) {
    console.warn(`test setup: installing ${what} with ${script} install (once; TEST_INSTALL_DEPS=false skips this)`);
    try {
      execFileSync('bash', [script, 'install'], { stdio: ['ignore', 'inherit', 'inherit'], timeout: 600_000 });
    } catch (error) {
      console.warn(
        `test setup: ${script} install failed (${(error as Error).message}); those tests will be skipped unless CI is set`,
      );
    }
  }
}
