// The tracking page's map, as plain geometry: no tiles, so the coordinates are
// drawn on an equirectangular projection fitted to the points in view. Pure
// functions, so they run (and are tested) under Node as well as in the page.

export interface Point {
  lat: number;
  lng: number;
}

export interface Pixel {
  x: number;
  y: number;
}

export interface Viewport {
  width: number;
  height: number;
  /** Space kept free at each edge, in pixels. */
  padding: number;
}

export interface Projection {
  project(point: Point): Pixel;
  /** Ground metres per pixel at the middle of the view. */
  metersPerPixel: number;
  /** Whether the point falls inside the drawable area (the view less its padding). */
  fits(point: Point): boolean;
}

const EARTH_RADIUS_M = 6_371_008.8;
const RAD = Math.PI / 180;
/**
 * The smallest span a view shows, in degrees of latitude (about 220 m), so one point alone is not infinitely zoomed.
 */
const MIN_SPAN_DEG = 0.002;

/** A projection that shows every point, north up, at one scale on both axes. */
export function fitProjection(points: readonly Point[], view: Viewport): Projection {
  const usable = points.filter((p) => Number.isFinite(p.lat) && Number.isFinite(p.lng));
  const lats = usable.map((p) => p.lat);
  const lngs = usable.map((p) => p.lng);
  const midLat = usable.length ? (Math.min(...lats) + Math.max(...lats)) / 2 : 0;
  const midLng = usable.length ? (Math.min(...lngs) + Math.max(...lngs)) / 2 : 0;
  // East-west degrees shrink with latitude; scale them so distances look right.
  const kx = Math.max(Math.cos(midLat * RAD), 0.01);
  const spanY = Math.max(usable.length ? Math.max(...lats) - Math.min(...lats) : 0, MIN_SPAN_DEG);
  const spanX = Math.max(usable.length ? (Math.max(...lngs) - Math.min(...lngs)) * kx : 0, MIN_SPAN_DEG);
  const innerW = Math.max(view.width - 2 * view.padding, 1);
  const innerH = Math.max(view.height - 2 * view.padding, 1);
  const pxPerDeg = Math.min(innerW / spanX, innerH / spanY);
  const cx = view.width / 2;
  const cy = view.height / 2;
  const project = (p: Point): Pixel => ({
    x: cx + (p.lng - midLng) * kx * pxPerDeg,
    y: cy - (p.lat - midLat) * pxPerDeg,
  });
  return {
    project,
    metersPerPixel: (EARTH_RADIUS_M * RAD) / pxPerDeg,
    fits(point) {
      const { x, y } = project(point);
      return (
        x >= view.padding - 0.5 &&
        x <= view.width - view.padding + 0.5 &&
        y >= view.padding - 0.5 &&
        y <= view.height - view.padding + 0.5
      );
    },
  };
}

/** Great-circle distance in metres. */
export function distanceMeters(a: Point, b: Point): number {
  const dLat = (b.lat - a.lat) * RAD;
  const dLng = (b.lng - a.lng) * RAD;
  const h = Math.sin(dLat / 2) ** 2 + Math.cos(a.lat * RAD) * Math.cos(b.lat * RAD) * Math.sin(dLng / 2) ** 2;
  return 2 * EARTH_RADIUS_M * Math.asin(Math.min(1, Math.sqrt(h)));
}

/** A round length (1, 2 or 5 × 10^n metres) that is at most maxPixels long on the map, for the scale bar. */
export function scaleBar(metersPerPixel: number, maxPixels: number): { meters: number; pixels: number; label: string } {
  const most = metersPerPixel * maxPixels;
  const power = 10 ** Math.floor(Math.log10(most));
  const meters = [5, 2, 1].map((step) => step * power).find((m) => m <= most) ?? power;
  return { meters, pixels: meters / metersPerPixel, label: formatDistance(meters) };
}

/** "850 m", "1.2 km", "12 km". */
export function formatDistance(meters: number): string {
  if (meters < 1000) return `${Math.round(meters)} m`;
  const km = meters / 1000;
  return `${km < 10 ? km.toFixed(1).replace(/\.0$/, '') : Math.round(km)} km`;
}
