// A minimal upstream that answers every GET of a delivery or order with the
// same canned JSON (optionally after a fixed delay), so that the upstream
// costs the same for every contender. It counts what it serves.
// Run as a child process: node fixed-upstream.mjs <port> [latencyMs]
import { createServer } from 'node:http';

export const PLATFORM_ID = 'bench-platform';
/** Uids that read as delivered. */
export const DELIVERED_PREFIX = 'dddddddd-';

export function cannedDelivery(uid) {
  return {
    uid,
    // A uid starting with DELIVERED_PREFIX reads as delivered (the view-reads scenario's finished deliveries).
    status: uid.startsWith(DELIVERED_PREFIX) ? 'DROPOFF_COMPLETE' : 'DROPOFF_ENROUTE',
    price: { value: 12.35, currency: 'USD' },
    distance: { value: 4.21, unit: 'km' },
    pickup_name: 'Ada Shop',
    dropoff_name: 'Grace Customer',
    delivery_date: '2030-05-01T00:00:00+00:00',
    driver_id: null,
    driver_name: 'Casey Courier',
    driver_location: { lat: 37.7749, lng: -122.4194 },
    driver_pickup_phone_number: '+15550101',
    driver_dropoff_phone_number: '+15550102',
    driver_vehicle_make: 'Toyota',
    driver_vehicle_model: 'Prius',
    driver_vehicle_year: 2021,
    dropoff_time_estimated: '2030-05-01T14:45:00+00:00',
    pickup_address_street: 'Main St',
    pickup_address_city: 'Springfield',
    pickup_address_country: 'US',
    pickup_address_number: '1',
    pickup_address_secondary_number: null,
    pickup_address_county: null,
    pickup_address_state: 'CA',
    pickup_address_postal_code: '94103',
    pickup_address_latitude: 37.77,
    pickup_address_longitude: -122.41,
    dropoff_address_street: 'Elm St',
    dropoff_address_city: 'Springfield',
    dropoff_address_country: 'US',
    dropoff_address_number: '42',
    dropoff_address_secondary_number: null,
    dropoff_address_county: null,
    dropoff_address_state: 'CA',
    dropoff_address_postal_code: '94110',
    dropoff_address_latitude: 37.75,
    dropoff_address_longitude: -122.42,
    pickup_phone_number: '+15550100',
    dropoff_phone_number: '+15550199',
    pickup_instructions: 'Ring twice',
    dropoff_instructions: 'Leave at door',
    email: 'shop@example.com',
    dropoff_email: 'grace@example.com',
    package_description: 'Two books',
    package_minimum_vehicle_size: 'CAR',
    package_delivery_mode: 'SCHEDULED',
    package_requirements: ['photo_proof_of_delivery'],
    items_count: 2,
    items: [{ name: 'Book', quantity: 2, price: 9.99 }],
    weight: 1.2,
    dimensions: { height: 10, length: 30, width: 20 },
    package_value: 45.1,
    pickup_start_time: '2030-05-01T13:00:00+00:00',
    dropoff_start_time: '2030-05-01T14:00:00+00:00',
    delivery_end_time: '2030-05-01T15:00:00+00:00',
    dropoff_verification_image_url: null,
    dropoff_signature_image_url: null,
    cancellation_reason: null,
    tip: 3.5,
    delivery_style: 'Standard',
    platform_payload: { orderId: 'A-1' },
    tracking_link: `https://track.example.com/${uid}`,
    expected_cancellation_fee: { amount: '2.50', currency: 'USD' },
  };
}

/**
 * `keepAliveMs`: how long an idle connection stays open (Node's default 5 s; longer for a client slowed by valgrind,
 * which would send on a socket closing under it).
 */
export function startFixedUpstream(port = 0, latencyMs = 0, keepAliveMs = undefined) {
  let count = 0;
  const cache = new Map();
  const server = createServer((req, res) => {
    const url = req.url ?? '/';
    if (url === '/__count') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ count }));
      return;
    }
    if (url === '/__reset') {
      count = 0;
      res.writeHead(204).end();
      return;
    }
    count += 1;
    const match = /\/(?:deliveries|orders)\/([^/?]+)$/.exec(url);
    let body;
    if (req.method === 'GET' && match) {
      const uid = decodeURIComponent(match[1]);
      body = cache.get(uid);
      if (!body) {
        body = JSON.stringify({ data: cannedDelivery(uid) });
        // Bounded: a benchmark that reads a fresh uid per request would grow it without end.
        if (cache.size >= 10_000) cache.clear();
        cache.set(uid, body);
      }
    } else if (url.endsWith('/availability')) {
      body = '{"service":"bench","available":true}';
    } else {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"code":"not_found","message":"no route"}');
      return;
    }
    const send = () =>
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
    if (latencyMs > 0) setTimeout(send, latencyMs);
    else send();
  });
  if (keepAliveMs) server.keepAliveTimeout = keepAliveMs;
  return new Promise((resolve) =>
    server.listen(port, '127.0.0.1', () =>
      resolve({ server, port: server.address().port, close: () => new Promise((r) => server.close(r)) }),
    ),
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const started = await startFixedUpstream(
    Number(process.argv[2] ?? 0),
    Number(process.argv[3] ?? 0),
    Number(process.argv[4] ?? 0) || undefined,
  );
  console.log(`ready ${started.port}`);
}
