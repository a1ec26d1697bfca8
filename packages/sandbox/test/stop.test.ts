// stop() must leave nothing running, or vitest and `npm start` would hang on exit.
// Its own file, so the process holds no other sockets or timers to blur the count.
import { expect, it } from 'vitest';
import { startSandbox } from '../src/index.js';
import { startWebhookReceiver } from '../../../test/helpers/webhook-receiver.js';

const live = () =>
  process
    .getActiveResourcesInfo()
    .filter((r) => r === 'Timeout' || r.startsWith('TCP'))
    .sort();

it('leaves no timers, servers or sockets behind, even mid-retry, mid-lifecycle and mid-latency', async () => {
  const baseline = live();

  const sandbox = await startSandbox({ knobs: { stepMs: 1000, latencyMs: 300, webhookTimeoutMs: 5000 } });
  const hanging = await startWebhookReceiver({
    publicKeyPem: sandbox.publicKeyPem,
    issuer: sandbox.issuer,
    respond: () => 'hang',
  });
  sandbox.setWebhookUrl(hanging.url);
  const key = sandbox.merchants[0]!.key;
  const res = await fetch(`${sandbox.url}/${sandbox.platformId}/deliveries`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    body: JSON.stringify({
      pickup_address_street: 'a',
      pickup_address_city: 'b',
      pickup_address_country: 'US',
      pickup_name: 'c',
      dropoff_address_street: 'd',
      dropoff_address_city: 'e',
      dropoff_address_country: 'US',
      dropoff_name: 'f',
      email: 'g@example.com',
      package_delivery_mode: 'NOW',
    }),
  });
  expect(res.status).toBe(201);
  // A request still waiting out its latency, a webhook hanging, a milestone timer armed.
  const waiting = fetch(`${sandbox.url}/availability`, { headers: { authorization: `Bearer ${key}` } }).catch(
    () => 'closed',
  );
  await expect.poll(() => hanging.attempts.length).toBe(1);
  expect(sandbox.webhookStats().pending).toBe(1);
  expect(live().length).toBeGreaterThan(baseline.length);

  await sandbox.stop();
  await hanging.close();
  expect(await waiting).toBe('closed');
  await sandbox.idle(); // resolves at once once stopped
  await expect.poll(live, { timeout: 2000 }).toEqual(baseline);
});
