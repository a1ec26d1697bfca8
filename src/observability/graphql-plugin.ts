// The envelop plugin that observes every executed operation, whichever way it
// came (the direct JSON path, yoga's handler, graphql-ws): it names the
// operation on the HTTP request's record (for the request log) and counts and
// times it. Placed first in the plugin list, so operations that a later plugin
// refuses (rate limit, persisted operations) are counted too.
import type { ExecutionResult } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import type { Metrics, OperationOutcome } from './metrics.js';
import { OperationNames, type OperationLabel } from './operation-names.js';
import { requestInfoOf } from './request.js';

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
}

function outcomeOf(result: unknown): OperationOutcome {
  if (isAsyncIterable(result)) return 'stream';
  const { errors, data } = result as ExecutionResult;
  if (!errors || errors.length === 0) return 'ok';
  return data == null ? 'error' : 'partial';
}

export function useObservability(metrics: Metrics | undefined): Plugin {
  const names = new OperationNames();
  const note = (contextValue: unknown, label: OperationLabel) => {
    const info = requestInfoOf((contextValue as { req?: unknown } | undefined)?.req);
    if (info) {
      info.operationType = label.type;
      info.operationName = label.raw;
    }
  };
  return {
    onExecute({ args }) {
      const started = performance.now();
      const label = names.label(args.document, args.operationName);
      note(args.contextValue, label);
      if (!metrics) return;
      return {
        onExecuteDone({ result }) {
          const outcome = outcomeOf(result);
          metrics.operation(label, outcome, outcome === 'stream' ? undefined : (performance.now() - started) / 1000);
        },
      };
    },
    onSubscribe({ args }) {
      const label = names.label(args.document, args.operationName);
      note(args.contextValue, label);
      if (!metrics) return;
      return {
        onSubscribeResult({ result }) {
          metrics.operation(label, isAsyncIterable(result) ? 'stream' : outcomeOf(result), undefined);
        },
      };
    },
  };
}
