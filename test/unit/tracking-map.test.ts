// The tracking page's map geometry (src/web/client/map.ts).
import { describe, expect, it } from 'vitest';
import { distanceMeters, fitProjection, formatDistance, scaleBar } from '../../src/web/client/map.js';

const VIEW = { width: 640, height: 420, padding: 48 };

describe('fitProjection', () => {
  const pickup = { lat: 37.7763, lng: -122.4172 };
  const dropoff = { lat: 37.7572, lng: -122.4211 };
  const courier = { lat: 37.79, lng: -122.44 };

  it('keeps every point inside the padded view, north up and east right', () => {
    const projection = fitProjection([pickup, dropoff, courier], VIEW);
    for (const point of [pickup, dropoff, courier]) {
      const { x, y } = projection.project(point);
      expect(x).toBeGreaterThanOrEqual(VIEW.padding - 1e-6);
      expect(x).toBeLessThanOrEqual(VIEW.width - VIEW.padding + 1e-6);
      expect(y).toBeGreaterThanOrEqual(VIEW.padding - 1e-6);
      expect(y).toBeLessThanOrEqual(VIEW.height - VIEW.padding + 1e-6);
      expect(projection.fits(point)).toBe(true);
    }
    expect(projection.project(pickup).y).toBeLessThan(projection.project(dropoff).y); // further north is higher up
    expect(projection.project(courier).x).toBeLessThan(projection.project(pickup).x); // further west is further left
    expect(projection.fits({ lat: 38.5, lng: -122.4 })).toBe(false);
  });

  it('draws the same distance the same length north-south and east-west', () => {
    const centre = { lat: 60, lng: 10 };
    const north = { lat: 60.01, lng: 10 };
    const east = { lat: 60, lng: 10 + 0.01 / Math.cos((60 * Math.PI) / 180) };
    const projection = fitProjection([centre, north, east], VIEW);
    const length = (a: typeof centre, b: typeof centre) => {
      const pa = projection.project(a);
      const pb = projection.project(b);
      return Math.hypot(pa.x - pb.x, pa.y - pb.y);
    };
    expect(length(centre, north)).toBeCloseTo(length(centre, east), 0); // within half a pixel (the projection uses the mid latitude)
    // metresPerPixel agrees with the real distance.
    expect(length(centre, north) * projection.metersPerPixel).toBeCloseTo(distanceMeters(centre, north), -1);
  });

  it('shows a single point (or none) at a sane zoom instead of dividing by zero', () => {
    const one = fitProjection([pickup], VIEW);
    expect(one.project(pickup)).toEqual({ x: 320, y: 210 });
    expect(Number.isFinite(one.metersPerPixel)).toBe(true);
    expect(one.metersPerPixel).toBeGreaterThan(0.3);
    expect(Number.isFinite(fitProjection([], VIEW).project(pickup).x)).toBe(true);
  });
});

describe('distances', () => {
  it('measures great circles', () => {
    // One degree of latitude is about 111.2 km.
    expect(distanceMeters({ lat: 0, lng: 0 }, { lat: 1, lng: 0 })).toBeCloseTo(111_195, -1);
    expect(distanceMeters({ lat: 37.77, lng: -122.41 }, { lat: 37.77, lng: -122.41 })).toBe(0);
  });

  it('formats and rounds for people', () => {
    expect(formatDistance(849.6)).toBe('850 m');
    expect(formatDistance(1000)).toBe('1 km');
    expect(formatDistance(1240)).toBe('1.2 km');
    expect(formatDistance(12_400)).toBe('12 km');
    expect(scaleBar(10, 120)).toEqual({ meters: 1000, pixels: 100, label: '1 km' });
    expect(scaleBar(3, 120)).toEqual({ meters: 200, pixels: 200 / 3, label: '200 m' });
    expect(scaleBar(0.5, 120)).toEqual({ meters: 50, pixels: 100, label: '50 m' });
  });
});
