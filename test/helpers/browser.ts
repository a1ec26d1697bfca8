// Headless Chromium for the page tests: Debian's /usr/bin/chromium driven by
// playwright-core (no browser download). .ci/run installs it through
// scripts/chromium.sh; without it the browser tests are skipped locally with a
// line saying so, and fail in CI.
import { accessSync, constants, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

const CANDIDATES = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].filter(
  (c): c is string => Boolean(c),
);

export function findChromium(): string | undefined {
  for (const candidate of CANDIDATES) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // next
    }
  }
  return undefined;
}

export function chromiumAvailable(file: string): boolean {
  if (findChromium() || process.env.CI) return true;
  console.warn(`${file}: skipped: no Chromium (run scripts/chromium.sh install, which installs Debian's chromium)`);
  return false;
}

/**
 * Launches Chromium headless with a fresh profile. The flags keep it off the
 * network beyond the page under test (this machine refuses everything else),
 * and --no-sandbox lets it run as root in CI.
 */
export async function launchBrowser(): Promise<BrowserContext & { dispose(): Promise<void> }> {
  const executablePath = findChromium();
  if (!executablePath) throw new Error('Chromium not found: run scripts/chromium.sh install (or set CHROMIUM_PATH)');
  const profile = mkdtempSync(path.join(tmpdir(), 'delivery-graph-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width: 1200, height: 820 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return Object.assign(context, {
    async dispose() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  });
}
