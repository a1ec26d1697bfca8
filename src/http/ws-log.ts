// Access-log lines for GraphQL over WebSocket, beside the upgrade's own line and
// with its request id: one per operation when it ends (its name and type, how
// long it ran, how it ended, the codes of its errors) and one per socket when it
// closes (its close code and reason, how long it was open, how many operations
// it ran). Fed by graphql-ws's server hooks (ws.ts).
import type { IncomingMessage } from 'node:http';
import type { ServerOptions } from 'graphql-ws';
import type { Extra } from 'graphql-ws/use/ws';
import type { WebSocket } from 'ws';
import type { Logger } from '../logger.js';
import { noteErrorCodes, requestInfoOf, type RequestInfo } from '../observability/request.js';

/**
 * How an operation ended: `complete` (the server ended it, a query's answer or a stream's end), `error` (the server
 * ended it with errors: an error message, or results that carried errors), `stopped` (the client's complete message),
 * `closed` (its socket closed first: closeCode says by whom).
 */
export type OperationEnding = 'complete' | 'error' | 'stopped' | 'closed';

interface Operation {
  started: number;
  name: string | null;
  type: string | undefined;
  /** The codes of its errors, as an HTTP request's line has them. */
  codes: Pick<RequestInfo, 'errorCodes'>;
  failed: boolean;
}

interface Socket {
  opened: number;
  operations: Map<string, Operation>;
  ran: number;
  closeCode?: number;
  closeReason?: string;
}

type Errors = ReadonlyArray<{
  readonly extensions?: Readonly<Record<string, unknown>>;
  readonly originalError?: unknown;
}>;

/** Each error's code: its extensions' own, or that of the error it wraps (a stream that threw). */
function withCodes(errors: Errors): Errors {
  return errors.map((error) =>
    typeof error.extensions?.code === 'string'
      ? error
      : { extensions: { code: (error.originalError as { code?: unknown } | undefined)?.code } },
  );
}

const roundMs = (since: number) => Math.round((performance.now() - since) * 1000) / 1000;

export class SocketLog {
  readonly #sockets = new WeakMap<WebSocket, Socket>();

  constructor(readonly logger: Logger) {}

  /** Where info lines are not written, nothing is recorded. */
  static for(logger: Logger | undefined): SocketLog | undefined {
    return logger?.isLevelEnabled('info') ? new SocketLog(logger) : undefined;
  }

  /** graphql-ws's server hooks that feed it. */
  hooks(): Pick<ServerOptions<Record<string, unknown>, Extra>, 'onNext' | 'onError' | 'onComplete' | 'onClose'> {
    return {
      onNext: (ctx, id, _payload, _args, result) => this.noted(ctx.extra.socket, id, result.errors),
      onError: (ctx, id, _payload, errors) => this.failed(ctx.extra.socket, id, errors, ctx.extra.request),
      onComplete: (ctx, id) => this.ended(ctx.extra.socket, id, id in ctx.subscriptions, ctx.extra.request),
      onClose: (ctx, code, reason) => this.closed(ctx.extra.socket, code, reason, ctx.extra.request),
    };
  }

  opened(socket: WebSocket): void {
    const record: Socket = { opened: performance.now(), operations: new Map(), ran: 0 };
    this.#sockets.set(socket, record);
    // Heard before graphql-ws ends the socket's operations: those the close ended carry its code.
    socket.once('close', (code, reason) => {
      record.closeCode = code;
      record.closeReason = reason.toString();
    });
  }

  started(socket: WebSocket, id: string, type: string | undefined, name: string | undefined): void {
    const record = this.#sockets.get(socket);
    if (!record) return;
    record.ran += 1;
    record.operations.set(id, { started: performance.now(), name: name ?? null, type, codes: {}, failed: false });
  }

  /** Errors in a result it sent (the operation goes on). */
  noted(socket: WebSocket, id: string, errors: Errors | undefined): void {
    const operation = this.#sockets.get(socket)?.operations.get(id);
    if (operation && errors) noteErrorCodes(operation.codes, withCodes(errors));
  }

  /** An error message ended the operation; refused before it ran, it is logged now (no completion follows). */
  failed(socket: WebSocket, id: string, errors: Errors, request: IncomingMessage): void {
    const record = this.#sockets.get(socket);
    if (!record) return;
    let operation = record.operations.get(id);
    const refused = !operation;
    if (!operation) {
      record.ran += 1;
      operation = { started: performance.now(), name: null, type: undefined, codes: {}, failed: true };
    }
    operation.failed = true;
    noteErrorCodes(operation.codes, withCodes(errors));
    if (refused) this.#write(record, id, operation, 'error', request);
  }

  /** The operation ended: `running` says whether graphql-ws still counted it as the socket's (the server ended it). */
  ended(socket: WebSocket, id: string, running: boolean, request: IncomingMessage): void {
    const record = this.#sockets.get(socket);
    const operation = record?.operations.get(id);
    if (!record || !operation) return;
    // Ended by the server with errors in its results (a subscription refused as it started answers them and completes).
    const ending: OperationEnding =
      operation.failed || (running && operation.codes.errorCodes)
        ? 'error'
        : running
          ? 'complete'
          : record.closeCode !== undefined
            ? 'closed'
            : 'stopped';
    this.#write(record, id, operation, ending, request);
  }

  closed(socket: WebSocket, code: number | undefined, reason: string | undefined, request: IncomingMessage): void {
    const record = this.#sockets.get(socket);
    if (!record) return;
    this.logger.info(
      {
        reqId: requestInfoOf(request)?.id,
        transport: 'websocket',
        path: (request.url ?? '/').split('?', 1)[0],
        durationMs: roundMs(record.opened),
        operations: record.ran,
        closeCode: code ?? record.closeCode,
        ...((reason ?? record.closeReason) ? { closeReason: reason ?? record.closeReason } : {}),
      },
      'websocket closed',
    );
  }

  #write(record: Socket, id: string, operation: Operation, ending: OperationEnding, request: IncomingMessage): void {
    record.operations.delete(id);
    this.logger.info(
      {
        reqId: requestInfoOf(request)?.id,
        transport: 'websocket',
        id,
        operation: operation.name,
        ...(operation.type ? { operationType: operation.type } : {}),
        durationMs: roundMs(operation.started),
        result: ending,
        ...(operation.codes.errorCodes ? { errorCodes: operation.codes.errorCodes } : {}),
        ...(ending === 'closed' ? { closeCode: record.closeCode } : {}),
      },
      'operation',
    );
  }
}
