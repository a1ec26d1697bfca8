// The live tracking page served at `/`: book a sandbox delivery or open a uid,
// then follow it through graphql-ws, the same subscriptions any client uses
// (deliveryUpdated for the timeline, courierLocation for the pin). Bundled by
// esbuild when the facade first serves it (src/web/page.ts); nothing loads from
// anywhere but the facade.
import { createClient, type Client, type FormattedExecutionResult } from 'graphql-ws';
import { distanceMeters, fitProjection, formatDistance, scaleBar, type Point, type Projection } from './map.js';
import './app.css';

// ---------------------------------------------------------------- operations

const TRACK = /* GraphQL */ `
  query Track($uid: ID!) {
    delivery(uid: $uid) {
      uid
      group
      status
      estimatedDropoffAt
      pickup {
        name
        address {
          street
          number
          city
          latitude
          longitude
        }
      }
      dropoff {
        name
        address {
          street
          number
          city
          latitude
          longitude
        }
      }
      courier {
        name
        location {
          lat
          lng
        }
        vehicle {
          make
          model
        }
      }
      events(first: 100) {
        edges {
          node {
            name
            status
            statusText
            stale
            receivedAt
            courierLocation {
              lat
              lng
            }
          }
        }
      }
    }
  }
`;

const FOLLOW = /* GraphQL */ `
  subscription Follow($uid: ID!) {
    deliveryUpdated(uid: $uid) {
      name
      status
      statusText
      receivedAt
      courierLocation {
        lat
        lng
      }
    }
  }
`;

const PIN = /* GraphQL */ `
  subscription Pin($uid: ID!) {
    courierLocation(uid: $uid) {
      milestone
      location {
        lat
        lng
      }
      courier {
        name
      }
    }
  }
`;

const TOKEN_SCOPE = /* GraphQL */ `
  query TokenScope {
    clientToken {
      uids
      expiresAt
    }
  }
`;

const BOOK = /* GraphQL */ `
  mutation Book($input: DeliveryInput!, $idempotencyKey: String) {
    createDelivery(input: $input, idempotencyKey: $idempotencyKey) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
        }
      }
      ... on ValidationError {
        fields {
          path
          message
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;

interface Address {
  street: string | null;
  number: string | null;
  city: string | null;
  latitude: number | null;
  longitude: number | null;
}
interface TrackedDelivery {
  uid: string;
  group: string;
  status: string;
  estimatedDropoffAt: string | null;
  pickup: { name: string | null; address: Address | null };
  dropoff: { name: string | null; address: Address | null };
  courier: {
    name: string | null;
    location: Point | null;
    vehicle: { make: string | null; model: string | null } | null;
  } | null;
  events: { edges: Array<{ node: DeliveryEvent }> };
}
interface DeliveryEvent {
  name: string;
  status: string;
  statusText: string | null;
  stale?: boolean;
  receivedAt: string;
  courierLocation: Point | null;
}
type BookResult =
  | { __typename: 'MutationCreateDeliverySuccess'; data: { uid: string } }
  | { __typename: 'ValidationError'; code: string; message: string; fields: Array<{ path: string; message: string }> }
  | { __typename: string; code: string; message: string };

// ---------------------------------------------------------------- the page

const MILESTONES = [
  'CREATED',
  'ASSIGNED',
  'PICKUP_ENROUTE',
  'PICKUP_ARRIVED',
  'PICKUP_COMPLETE',
  'DROPOFF_ENROUTE',
  'DROPOFF_ARRIVED',
  'DROPOFF_COMPLETE',
] as const;
const LABELS: Record<string, string> = {
  CREATED: 'Booked',
  ASSIGNED: 'Courier assigned',
  PICKUP_ENROUTE: 'Courier on the way to pickup',
  PICKUP_ARRIVED: 'Courier at pickup',
  PICKUP_COMPLETE: 'Picked up',
  DROPOFF_ENROUTE: 'On the way to the dropoff',
  DROPOFF_ARRIVED: 'Courier at the dropoff',
  DROPOFF_COMPLETE: 'Delivered',
  CANCELED: 'Cancelled',
  FAILED: 'Failed',
  RETURN_IN_PROGRESS: 'Being returned',
  RETURNED: 'Returned',
  UNKNOWN: 'Unrecognised status',
};
// A cancel or failure after pickup is followed by the return; the server completes deliveryUpdated at the real end.
const TERMINAL = new Set(['DROPOFF_COMPLETE', 'RETURNED']);

const SVG_NS = 'http://www.w3.org/2000/svg';
const VIEW = { width: 640, height: 420, padding: 48 };

function element<T extends Element>(selector: string): T {
  const found = document.querySelector<T>(selector);
  if (!found) throw new Error(`the page has no ${selector}`);
  return found;
}
const meta = (name: string) => document.querySelector<HTMLMetaElement>(`meta[name="${name}"]`)?.content ?? '';

const ui = {
  keyForm: element<HTMLFormElement>('#key-form'),
  keyHint: element<HTMLElement>('#key-hint'),
  keyInput: element<HTMLInputElement>('#key'),
  bookForm: element<HTMLFormElement>('#book-form'),
  bookButton: element<HTMLButtonElement>('#book'),
  openForm: element<HTMLFormElement>('#open-form'),
  uidInput: element<HTMLInputElement>('#uid-input'),
  message: element<HTMLElement>('#message'),
  connection: element<HTMLElement>('#connection'),
  tracker: element<HTMLElement>('#tracker'),
  map: element<SVGSVGElement>('#map'),
  timeline: element<HTMLOListElement>('#timeline'),
  facts: {
    uid: element<HTMLElement>('#fact-uid'),
    status: element<HTMLElement>('#fact-status'),
    courier: element<HTMLElement>('#fact-courier'),
    left: element<HTMLElement>('#fact-left'),
    eta: element<HTMLElement>('#fact-eta'),
  },
};

function say(text: string, tone: 'info' | 'error' | 'done' = 'info'): void {
  ui.message.textContent = text;
  ui.message.dataset.tone = tone;
}

/**
 * The socket's state, top right. "offline" only once a connection was tried and is down: before
 * anything is followed (or after the key changed) the page is simply not following anything.
 */
const CONNECTION_TEXT = {
  none: 'not following',
  connecting: 'connecting…',
  live: 'live',
  idle: 'idle',
  closed: 'offline',
} as const;

function setConnection(state: keyof typeof CONNECTION_TEXT, detail = ''): void {
  ui.connection.dataset.state = state;
  ui.connection.textContent = detail ? `${CONNECTION_TEXT[state]} (${detail})` : CONNECTION_TEXT[state];
}

// ---------------------------------------------------------------- graphql-ws

const graphqlPath = meta('dg-graphql') || '/graphql';
const wsUrl = new URL(graphqlPath, location.href);
wsUrl.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';

let client: Client | undefined;
let clientKey = '';

/** One graphql-ws client per key: a new key opens a new socket with its own connection_init. */
function clientFor(key: string): Client {
  if (client && clientKey === key) return client;
  dropClient();
  clientKey = key;
  // A replaced client still reports its socket closing: only the current one may set the indicator.
  const created: Client = createClient({
    url: wsUrl.href,
    lazy: true,
    connectionParams: { authorization: `Bearer ${key}` },
    retryAttempts: 8,
    // A refused key (4403) or a bad request will not get better by retrying.
    shouldRetry: (event) => !(isCloseEvent(event) && event.code >= 4400 && event.code < 4500),
    on: {
      connecting: () => client === created && setConnection('connecting'),
      connected: () => client === created && setConnection('live'),
      // 1000: the client closed an unused socket (lazy mode), e.g. after a delivery finished.
      closed: (event) => {
        if (client !== created) return;
        if (isCloseEvent(event) && event.code === 1000) setConnection('idle');
        else setConnection('closed', isCloseEvent(event) ? closeReason(event) : '');
      },
    },
  });
  client = created;
  return created;
}

function dropClient(): void {
  void client?.dispose();
  client = undefined;
  clientKey = '';
}

function isCloseEvent(value: unknown): value is CloseEvent {
  return typeof value === 'object' && value !== null && 'code' in value && 'reason' in value;
}

function closeReason(event: CloseEvent): string {
  if (event.code === 4403)
    return clientToken ? 'this tracking link has expired or is not valid' : 'the merchant key was refused';
  if (event.code === 4008) return 'too slow, reconnect to catch up';
  return event.reason || `code ${event.code}`;
}

/** Words for whatever a graphql-ws sink was handed: GraphQL errors, a close event, or an Error. */
function describe(error: unknown): string {
  if (Array.isArray(error))
    return error.map((e: { message?: string; extensions?: { code?: string } }) => withCode(e)).join('; ');
  if (isCloseEvent(error)) return `The connection closed: ${closeReason(error)}.`;
  if (error instanceof Error) return error.message;
  return 'The connection to the facade failed.';
}

function withCode(error: { message?: string; extensions?: { code?: string } }): string {
  const code = error.extensions?.code;
  return code ? `${error.message ?? 'Error'} (${code})` : (error.message ?? 'Error');
}

/** Runs a query or mutation over the socket; rejects with readable words on any error. */
function execute<T>(query: string, variables: Record<string, unknown>): Promise<T> {
  return new Promise((resolve, reject) => {
    let result: FormattedExecutionResult<T, unknown> | undefined;
    clientFor(currentKey()).subscribe<T>(
      { query, variables },
      {
        next: (value) => (result = value),
        error: (error) => reject(new Error(describe(error))),
        complete: () => {
          if (result?.errors?.length) reject(new Error(result.errors.map(withCode).join('; ')));
          else if (!result?.data) reject(new Error('The facade sent no data.'));
          else resolve(result.data);
        },
      },
    );
  });
}

/** The credential the socket opens with: the page's client token when it was opened with one, else the key typed in. */
function currentKey(): string {
  return clientToken || ui.keyInput.value.trim();
}

// ---------------------------------------------------------------- tracking state

interface Tracking {
  uid: string;
  pickup: Point | undefined;
  dropoff: Point | undefined;
  courier: Point | undefined;
  trail: Point[];
  status: string;
  /** Milestone → when it was seen and what the upstream said. */
  reached: Map<string, { at: string; text: string | null }>;
  estimatedDropoffAt: string | null;
  courierName: string | null;
  stops: Array<() => void>;
  projection: Projection | undefined;
}

let tracking: Tracking | undefined;

function pointOf(address: Address | null): Point | undefined {
  return address && address.latitude !== null && address.longitude !== null
    ? { lat: address.latitude, lng: address.longitude }
    : undefined;
}

function stopTracking(): void {
  for (const stop of tracking?.stops ?? []) stop();
  tracking = undefined;
}

async function open(uid: string): Promise<void> {
  stopTracking();
  const key = currentKey();
  if (!key) return say('Enter a merchant key first.', 'error');
  if (!uid) return say('Enter the uid of a delivery.', 'error');
  say(`Loading ${uid}…`);
  let delivery: TrackedDelivery | null;
  try {
    delivery = (await execute<{ delivery: TrackedDelivery | null }>(TRACK, { uid })).delivery;
  } catch (error) {
    return say(`Could not read ${uid}: ${(error as Error).message}`, 'error');
  }
  if (!delivery)
    return say(
      clientToken ? `Delivery ${uid} is not part of this tracking link.` : `No delivery ${uid} is visible to this key.`,
      'error',
    );

  const state: Tracking = {
    uid,
    pickup: pointOf(delivery.pickup.address),
    dropoff: pointOf(delivery.dropoff.address),
    courier: delivery.courier?.location ?? undefined,
    trail: [],
    status: delivery.status,
    reached: new Map(),
    estimatedDropoffAt: delivery.estimatedDropoffAt,
    courierName: describeCourier(delivery.courier),
    stops: [],
    projection: undefined,
  };
  tracking = state;
  for (const { node } of delivery.events.edges) if (!node.stale) record(state, node);
  if (state.courier && !state.trail.length) state.trail.push(state.courier);
  ui.tracker.hidden = false;
  const hash = clientToken ? `#token=${clientToken}&uid=${encodeURIComponent(uid)}` : `#uid=${encodeURIComponent(uid)}`;
  if (location.hash !== hash) history.replaceState(null, '', `${location.pathname}${hash}`);
  ui.uidInput.value = uid;
  drawMap(state);
  render(state);
  say(
    TERMINAL.has(state.status) ? `${LABELS[state.status] ?? state.status}.` : `Following ${uid} live.`,
    TERMINAL.has(state.status) ? 'done' : 'info',
  );

  const socket = clientFor(key);
  state.stops.push(
    socket.subscribe<{ deliveryUpdated: DeliveryEvent }>(
      { query: FOLLOW, variables: { uid } },
      {
        next: ({ data, errors }) => {
          if (errors?.length) return say(describe(errors), 'error');
          if (!data || tracking !== state) return;
          record(state, data.deliveryUpdated);
          if (data.deliveryUpdated.courierLocation) moveCourier(state, data.deliveryUpdated.courierLocation);
          render(state);
          if (TERMINAL.has(state.status))
            say(`${LABELS[state.status] ?? state.status} at ${clock(data.deliveryUpdated.receivedAt)}.`, 'done');
        },
        error: (error) => tracking === state && say(describe(error), 'error'),
        // The server completes the stream after the delivery's final event (a cancel before pickup included).
        // (After DROPOFF_COMPLETE or RETURNED the message with its time is already shown.)
        complete: () =>
          tracking === state && !TERMINAL.has(state.status) && say(`${LABELS[state.status] ?? state.status}.`, 'done'),
      },
    ),
    socket.subscribe<{
      courierLocation: { milestone: string; location: Point; courier: { name: string | null } | null };
    }>(
      { query: PIN, variables: { uid } },
      {
        next: ({ data }) => {
          if (!data || tracking !== state) return;
          if (data.courierLocation.courier?.name) state.courierName = data.courierLocation.courier.name;
          moveCourier(state, data.courierLocation.location);
          render(state);
        },
        error: (error) => tracking === state && say(describe(error), 'error'),
        complete: () => undefined,
      },
    ),
  );
}

function describeCourier(courier: TrackedDelivery['courier']): string | null {
  if (!courier?.name) return null;
  const vehicle = [courier.vehicle?.make, courier.vehicle?.model].filter(Boolean).join(' ');
  return vehicle ? `${courier.name} (${vehicle})` : courier.name;
}

/** Takes one event into the state: the status moves forward only; "snapshot" carries no time of its own. */
function record(state: Tracking, event: DeliveryEvent): void {
  if (event.stale) return;
  if (rank(event.status) >= rank(state.status) || !MILESTONES.includes(event.status as never))
    state.status = event.status;
  if (event.name !== 'snapshot' && !event.name.startsWith('location.') && !state.reached.has(event.status)) {
    state.reached.set(event.status, { at: event.receivedAt, text: event.statusText });
  }
  if (event.courierLocation) addToTrail(state, event.courierLocation);
}

function rank(status: string): number {
  return MILESTONES.indexOf(status as (typeof MILESTONES)[number]);
}

function addToTrail(state: Tracking, point: Point): void {
  const last = state.trail.at(-1);
  if (!last || last.lat !== point.lat || last.lng !== point.lng) state.trail.push(point);
  state.courier = point;
}

function moveCourier(state: Tracking, point: Point): void {
  addToTrail(state, point);
  if (!state.projection?.fits(point)) drawMap(state);
  else placeCourier(state);
}

// ---------------------------------------------------------------- drawing

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
function drawMap(state: Tracking): void {
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
function placeCourier(state: Tracking, animate = true): void {
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

function render(state: Tracking): void {
  ui.facts.uid.textContent = state.uid;
  ui.facts.status.textContent = LABELS[state.status] ?? state.status;
  ui.facts.status.dataset.status = state.status;
  ui.facts.courier.textContent = state.courierName ?? '—';
  ui.facts.left.textContent =
    state.status === 'DROPOFF_COMPLETE'
      ? 'arrived'
      : state.courier && state.dropoff
        ? formatDistance(distanceMeters(state.courier, state.dropoff))
        : '—';
  const current = rank(state.status);
  const offPath = !MILESTONES.includes(state.status as never);
  // No dropoff time once the delivery is over or has left the way to the dropoff (a failure, a return).
  ui.facts.eta.textContent =
    state.estimatedDropoffAt && !TERMINAL.has(state.status) && !offPath ? clock(state.estimatedDropoffAt) : '—';
  // Off the way to the dropoff, every step taken is shown in order: e.g. failed, being returned, returned.
  const detour = [...state.reached.keys()].filter((status) => !MILESTONES.includes(status as never));
  if (offPath && !detour.includes(state.status)) detour.push(state.status);
  const steps: string[] = [...MILESTONES, ...detour];
  ui.timeline.replaceChildren(
    ...steps.map((status, index) => {
      const item = document.createElement('li');
      item.dataset.status = status;
      const seen = state.reached.get(status);
      const done = status === state.status || (index <= current && current >= 0) || (offPath && seen !== undefined);
      item.className = status === state.status ? 'current done' : done ? 'done' : 'pending';
      if (offPath && status === state.status) item.classList.add('off-path');
      const label = document.createElement('span');
      label.className = 'label';
      label.textContent = LABELS[status] ?? status;
      const time = document.createElement('time');
      if (seen) {
        time.dateTime = seen.at;
        time.textContent = clock(seen.at);
      }
      item.append(label, time);
      if (seen?.text && !sameWords(seen.text, status) && !sameWords(seen.text, LABELS[status] ?? '')) {
        const text = document.createElement('span');
        text.className = 'text';
        text.textContent = seen.text;
        item.append(text);
      }
      return item;
    }),
  );
}

/** "Pickup Enroute" says nothing PICKUP_ENROUTE does not; only other words from the upstream are shown. */
function sameWords(text: string, status: string): boolean {
  const letters = (value: string) => value.toLowerCase().replace(/[^a-z]/g, '');
  return letters(text) === letters(status);
}

function clock(iso: string): string {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleTimeString();
}

// ---------------------------------------------------------------- booking

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

async function book(): Promise<void> {
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

// ---------------------------------------------------------------- wiring

/**
 * A client token, from a link a merchant handed out: `/?token=…` or `/#token=…`.
 * It is moved into the fragment at once, which the browser never sends, so it
 * does not linger in server logs, proxies or a Referer (the page sends none anyway).
 */
function tokenFromLocation(): string {
  const fromQuery = new URLSearchParams(location.search).get('token')?.trim();
  const fromHash = new URLSearchParams(location.hash.slice(1)).get('token')?.trim();
  return fromQuery || fromHash || '';
}
const clientToken = tokenFromLocation();

/** With a client token: no key, no booking; the token's deliveries only. */
async function openWithToken(): Promise<void> {
  ui.keyForm.hidden = true;
  ui.keyHint.hidden = true;
  ui.bookForm.hidden = true;
  ui.openForm.hidden = true;
  document.body.dataset.mode = 'token';
  // The sandbox's demo key has no place on a customer's page: not even in the head. Nor has a developer's tool.
  document.querySelector('meta[name="dg-sandbox-key"]')?.remove();
  document.querySelector('#graphiql-link')?.remove();
  say('Opening the tracking link…');
  let scope: { uids: string[]; expiresAt: string } | null;
  try {
    scope = (await execute<{ clientToken: { uids: string[]; expiresAt: string } | null }>(TOKEN_SCOPE, {})).clientToken;
  } catch (error) {
    return say(`This tracking link cannot be opened: ${(error as Error).message}`, 'error');
  }
  if (!scope || scope.uids.length === 0) return say('This tracking link names no delivery.', 'error');
  // Several deliveries: the uid in the fragment if the token has it, else the first; a chooser for the rest.
  if (scope.uids.length > 1) {
    ui.openForm.hidden = false;
    ui.uidInput.setAttribute('list', 'token-uids');
    const list = document.createElement('datalist');
    list.id = 'token-uids';
    for (const uid of scope.uids) list.append(Object.assign(document.createElement('option'), { value: uid }));
    ui.openForm.append(list);
  }
  const wanted = uidFromHash();
  await open(scope.uids.includes(wanted) ? wanted : scope.uids[0]!);
}

const sandboxKey = clientToken ? '' : meta('dg-sandbox-key');
if (sandboxKey) ui.keyInput.value = sandboxKey;
ui.bookForm.hidden = !sandboxKey;

ui.bookForm.addEventListener('submit', (event) => {
  event.preventDefault();
  void book();
});
ui.openForm.addEventListener('submit', (event) => {
  event.preventDefault();
  void open(ui.uidInput.value.trim());
});
ui.keyInput.addEventListener('change', () => {
  stopTracking();
  dropClient();
  setConnection('none');
});

function uidFromHash(): string {
  return new URLSearchParams(location.hash.slice(1)).get('uid')?.trim() ?? '';
}
window.addEventListener('hashchange', () => {
  const uid = uidFromHash();
  if (uid && uid !== tracking?.uid) void open(uid);
});
setConnection('none');
// GraphiQL (when the server has it on) is for the merchant's view only.
if (!clientToken) document.querySelector('#graphiql-link')?.removeAttribute('hidden');
if (clientToken) {
  if (location.search.includes('token=')) history.replaceState(null, '', `${location.pathname}#token=${clientToken}`);
  void openWithToken();
} else if (uidFromHash()) void open(uidFromHash());
else
  say(
    sandboxKey
      ? 'Book a sandbox delivery, or enter the uid of one to follow.'
      : 'Enter your merchant key and the uid of a delivery to follow.',
  );
document.body.dataset.ready = 'true';
