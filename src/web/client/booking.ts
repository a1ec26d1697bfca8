// Booking a sandbox delivery from the page: a sample trip, booked once (an idempotency key of its own), then
// followed.
import { currentKey } from './credentials.js';
import { BOOK, type BookResult } from './operations.js';
import { execute } from './socket.js';
import { open } from './tracking.js';
import { say, ui } from './ui.js';

/** A short trip across San Francisco, with the dropoff a few hundred metres apart each time so bookings differ. */
function sampleInput(): Record<string, unknown> {
  const jitter = () => (Math.random() - 0.5) * 0.01;
  return {
    pickup: {
      name: 'Ada Shop',
      email: 'shop@example.com',
      address: {
        street: 'Market St',
        number: '1455',
        city: 'San Francisco',
        country: 'US',
        latitude: 37.7763,
        longitude: -122.4172,
      },
    },
    dropoff: {
      name: 'Grace',
      address: {
        street: 'Valencia St',
        number: '900',
        city: 'San Francisco',
        country: 'US',
        latitude: 37.7572 + jitter(),
        longitude: -122.4211 + jitter(),
      },
    },
    mode: 'NOW',
    payload: { source: 'tracking-page' },
  };
}

export async function book(): Promise<void> {
  if (!currentKey()) return say('Enter a merchant key first.', 'error');
  ui.bookButton.disabled = true;
  say('Booking…');
  try {
    const { createDelivery: result } = await execute<{ createDelivery: BookResult }>(BOOK, {
      input: sampleInput(),
      idempotencyKey: `tracking-page-${crypto.randomUUID()}`,
    });
    if (result.__typename === 'MutationCreateDeliverySuccess' && 'data' in result) return await open(result.data.uid);
    const fields = 'fields' in result ? ` ${result.fields.map((f) => `${f.path}: ${f.message}`).join('; ')}` : '';
    say(`Not booked: ${'message' in result ? result.message : result.__typename}${fields}`, 'error');
  } catch (error) {
    say(`Not booked: ${(error as Error).message}`, 'error');
  } finally {
    ui.bookButton.disabled = false;
  }
}
