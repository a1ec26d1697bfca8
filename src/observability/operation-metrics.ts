// Counts and times every operation the pipeline runs, whichever way it came
// (the direct JSON path, yoga's handler, graphql-ws), refusals by its guards
// included: an observer of the pipeline (pipeline/pipeline.ts).
import type { ExecutionResult } from 'graphql';
import type { Metrics, OperationOutcome } from './metrics.js';
import type { OperationLabel } from './operation-names.js';

function outcomeOf(result: unknown): OperationOutcome {
  if (typeof result === 'object' && result !== null && Symbol.asyncIterator in result) return 'stream';
  const { errors, data } = result as ExecutionResult;
  if (!errors || errors.length === 0) return 'ok';
  return data == null ? 'error' : 'partial';
}

export function operationMetrics(metrics: Metrics) {
  return {
    start(label: OperationLabel) {
      const started = performance.now();
      return {
        done(result: unknown) {
          const outcome = outcomeOf(result);
          metrics.operation(label, outcome, outcome === 'stream' ? undefined : (performance.now() - started) / 1000);
        },
      };
    },
  };
}
