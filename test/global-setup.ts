// Before any test file: make sure the programs the Redis and browser tests need
// are on the machine, so `npm ci && npm test` runs everything on a fresh Debian
// machine. Missing ones are installed from Debian's packages by the project's own
// scripts (scripts/redis-server.sh, scripts/chromium.sh), when apt-get can run as
// root or through password-less sudo. Otherwise those tests are skipped with a
// line saying why (and fail in CI). TEST_INSTALL_DEPS=false turns this off.
import { execFileSync, spawnSync } from 'node:child_process';
import { findChromium } from './helpers/browser.js';
import { findRedisServer } from './helpers/redis.js';

function canInstall(): boolean {
  if (spawnSync('sh', ['-c', 'command -v apt-get'], { stdio: 'ignore' }).status !== 0) return false;
  if (process.getuid?.() === 0) return true;
  return spawnSync('sudo', ['-n', 'true'], { stdio: 'ignore' }).status === 0;
}

export default function setup(): void {
  if (process.env.TEST_INSTALL_DEPS === 'false') return;
  const missing = [
    ...(findRedisServer() ? [] : [{ what: "Debian's redis-server (for the Redis tests)", script: 'scripts/redis-server.sh' }]),
    ...(findChromium() ? [] : [{ what: "Debian's chromium (for the tracking page's browser test)", script: 'scripts/chromium.sh' }]),
  ];
  if (!missing.length) return;
  if (!canInstall()) {
    console.warn(`test setup: cannot install ${missing.map((m) => m.what).join(' and ')} here (needs apt-get as root or password-less sudo); those tests will be skipped`);
    return;
  }
  for (const { what, script } of missing) {
    console.warn(`test setup: installing ${what} with ${script} install (once; TEST_INSTALL_DEPS=false skips this)`);
    try {
      execFileSync('bash', [script, 'install'], { stdio: ['ignore', 'inherit', 'inherit'], timeout: 600_000 });
    } catch (error) {
      console.warn(`test setup: ${script} install failed (${(error as Error).message}); those tests will be skipped unless CI is set`);
    }
  }
}
