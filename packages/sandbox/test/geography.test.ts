// Where the sandbox puts addresses sent without coordinates, on both groups, as a
// client reads them back: a demo city where it really is, any other city at a
// point of its own (never a demo city's, and inside its country), and both ends
// of an order in the city they name. A partner order picked up in Springfield
// once came back with San Francisco coordinates.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/index.js';
import { haversineKm } from '../src/geography.js';

let sandbox: Sandbox;
let key: string;

beforeAll(async () => {
  sandbox = await startSandbox({ knobs: { stepMs: 0 } });
  key = sandbox.merchants[0]!.key;
});
afterAll(() => sandbox.stop());

interface LatLng {
  lat: number;
  lng: number;
}

/** Where the demo cities are (from an atlas, not from the sandbox's code). */
const DEMO_CITIES: Record<string, LatLng & { country: string }> = {
  'San Francisco': { lat: 37.7749, lng: -122.4194, country: 'US' },
  Oakland: { lat: 37.8044, lng: -122.2712, country: 'US' },
  'New York': { lat: 40.7128, lng: -74.006, country: 'US' },
  'Los Angeles': { lat: 34.0522, lng: -118.2437, country: 'US' },
  Chicago: { lat: 41.8781, lng: -87.6298, country: 'US' },
  London: { lat: 51.5074, lng: -0.1278, country: 'GB' },
  Paris: { lat: 48.8566, lng: 2.3522, country: 'FR' },
  Berlin: { lat: 52.52, lng: 13.405, country: 'DE' },
  Lisbon: { lat: 38.7223, lng: -9.1393, country: 'PT' },
};
/** Addresses are scattered ±10 km each way around their city: at most ~14 km from its centre. */
const IN_CITY_KM = 15;

async function call(method: string, path: string, body?: unknown, base = sandbox.url): Promise<any> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  expect(res.status, text).toBeLessThan(300);
  return JSON.parse(text);
}

const address = (end: 'pickup' | 'dropoff', street: string, city: string, country: string) => ({
  [`${end}_address_street`]: street,
  [`${end}_address_city`]: city,
  [`${end}_address_country`]: country,
});

/** Books on the platform group and reads the delivery back: where its two ends are. */
async function platformEnds(
  pickup: [string, string, string],
  dropoff: [string, string, string],
): Promise<{ pickup: LatLng; dropoff: LatLng }> {
  const created = await call('POST', `/${sandbox.platformId}/deliveries`, {
    ...address('pickup', ...pickup),
    ...address('dropoff', ...dropoff),
    pickup_name: 'Shop',
    dropoff_name: 'Customer',
    email: 'shop@example.com',
    package_delivery_mode: 'NOW',
  });
  const { data } = await call('GET', `/${sandbox.platformId}/deliveries/${created.uid}`);
  return ends(data);
}

function ends(data: Record<string, number | null>): { pickup: LatLng; dropoff: LatLng } {
  return {
    pickup: { lat: data.pickup_address_latitude!, lng: data.pickup_address_longitude! },
    dropoff: { lat: data.dropoff_address_latitude!, lng: data.dropoff_address_longitude! },
  };
}

/** How far a point is from the nearest demo city. */
function nearestDemoCityKm(point: LatLng): number {
  return Math.min(...Object.values(DEMO_CITIES).map((city) => haversineKm(city, point)));
}

const inContiguousUs = (point: LatLng) => point.lat > 24 && point.lat < 50 && point.lng > -125 && point.lng < -66;

describe('sandbox geography, platform group', () => {
  it('places a demo city’s addresses in that city', async () => {
    for (const [name, city] of Object.entries(DEMO_CITIES)) {
      const placed = await platformEnds(
        ['Main St', name, city.country],
        ['2 High St', name.toUpperCase(), city.country],
      );
      expect(haversineKm(placed.pickup, city), name).toBeLessThan(IN_CITY_KM);
      expect(haversineKm(placed.dropoff, city), name).toBeLessThan(IN_CITY_KM);
    }
  });

  it('places any other city at a point of its own, away from every demo city, the same each time', async () => {
    const springfield = await platformEnds(['Main St', 'Springfield', 'US'], ['Elm St', 'Springfield', 'US']);
    const again = await platformEnds(['Oak Ave', 'Springfield', 'US'], ['Evergreen Terrace', ' springfield ', 'US']);
    const shelbyville = await platformEnds(['Main St', 'Shelbyville', 'US'], ['Elm St', 'Shelbyville', 'US']);
    for (const point of [springfield.pickup, springfield.dropoff, again.pickup, again.dropoff, shelbyville.pickup]) {
      expect(nearestDemoCityKm(point)).toBeGreaterThan(40);
      expect(inContiguousUs(point)).toBe(true);
    }
    // One Springfield: every address there within the city's box, whatever the spelling.
    for (const point of [springfield.dropoff, again.pickup, again.dropoff])
      expect(haversineKm(point, springfield.pickup)).toBeLessThan(2 * IN_CITY_KM);
    expect(haversineKm(shelbyville.pickup, springfield.pickup)).toBeGreaterThan(2 * IN_CITY_KM);
    // The same address, the same point (a quote and a booking agree).
    expect((await platformEnds(['Main St', 'Springfield', 'US'], ['Elm St', 'Springfield', 'US'])).pickup).toEqual(
      springfield.pickup,
    );
  });

  it('does not take Paris, US for Paris, France', async () => {
    const placed = await platformEnds(['Main St', 'Paris', 'US'], ['Elm St', 'Paris', 'US']);
    expect(haversineKm(placed.pickup, DEMO_CITIES.Paris!)).toBeGreaterThan(1000);
    expect(inContiguousUs(placed.pickup)).toBe(true);
  });
});

describe('sandbox geography, partner group', () => {
  const springfieldOrder = (reference: string, extra: Record<string, unknown> = {}) => ({
    partner_reference: reference,
    ...address('pickup', 'Dock Rd', 'Springfield', 'US'),
    pickup_name: 'Warehouse',
    dropoff_name: 'Customer',
    email: 'ops@example.com',
    currency: 'EUR',
    package_delivery_mode: 'NOW',
    ...extra,
  });

  it('keeps a seeded order picked up in Springfield in Springfield, dropoff included', async () => {
    const seeded = sandbox.seedPartnerOrder(key, springfieldOrder('geo-springfield'));
    const { data } = await call('GET', `/orders/${seeded.uid}`);
    const placed = ends(data);
    const platform = await platformEnds(['Main St', 'Springfield', 'US'], ['Elm St', 'Springfield', 'US']);
    expect(nearestDemoCityKm(placed.pickup)).toBeGreaterThan(40);
    expect(haversineKm(placed.pickup, platform.pickup)).toBeLessThan(2 * IN_CITY_KM);
    // The default dropoff of a seed is in the pickup's city, not San Francisco.
    expect(data.dropoff_address_city).toBe('Springfield');
    expect(haversineKm(placed.dropoff, placed.pickup)).toBeLessThan(2 * IN_CITY_KM);
    // The same over HTTP.
    const viaHttp = await call('POST', '/sandbox/orders', springfieldOrder('geo-springfield-http'), sandbox.origin);
    expect(viaHttp.data.dropoff_address_city).toBe('Springfield');
    expect(haversineKm(ends(viaHttp.data).pickup, placed.pickup)).toBeLessThan(2 * IN_CITY_KM);
  });

  it('drives an order without a dropoff address to a point in the pickup’s city', async () => {
    const seeded = sandbox.seedPartnerOrder(
      key,
      springfieldOrder('geo-no-dropoff', {
        dropoff_address_street: undefined,
        dropoff_address_city: undefined,
        dropoff_address_country: undefined,
      }),
    );
    // Assigned … dropoff_arrived: the courier is where the dropoff was placed.
    for (let step = 0; step < 6; step++) await sandbox.advance(seeded.uid);
    const { data } = await call('GET', `/orders/${seeded.uid}`);
    expect(data.status).toBe('DROPOFF_ARRIVED');
    expect(data.dropoff_address_latitude).toBeNull();
    const pickup = ends(data).pickup;
    expect(nearestDemoCityKm(pickup)).toBeGreaterThan(40);
    expect(haversineKm(data.driver_location, pickup)).toBeLessThan(2 * IN_CITY_KM);
    // And the quote prices that short trip, not one to San Francisco.
    const quote = await call('POST', '/quote', springfieldOrder('geo-quote'));
    expect(quote.data.distance).toBeLessThan(2 * IN_CITY_KM);
  });
});
