// Where things are: an address's point (the demo cities where they are, any other
// city at a stable point of its own), distances, and points along the way.
import { createHash } from 'node:crypto';
import type { WireDeliveryRequest, WireLatLng } from './wire.js';

export interface Place {
  point: WireLatLng;
  /** False when the request had no address and no coordinates for this end. */
  given: boolean;
}

/**
 * The demo cities, placed where they are. Any other city gets a point of its
 * own derived from its name and country (a stand-in geocoder), never one of
 * these: a Springfield must not come back with San Francisco's coordinates.
 * Deterministic, so a quote and a booking agree.
 */
const KNOWN_CITIES: Readonly<Record<string, { centre: WireLatLng; country: string }>> = {
  'san francisco': { centre: { lat: 37.7749, lng: -122.4194 }, country: 'US' },
  oakland: { centre: { lat: 37.8044, lng: -122.2712 }, country: 'US' },
  'new york': { centre: { lat: 40.7128, lng: -74.006 }, country: 'US' },
  'los angeles': { centre: { lat: 34.0522, lng: -118.2437 }, country: 'US' },
  chicago: { centre: { lat: 41.8781, lng: -87.6298 }, country: 'US' },
  london: { centre: { lat: 51.5074, lng: -0.1278 }, country: 'GB' },
  paris: { centre: { lat: 48.8566, lng: 2.3522 }, country: 'FR' },
  berlin: { centre: { lat: 52.52, lng: 13.405 }, country: 'DE' },
  lisbon: { centre: { lat: 38.7223, lng: -9.1393 }, country: 'PT' },
};
/** Where an end goes when neither end names a city (validation refuses such a request; locate answers anyway). */
const FALLBACK_CITY = 'san francisco';

interface Box {
  south: number;
  north: number;
  west: number;
  east: number;
}
/** Rough inland boxes, so a derived city of these countries lands inside it; other countries anywhere. */
const COUNTRY_BOXES: Readonly<Record<string, Box>> = {
  US: { south: 31, north: 47, west: -120, east: -76 },
  GB: { south: 51, north: 55, west: -3, east: 0 },
  FR: { south: 44, north: 49, west: 0, east: 6 },
  DE: { south: 48, north: 54, west: 7, east: 14 },
  PT: { south: 37.5, north: 41.5, west: -8.5, east: -7 },
};
const WORLD: Box = { south: -45, north: 60, west: -180, east: 180 };
const COUNTRY_ALIASES: Readonly<Record<string, string>> = { USA: 'US', UK: 'GB' };
/** A derived city keeps this far from every demo city, so their addresses never mix. */
const MIN_KM_FROM_KNOWN_CITY = 60;
/** Half the side of the box addresses are scattered in around their city: ~10 km each way. */
const BOX_HALF_KM = 10;

const ADDRESS_PARTS = [
  'street',
  'number',
  'secondary_number',
  'city',
  'county',
  'state',
  'postal_code',
  'country',
] as const;

interface CityName {
  city: string;
  country: string;
}

/** The city and country one end names, normalised; undefined when it names no city. */
function cityOf(end: 'pickup' | 'dropoff', fields: Record<string, unknown>): CityName | undefined {
  const text = (value: unknown) => (typeof value === 'string' ? value.trim().replace(/\s+/g, ' ') : '');
  const city = text(fields[`${end}_address_city`]).toLowerCase();
  if (!city) return undefined;
  const country = text(fields[`${end}_address_country`]).toUpperCase();
  return { city, country: COUNTRY_ALIASES[country] ?? country };
}

/**
 * The centre of a city: where it is for a demo city (in its own country), else a stable point derived from the name.
 */
function cityCentre(name: CityName): WireLatLng {
  const known = KNOWN_CITIES[name.city];
  if (known && (name.country === '' || name.country === known.country)) return known.centre;
  const box = COUNTRY_BOXES[name.country] ?? WORLD;
  let point: WireLatLng = { lat: 0, lng: 0 };
  // Redrawn while too close to a demo city; every box has room far from them, so the first draw nearly always does.
  for (let attempt = 0; attempt < 32; attempt++) {
    const digest = createHash('sha256').update(`${name.city}|${name.country}|${attempt}`).digest();
    point = {
      lat: round6(box.south + (digest.readUInt32BE(0) / 0xffffffff) * (box.north - box.south)),
      lng: round6(box.west + (digest.readUInt32BE(4) / 0xffffffff) * (box.east - box.west)),
    };
    if (Object.values(KNOWN_CITIES).every((other) => haversineKm(other.centre, point) >= MIN_KM_FROM_KNOWN_CITY)) break;
  }
  return point;
}

/**
 * Coordinates of one end: the request's own latitude/longitude when both are
 * given, else a stable point derived from the address text, scattered around
 * its city. An end that names no city (the partner group's dropoff address is
 * optional) is placed in the other end's city, not in some default one.
 */
export function locate(end: 'pickup' | 'dropoff', request: WireDeliveryRequest): Place {
  const fields = request as unknown as Record<string, unknown>;
  const lat = fields[`${end}_address_latitude`];
  const lng = fields[`${end}_address_longitude`];
  if (typeof lat === 'number' && typeof lng === 'number') return { point: { lat, lng }, given: true };

  const parts = ADDRESS_PARTS.map((p) => fields[`${end}_address_${p}`]).map((v) =>
    typeof v === 'string' ? v.trim().toLowerCase() : '',
  );
  const given = parts.some((p) => p !== '');
  // Without any address text, hash the contact name so two such ends still differ.
  const text = given ? parts.join('|') : `${end}|${String(fields[`${end}_name`] ?? '')}`;
  const other = cityOf(end === 'pickup' ? 'dropoff' : 'pickup', fields);
  const own = cityOf(end, fields);
  // A city without a country (allowed on a partner dropoff) is taken to be in the other end's country.
  const city = own
    ? { ...own, country: own.country || other?.country || '' }
    : (other ?? { city: FALLBACK_CITY, country: '' });
  const digest = createHash('sha256').update(text).digest();
  const u = digest.readUInt32BE(0) / 0xffffffff - 0.5;
  const v = digest.readUInt32BE(4) / 0xffffffff - 0.5;
  return { point: offsetKm(cityCentre(city), u * 2 * BOX_HALF_KM, v * 2 * BOX_HALF_KM), given };
}

const EARTH_RADIUS_KM = 6371.0088;

export function haversineKm(a: WireLatLng, b: WireLatLng): number {
  const rad = Math.PI / 180;
  const dLat = (b.lat - a.lat) * rad;
  const dLng = (b.lng - a.lng) * rad;
  const h = Math.sin(dLat / 2) ** 2 + Math.cos(a.lat * rad) * Math.cos(b.lat * rad) * Math.sin(dLng / 2) ** 2;
  return 2 * EARTH_RADIUS_KM * Math.asin(Math.min(1, Math.sqrt(h)));
}

/** Moves a point by (north, east) kilometres; flat-earth is fine at city scale. */
export function offsetKm(from: WireLatLng, northKm: number, eastKm: number): WireLatLng {
  const lat = from.lat + (northKm / EARTH_RADIUS_KM) * (180 / Math.PI);
  const lng = from.lng + (eastKm / (EARTH_RADIUS_KM * Math.cos((from.lat * Math.PI) / 180))) * (180 / Math.PI);
  return { lat: round6(lat), lng: round6(lng) };
}

/** The point a fraction `t` of the way from `a` to `b`. */
export function interpolate(a: WireLatLng, b: WireLatLng, t: number): WireLatLng {
  return { lat: round6(a.lat + (b.lat - a.lat) * t), lng: round6(a.lng + (b.lng - a.lng) * t) };
}

function round6(n: number): number {
  return Math.round(n * 1e6) / 1e6;
}
