// A real webhook receiver for tests: a node:http server on port 0 that verifies
// each request's JWT the way upstream-api.md says a receiver must (RS256 with the
// service's public key, `iss`, `exp` required) and records what arrived.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { importSPKI, jwtVerify, type JWTPayload } from 'jose';
import type { WireWebhookEvent } from '../../src/upstream/wire.js';

/** The event as signed; partner orders add their reference and payload. */
export type ReceivedEvent = WireWebhookEvent & { partner_reference?: string | null; partner_payload?: unknown };

export interface ReceivedAttempt {
  /** The verified `payload` claim. */
  event: ReceivedEvent;
  /** The HTTP body, parsed: should equal `event`. */
  body: unknown;
  claims: JWTPayload;
  /** What this receiver answered; 0 when it let the request hang. */
  status: number;
  at: number;
}

/** What to answer to the n-th (1-based) attempt received, over all events. */
export type Responder = (event: ReceivedEvent, attempt: number) => number | 'hang';

export interface WebhookReceiver {
  url: string;
  /** Every verified request, whatever it was answered. */
  attempts: ReceivedAttempt[];
  /** Requests that failed verification (answered 401). */
  rejected: number;
  /** Events acknowledged with a 2xx, in arrival order. */
  events(): ReceivedEvent[];
  respondWith(responder: Responder): void;
  /** Polls until `done(events())` holds, or fails naming what did arrive. */
  waitFor(done: (events: ReceivedEvent[]) => boolean, timeoutMs?: number): Promise<ReceivedEvent[]>;
  close(): Promise<void>;
}

export async function startWebhookReceiver(options: {
  publicKeyPem: string;
  issuer: string;
  respond?: Responder;
}): Promise<WebhookReceiver> {
  const key = await importSPKI(options.publicKeyPem, 'RS256');
  let responder: Responder = options.respond ?? (() => 200);
  const attempts: ReceivedAttempt[] = [];
  let rejected = 0;

  const server = createServer((req, res) => {
    void (async () => {
      const text = await readText(req);
      const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
      let claims: JWTPayload;
      try {
        if (!token) throw new Error('no bearer token');
        ({ payload: claims } = await jwtVerify(token, key, {
          algorithms: ['RS256'],
          issuer: options.issuer,
          requiredClaims: ['exp'],
        }));
      } catch {
        rejected++;
        res.writeHead(401).end();
        return;
      }
      const event = claims.payload as ReceivedEvent;
      const answer = responder(event, attempts.length + 1);
      attempts.push({ event, body: JSON.parse(text), claims, status: answer === 'hang' ? 0 : answer, at: Date.now() });
      if (answer !== 'hang') res.writeHead(answer).end();
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  const events = () => attempts.filter((a) => a.status >= 200 && a.status < 300).map((a) => a.event);
  return {
    url: `http://127.0.0.1:${port}/webhooks`,
    attempts,
    get rejected() {
      return rejected;
    },
    events,
    respondWith(next) {
      responder = next;
    },
    async waitFor(done, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs;
      while (!done(events())) {
        if (Date.now() > deadline) {
          throw new Error(
            `webhook receiver: condition not met after ${timeoutMs} ms; got ${
              events()
                .map((e) => e.event_name)
                .join(', ') || 'nothing'
            }`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      return events();
    },
    close() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

async function readText(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}
