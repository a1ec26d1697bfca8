// The one graphql-ws connection the page runs everything over: a client per credential, its state on the indicator,
// and errors in words a person reads.
import { createClient, type Client, type FormattedExecutionResult } from 'graphql-ws';
import { clientToken, currentKey } from './credentials.js';
import { meta, setConnection } from './ui.js';

const graphqlPath = meta('dg-graphql') || '/graphql';
const wsUrl = new URL(graphqlPath, location.href);
wsUrl.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';

let client: Client | undefined;
let clientKey = '';

/** One graphql-ws client per key: a new key opens a new socket with its own connection_init. */
export function clientFor(key: string): Client {
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

export function dropClient(): void {
  void client?.dispose();
  client = undefined;
  clientKey = '';
}

export function isCloseEvent(value: unknown): value is CloseEvent {
  return typeof value === 'object' && value !== null && 'code' in value && 'reason' in value;
}

function closeReason(event: CloseEvent): string {
  if (event.code === 4403)
    return clientToken ? 'this tracking link has expired or is not valid' : 'the merchant key was refused';
  if (event.code === 4008) return 'too slow, reconnect to catch up';
  return event.reason || `code ${event.code}`;
}

/** Words for whatever a graphql-ws sink was handed: GraphQL errors, a close event, or an Error. */
export function describe(error: unknown): string {
  if (Array.isArray(error))
    return error.map((e: { message?: string; extensions?: { code?: string } }) => withCode(e)).join('; ');
  if (isCloseEvent(error)) return `The connection closed: ${closeReason(error)}.`;
  if (error instanceof Error) return error.message;
  return 'The connection to the facade failed.';
}

export function withCode(error: { message?: string; extensions?: { code?: string } }): string {
  const code = error.extensions?.code;
  return code ? `${error.message ?? 'Error'} (${code})` : (error.message ?? 'Error');
}

/** Runs a query or mutation over the socket; rejects with readable words on any error. */
export function execute<T>(query: string, variables: Record<string, unknown>): Promise<T> {
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
