// Builds the two endpoint-group clients over one pool to the upstream origin.
import type { Config } from '../config.js';
import { UpstreamHttp, type UpstreamCallRecord } from './http.js';
import { PartnerClient } from './partner.js';
import { PlatformClient } from './platform.js';

export interface Upstream {
  platform: PlatformClient;
  partner: PartnerClient;
  close(): Promise<void>;
}

export function createUpstream(
  config: Pick<Config['upstream'], 'timeoutMs' | 'connections' | 'maxResponseBytes'> & { url: string; platformId: string },
  onCall?: (record: UpstreamCallRecord) => void,
): Upstream {
  const http = new UpstreamHttp({
    baseUrl: config.url,
    timeoutMs: config.timeoutMs,
    connections: config.connections,
    maxResponseBytes: config.maxResponseBytes,
    onCall,
  });
  return {
    platform: new PlatformClient(http, config.platformId),
    partner: new PartnerClient(http),
    close: () => http.close(),
  };
}
