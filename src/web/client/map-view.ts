// The map: the stops, the route between them, the courier's trail and pin, a scale bar, drawn as SVG fitted to every
// point known so far.
import { fitProjection, scaleBar, type Point } from './map.js';
import type { Tracking } from './tracking-state.js';
import { ui } from './ui.js';

const SVG_NS = 'http://www.w3.org/2000/svg';
const VIEW = { width: 640, height: 420, padding: 48 };

function svg<K extends keyof SVGElementTagNameMap>(
  name: K,
  attributes: Record<string, string | number>,
  parent: Element,
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, name);
  for (const [attribute, value] of Object.entries(attributes)) node.setAttribute(attribute, String(value));
  parent.append(node);
  return node;
}

/** Redraws the whole map, fitted to every point known so far. */
export function drawMap(state: Tracking): void {
  const map = ui.map;
  map.replaceChildren();
  map.setAttribute('viewBox', `0 0 ${VIEW.width} ${VIEW.height}`);
  const points = [state.pickup, state.dropoff, ...state.trail].filter((p): p is Point => p !== undefined);
  const projection = fitProjection(points, VIEW);
  state.projection = projection;

  svg('rect', { class: 'land', x: 0, y: 0, width: VIEW.width, height: VIEW.height }, map);
  const grid = svg('g', { class: 'grid' }, map);
  for (let x = 40; x < VIEW.width; x += 40) svg('line', { x1: x, y1: 0, x2: x, y2: VIEW.height }, grid);
  for (let y = 40; y < VIEW.height; y += 40) svg('line', { x1: 0, y1: y, x2: VIEW.width, y2: y }, grid);

  if (state.pickup && state.dropoff) {
    const a = projection.project(state.pickup);
    const b = projection.project(state.dropoff);
    svg('line', { class: 'route', x1: a.x, y1: a.y, x2: b.x, y2: b.y }, map);
  }
  svg('polyline', { id: 'trail', class: 'trail', points: '' }, map);
  const origin = state.trail[0];
  if (origin) {
    const { x, y } = projection.project(origin);
    svg('circle', { class: 'origin', cx: x, cy: y, r: 3.5 }, map);
  }
  for (const [point, label, kind] of [
    [state.pickup, 'Pickup', 'pickup'],
    [state.dropoff, 'Dropoff', 'dropoff'],
  ] as const) {
    if (!point) continue;
    const { x, y } = projection.project(point);
    const stop = svg('g', { class: `stop ${kind}`, transform: `translate(${x} ${y})`, 'data-testid': kind }, map);
    svg('circle', { r: 9 }, stop);
    svg('text', { y: -16, 'text-anchor': 'middle' }, stop).textContent = label;
  }

  const courier = svg('g', { id: 'courier', class: 'courier' }, map);
  courier.classList.add('unplaced');
  svg('circle', { class: 'halo', r: 16 }, courier);
  svg('circle', { class: 'dot', r: 7 }, courier);

  const scale = scaleBar(projection.metersPerPixel, 120);
  const bar = svg('g', { class: 'scale', transform: `translate(16 ${VIEW.height - 18})` }, map);
  svg('line', { x1: 0, y1: 0, x2: scale.pixels, y2: 0 }, bar);
  svg('text', { x: 0, y: -6 }, bar).textContent = scale.label;
  svg('text', { class: 'north', x: VIEW.width - 20, y: 26, 'text-anchor': 'middle' }, map).textContent = 'N ↑';

  if (!points.length)
    svg('text', { class: 'empty', x: VIEW.width / 2, y: VIEW.height / 2, 'text-anchor': 'middle' }, map).textContent =
      'No coordinates yet: the pin appears with the first courier position.';
  placeCourier(state, false);
}

/** Moves the pin (gliding, through a CSS transition) and extends the trail. */
export function placeCourier(state: Tracking, animate = true): void {
  const projection = state.projection;
  const courier = ui.map.querySelector<SVGGElement>('#courier');
  const trail = ui.map.querySelector<SVGPolylineElement>('#trail');
  if (!projection || !courier || !trail) return;
  trail.setAttribute(
    'points',
    state.trail
      .map((p) => projection.project(p))
      .map(({ x, y }) => `${x.toFixed(1)},${y.toFixed(1)}`)
      .join(' '),
  );
  if (!state.courier) return;
  const { x, y } = projection.project(state.courier);
  courier.classList.toggle('still', !animate);
  courier.style.transform = `translate(${x.toFixed(1)}px, ${y.toFixed(1)}px)`;
  courier.classList.remove('unplaced');
  courier.dataset.lat = String(state.courier.lat);
  courier.dataset.lng = String(state.courier.lng);
  courier.dataset.positions = String(state.trail.length);
}
