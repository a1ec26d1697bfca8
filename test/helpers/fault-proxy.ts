// A reverse proxy in front of the sandbox that misbehaves on request: tests use it
// to make one uid fail, to count what reaches the upstream, or to answer garbage.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';

export type Fault = (req: IncomingMessage, res: ServerResponse) => boolean | Promise<boolean>;

export interface FaultProxy {
  /** Base URL ending in /api/v1, to give the facade as UPSTREAM_URL. */
  url: string;
  /** Called for each request; return true when it answered the request itself. */
  fault: Fault | undefined;
  /** Requests seen: method and path. */
  seen: Array<{ method: string; path: string; at: number }>;
  /** Most requests in flight at once. */
  maxInFlight: number;
  close(): Promise<void>;
}

export async function startFaultProxy(targetOrigin: string): Promise<FaultProxy> {
  let inFlight = 0;
  const proxy: FaultProxy = {
    url: '',
    fault: undefined,
    seen: [],
    maxInFlight: 0,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  const server: Server = createServer(async (req, res) => {
    proxy.seen.push({ method: req.method ?? 'GET', path: req.url ?? '/', at: Date.now() });
    inFlight += 1;
    proxy.maxInFlight = Math.max(proxy.maxInFlight, inFlight);
    res.on('close', () => {
      inFlight -= 1;
    });
    try {
      if (proxy.fault && (await proxy.fault(req, res))) return;
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const upstream = await request(`${targetOrigin}${req.url}`, {
        method: req.method as 'GET' | 'POST',
        headers: {
          authorization: req.headers.authorization ?? '',
          'content-type': req.headers['content-type'] ?? 'application/json',
        },
        body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
      });
      const body = Buffer.from(await upstream.body.arrayBuffer());
      res
        .writeHead(upstream.statusCode, {
          'content-type': String(upstream.headers['content-type'] ?? 'application/json'),
        })
        .end(body);
    } catch {
      if (!res.headersSent) res.writeHead(502).end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  proxy.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v1`;
  return proxy;
}
