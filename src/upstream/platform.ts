// Client of the platform endpoint group, under {base_url}/{platform}.
import { partnerReferenceRefusal, uidRefusal } from '../domain/uid.js';
import { BadUserInputError, UpstreamShapeError } from '../errors.js';
import type { UpstreamHttp } from './http.js';
import type {
  WireAvailability,
  WireCreateResult,
  WireDelivery,
  WireDeliveryRequest,
  WirePlatformCancellation,
  WireQuoteResult,
} from './wire.js';

export interface CallOptions {
  signal?: AbortSignal;
}

/**
 * A caller's uid as one path segment. Checked here (src/domain/uid.ts), the last
 * step before every upstream call whatever path the uid came by: one that is not
 * a plain segment would name another resource (`/deliveries/` or
 * `/deliveries/../cancel` instead of `/deliveries/{uid}`). Encoded all the same.
 */
export function uidSegment(uid: string): string {
  const refusal = uidRefusal(uid, 'uid');
  if (refusal) throw new BadUserInputError(refusal);
  return encodeURIComponent(uid);
}

/** A caller's partner reference as one path segment: checked, then URL-encoded (its "/" and spaces stay inside it). */
export function referenceSegment(reference: string): string {
  const refusal = partnerReferenceRefusal(reference, 'partnerReference');
  if (refusal) throw new BadUserInputError(refusal);
  return encodeURIComponent(reference);
}

/** What create returns once the undocumented response shape is read. */
export interface CreatedDelivery {
  uid: string;
  trackingLink: string | undefined;
}

export class PlatformClient {
  readonly #http: UpstreamHttp;
  readonly #prefix: string;

  constructor(http: UpstreamHttp, platformId: string) {
    this.#http = http;
    this.#prefix = `/${encodeURIComponent(platformId)}`;
  }

  quote(key: string, body: WireDeliveryRequest, options: CallOptions = {}): Promise<WireQuoteResult> {
    return this.#http.call({
      group: 'platform',
      method: 'POST',
      path: `${this.#prefix}/quote`,
      route: '/{platform}/quote',
      key,
      body,
      ...options,
    });
  }

  async create(key: string, body: WireDeliveryRequest, options: CallOptions = {}): Promise<CreatedDelivery> {
    const result = await this.#http.call<WireCreateResult>({
      group: 'platform',
      method: 'POST',
      path: `${this.#prefix}/deliveries`,
      route: '/{platform}/deliveries',
      key,
      body,
      ...options,
    });
    return readCreated(result);
  }

  async get(key: string, uid: string, options: CallOptions = {}): Promise<WireDelivery> {
    const result = await this.#http.call<{ data?: WireDelivery }>({
      group: 'platform',
      method: 'GET',
      path: `${this.#prefix}/deliveries/${uidSegment(uid)}`,
      route: '/{platform}/deliveries/{uid}',
      key,
      ...options,
    });
    return requireData(result, 'GET /{platform}/deliveries/{uid}');
  }

  // async: a refused uid rejects, as every other failure of a call does.
  async cancel(key: string, uid: string, options: CallOptions = {}): Promise<WirePlatformCancellation> {
    return this.#http.call({
      group: 'platform',
      method: 'POST',
      path: `${this.#prefix}/deliveries/${uidSegment(uid)}/cancel`,
      route: '/{platform}/deliveries/{uid}/cancel',
      key,
      cancel: true,
      ...options,
    });
  }

  availability(key: string, options: CallOptions = {}): Promise<WireAvailability> {
    return this.#http.call({
      group: 'platform',
      method: 'GET',
      path: `${this.#prefix}/availability`,
      route: '/{platform}/availability',
      key,
      ...options,
    });
  }
}

/**
 * The create response is documented only as carrying uid and tracking_link: take them from the top level or from
 * `data`.
 */
function readCreated(result: WireCreateResult): CreatedDelivery {
  const uid = pickString(result.uid) ?? pickString(result.data?.uid);
  if (!uid) throw new UpstreamShapeError('POST /{platform}/deliveries answered without a uid');
  return { uid, trackingLink: pickString(result.tracking_link) ?? pickString(result.data?.tracking_link) };
}

function pickString(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : undefined;
}

export function requireData<T extends { uid?: unknown }>(result: { data?: T }, where: string): T {
  const data = result.data;
  if (!data || typeof data !== 'object' || typeof data.uid !== 'string')
    throw new UpstreamShapeError(`${where} answered without data.uid`);
  return data;
}
