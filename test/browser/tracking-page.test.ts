// The live tracking page in headless Chromium, against the facade as `npm start`
// runs it (embedded sandbox, its demo key on the page): book, watch the pin move
// and the timeline reach DROPOFF_COMPLETE; open an existing uid from a link; a
// refused key. A screenshot of the finished delivery is written to
// test-results/tracking-page.png for people to look at.
import { mkdirSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { chromiumAvailable, launchBrowser } from '../helpers/browser.js';
import { deliveryInput, KEYLESS_BUDGETS_OFF, makeDataDir } from '../helpers/stack.js';

const STEP_MS = 250;
const SCREENSHOT = path.resolve('test-results/tracking-page.png');

interface Watched {
  page: Page;
  /** Every request the page made, and anything it logged as an error. */
  requests: string[];
  problems: string[];
}

describe.runIf(chromiumAvailable('tracking-page.test.ts'))('live tracking page in Chromium', () => {
  let app: App;
  let dataDir: string;
  let browser: Awaited<ReturnType<typeof launchBrowser>>;

  beforeAll(async () => {
    dataDir = makeDataDir();
    app = await startApp(
      loadConfig({
        PORT: '0',
        SANDBOX_PORT: '0',
        SANDBOX_STEP_MS: String(STEP_MS),
        SANDBOX_RETURN_RATE: '0',
        ...KEYLESS_BUDGETS_OFF,
        DATA_DIR: dataDir,
        LOG_LEVEL: 'silent',
      }),
    );
    browser = await launchBrowser();
  }, 60_000);

  afterAll(async () => {
    await browser?.dispose();
    await app?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  async function openPage(suffix = '/'): Promise<Watched> {
    const page = await browser.newPage();
    const requests: string[] = [];
    const problems: string[] = [];
    page.on('request', (request) => requests.push(request.url()));
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(`console: ${message.text()}`);
    });
    await page.goto(`${app.url}${suffix}`);
    await page.waitForSelector('body[data-ready="true"]');
    return { page, requests, problems };
  }

  async function gql<T>(query: string, variables: Record<string, unknown>): Promise<T> {
    const response = await fetch(`${app.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk_test_demo_merchant' },
      body: JSON.stringify({ query, variables }),
    });
    const body = (await response.json()) as { data?: T; errors?: unknown };
    if (!body.data) throw new Error(`GraphQL failed: ${JSON.stringify(body.errors)}`);
    return body.data;
  }

  const pin = (page: Page) =>
    page.$eval('#courier', (node) => ({
      lat: Number((node as SVGGElement).dataset.lat),
      lng: Number((node as SVGGElement).dataset.lng),
      transform: (node as SVGGElement).style.transform,
    }));

  it('books a sandbox delivery, moves the pin, and reaches DROPOFF_COMPLETE', async () => {
    const { page, requests, problems } = await openPage();
    // The sandbox's key is filled in; the page says what to do.
    expect(await page.inputValue('#key')).toBe('sk_test_demo_merchant');
    expect(await page.textContent('#message')).toContain('Book a sandbox delivery');
    // Nothing is followed yet: the indicator says so, not "offline" (which reads as the server being down).
    expect(await page.textContent('#connection')).toBe('not following');

    await page.evaluate(() => {
      const pins: Array<{ lat: number; lng: number; transform: string }> = [];
      (window as unknown as { pins: typeof pins }).pins = pins;
      new MutationObserver(() => {
        const courier = document.querySelector<SVGGElement>('#courier:not(.unplaced)');
        if (!courier?.dataset.lat) return;
        const now = {
          lat: Number(courier.dataset.lat),
          lng: Number(courier.dataset.lng),
          transform: courier.style.transform,
        };
        const last = pins.at(-1);
        if (!last || last.lat !== now.lat || last.lng !== now.lng || last.transform !== now.transform) pins.push(now);
      }).observe(document.body, {
        subtree: true,
        childList: true,
        attributes: true,
        attributeFilter: ['data-lat', 'data-lng', 'style', 'class'],
      });
    });
    await page.click('#book');
    await page.waitForSelector('#tracker:not([hidden])');
    const uid = (await page.textContent('#fact-uid'))!.trim();
    expect(uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(new URL(page.url()).hash).toBe(`#uid=${uid}`);

    // Every place the pin is drawn, as the page draws it (recorded in the page, so a slow poll misses nothing).
    await page.waitForSelector('#timeline li[data-status="DROPOFF_COMPLETE"].done', { timeout: 30_000 });
    const drawn = await page.evaluate(
      () => (window as unknown as { pins: Array<{ lat: number; lng: number; transform: string }> }).pins,
    );
    await page.waitForSelector('#timeline li[data-status="DROPOFF_COMPLETE"].current', { timeout: 5_000 });
    expect(new Set(drawn.map((p) => `${p.lat},${p.lng}`)).size).toBeGreaterThanOrEqual(4);
    expect(new Set(drawn.map((p) => p.transform)).size).toBeGreaterThanOrEqual(4);

    // The pin ends where the upstream says the dropoff is.
    const read = await gql<{
      delivery: { status: string; dropoff: { address: { latitude: number; longitude: number } } };
    }>('query($uid: ID!) { delivery(uid: $uid) { status dropoff { address { latitude longitude } } } }', { uid });
    expect(read.delivery.status).toBe('DROPOFF_COMPLETE');
    const last = await pin(page);
    expect(last.lat).toBeCloseTo(read.delivery.dropoff.address.latitude, 6);
    expect(last.lng).toBeCloseTo(read.delivery.dropoff.address.longitude, 6);

    // Every milestone is ticked, in order, with the time it arrived.
    const timeline = await page.$$eval('#timeline li', (items) =>
      items.map((li) => ({
        status: (li as HTMLElement).dataset.status,
        done: li.classList.contains('done'),
        time: li.querySelector('time')?.textContent ?? '',
      })),
    );
    expect(timeline.map((step) => step.status)).toEqual([
      'CREATED',
      'ASSIGNED',
      'PICKUP_ENROUTE',
      'PICKUP_ARRIVED',
      'PICKUP_COMPLETE',
      'DROPOFF_ENROUTE',
      'DROPOFF_ARRIVED',
      'DROPOFF_COMPLETE',
    ]);
    expect(timeline.every((step) => step.done && step.time !== '')).toBe(true);
    expect(await page.textContent('#message')).toMatch(/^Delivered at /);
    expect(await page.textContent('#fact-left')).toBe('arrived');
    expect(
      Number(await page.$eval('#trail', (node) => node.getAttribute('points')!.split(' ').length)),
    ).toBeGreaterThanOrEqual(4);

    // Nothing came from anywhere but the facade, and nothing went wrong in the page.
    const foreign = requests.filter(
      (url) => new URL(url).origin !== new URL(app.url).origin && !url.startsWith('data:'),
    );
    expect(foreign).toEqual([]);
    expect(requests.some((url) => url.includes('/tracking/app.js'))).toBe(true);
    expect(problems).toEqual([]);

    // Once its glide (a CSS transition on the pin) is over, the pin is drawn on the dropoff marker.
    await page.$eval('#courier', (node) => Promise.all(node.getAnimations().map((glide) => glide.finished)));
    const centre = (selector: string) =>
      page.$eval(selector, (node) => {
        const box = node.getBoundingClientRect();
        return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
      });
    const drawnPin = await centre('#courier .dot');
    const drawnDropoff = await centre('[data-testid="dropoff"] circle');
    expect(Math.hypot(drawnPin.x - drawnDropoff.x, drawnPin.y - drawnDropoff.y)).toBeLessThan(2);

    mkdirSync(path.dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(statSync(SCREENSHOT).size).toBeGreaterThan(10_000);
    await page.close();
  }, 60_000);

  it('opens an existing delivery from a link, with its history and trail', async () => {
    const booked = await gql<{ createDelivery: { data: { uid: string } } }>(
      'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
      { input: deliveryInput() },
    );
    const uid = booked.createDelivery.data.uid;
    // Let it run to the end before anyone looks, so the page must rebuild the story from stored events.
    await waitUntil(async () => {
      const read = await gql<{ delivery: { events: { edges: Array<{ node: { name: string } }> } } }>(
        'query($uid: ID!) { delivery(uid: $uid) { events(first: 100) { edges { node { name } } } } }',
        { uid },
      );
      return read.delivery.events.edges.some((edge) => edge.node.name === 'delivery.dropoff_complete');
    });

    const { page, problems } = await openPage(`/#uid=${uid}`);
    await page.waitForSelector('#timeline li[data-status="DROPOFF_COMPLETE"].current', { timeout: 10_000 });
    expect(await page.textContent('#fact-uid')).toBe(uid);
    expect(await page.inputValue('#uid-input')).toBe(uid);
    const times = await page.$$eval('#timeline li time', (nodes) => nodes.map((n) => n.textContent));
    expect(times.filter((t) => t).length).toBe(8);
    expect(await page.$eval('#trail', (node) => node.getAttribute('points')!.split(' ').length)).toBeGreaterThanOrEqual(
      4,
    );
    expect(problems).toEqual([]);
    await page.close();
  }, 60_000);

  it('says so when the key is refused or the uid is unknown', async () => {
    const { page } = await openPage();
    await page.fill('#key', 'sk_test_not_a_merchant');
    await page.fill('#uid-input', '00000000-0000-4000-8000-000000000000');
    await page.click('#open');
    await page.waitForSelector('#message[data-tone="error"]');
    expect(await page.textContent('#message')).toMatch(/key was refused|UNAUTHENTICATED/);
    expect(await page.isHidden('#tracker')).toBe(true);
    // A connection was tried and refused: now "offline" is the truth, with the reason.
    expect(await page.textContent('#connection')).toBe('offline (the merchant key was refused)');

    await page.fill('#key', 'sk_test_demo_merchant');
    await page.click('#open');
    await page.waitForFunction(() => document.querySelector('#message')?.textContent?.includes('No delivery'));
    expect(await page.textContent('#message')).toBe(
      'No delivery 00000000-0000-4000-8000-000000000000 is visible to this key.',
    );
    await page.close();
  }, 30_000);

  it('opens a delivery from a client token link: no key field, live to the end, the token out of the URL sent to the server', async () => {
    const booked = await gql<{ createDelivery: { data: { uid: string } } }>(
      'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
      { input: deliveryInput() },
    );
    const uid = booked.createDelivery.data.uid;
    const made = await gql<{ createClientToken: { data: { token: string } } }>(
      'mutation($uids: [ID!]!) { createClientToken(uids: $uids, ttlSeconds: 600) { ... on MutationCreateClientTokenSuccess { data { token } } } }',
      { uids: [uid] },
    );
    const token = made.createClientToken.data.token;

    const { page, requests, problems } = await openPage(`/?token=${token}`);
    await page.waitForSelector('#tracker:not([hidden])');
    expect(await page.textContent('#fact-uid')).toBe(uid);
    // No key anywhere on the page: the field is hidden and empty, the sandbox's demo key not even filled in, no
    // booking.
    expect(await page.isHidden('#key-form')).toBe(true);
    expect(await page.isHidden('#book-form')).toBe(true);
    expect(await page.inputValue('#key')).toBe('');
    expect(await page.evaluate(() => document.documentElement.outerHTML.includes('sk_test_demo_merchant'))).toBe(false);
    // A customer's view has no developer's tool: no GraphiQL link, not even a hidden one.
    expect(await page.$('#graphiql-link')).toBeNull();
    expect(
      await page.$$eval('a', (links) => links.map((link) => `${link.textContent} ${link.getAttribute('href')}`)),
    ).toEqual([]);
    // The token moved into the fragment, which the browser never sends; a reload still works from it.
    const url = new URL(page.url());
    expect(url.search).toBe('');
    expect(new URLSearchParams(url.hash.slice(1)).get('token')).toBe(token);
    expect(new URLSearchParams(url.hash.slice(1)).get('uid')).toBe(uid);

    // The sandbox moves it along; the page follows live to the end.
    await page.waitForSelector('#timeline li[data-status="DROPOFF_COMPLETE"].current', { timeout: 30_000 });
    expect(await page.textContent('#connection')).not.toMatch(/offline/);
    await page.reload();
    await page.waitForSelector('#timeline li[data-status="DROPOFF_COMPLETE"].current', { timeout: 10_000 });
    expect(await page.textContent('#fact-uid')).toBe(uid);
    expect(requests.filter((request) => request.includes('token='))).toEqual([`${app.url}/?token=${token}`]);
    expect(problems).toEqual([]);
    await page.close();
  }, 60_000);

  it('says so when a tracking link is altered or has expired', async () => {
    const booked = await gql<{ createDelivery: { data: { uid: string } } }>(
      'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
      { input: deliveryInput() },
    );
    const expired = await app.services.clientTokens.issue(
      'sk_test_demo_merchant',
      [booked.createDelivery.data.uid],
      -1,
    );
    const { page } = await openPage(`/#token=${expired.token}`);
    await page.waitForSelector('#message[data-tone="error"]');
    expect(await page.textContent('#message')).toMatch(/tracking link/);
    expect(await page.textContent('#connection')).toMatch(/expired or is not valid/);
    expect(await page.isHidden('#key-form')).toBe(true);
    expect(await page.isHidden('#tracker')).toBe(true);
    await page.close();
  }, 30_000);

  it('links to GraphiQL, which loads from the facade alone and books anew after a reload', async () => {
    const { page, requests, problems } = await openPage();
    expect(await page.isVisible('nav a:text("GraphiQL")')).toBe(true);
    await page.click('nav a:text("GraphiQL")');
    const editor = () =>
      page.evaluate(() => document.querySelector('.graphiql-query-editor')?.textContent?.replace(/\u00a0/g, ' ') ?? '');
    const examplesShown = () =>
      page.waitForFunction(
        () =>
          document
            .querySelector('.graphiql-query-editor')
            ?.textContent?.replace(/\u00a0/g, ' ')
            .includes('mutation Book'),
        null,
        { timeout: 30_000 },
      );
    /** Puts the cursor in the Book operation and runs it (Ctrl+Enter runs the operation under the cursor). */
    const runBook = async () => {
      await page.locator('.graphiql-query-editor .view-line', { hasText: 'mutation' }).first().click();
      const answered = page.waitForResponse(
        (r) => r.request().method() === 'POST' && (r.request().postData() ?? '').includes('createDelivery'),
      );
      await page.keyboard.press('Control+Enter');
      const body = (await (await answered).json()) as { data: { createDelivery: { data: { uid: string } } } };
      return body.data.createDelivery.data.uid;
    };

    await examplesShown();
    expect(await editor()).toMatch(/idempotencyKey: "graphiql-book-[\w-]{12}"/);
    const uid = await runBook();
    expect(uid).toMatch(/^[0-9a-f-]{36}$/);
    // The same page, the same key: the same booking.
    expect(await runBook()).toBe(uid);

    // GraphiQL restores its tabs after a reload; the example's key in them is renewed, so Book books again.
    await page.reload();
    await page.locator('.graphiql-tab').first().click();
    await examplesShown();
    expect(await runBook()).not.toBe(uid);

    // Monaco's workers are files of the facade too, and everything came from /graphiql/ under a content hash.
    const own = requests
      .filter((url) => new URL(url).pathname.startsWith('/graphiql/'))
      .map((url) => new URL(url).pathname);
    expect(own.some((path) => /^\/graphiql\/graphiql\.[0-9a-f]{16}\.js$/.test(path))).toBe(true);
    expect(own.some((path) => /^\/graphiql\/graphql\.worker\.[0-9a-f]{16}\.js$/.test(path))).toBe(true);
    expect(own.filter((path) => !/\.[0-9a-f]{16}\.\w+$/.test(path))).toEqual([]);
    const foreign = requests.filter(
      (url) => new URL(url).origin !== new URL(app.url).origin && !url.startsWith('data:'),
    );
    expect(foreign).toEqual([]);
    // No error, and nothing the Content-Security-Policy refused (Chromium logs that as a console error).
    expect(problems).toEqual([]);
    await page.close();
  }, 90_000);
});

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('timed out');
}
