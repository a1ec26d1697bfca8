// Structured logs (pino). Anything that could hold a merchant key or a token is
// redacted at the logger, so a careless field cannot leak one.
// LOG_FORMAT=pretty formats each line with pino-pretty in this process, writing
// synchronously: a terminal gets its lines in order with the banner (console.log),
// and none is lost when the process exits. A transport's worker thread would give
// neither; pretty is for a person watching, json (pino's own) for everything else.
// Every line carries the process that wrote it (pid) and, with WORKERS, its
// worker (node:cluster's id, 1 to N): the lines of all workers share one stream.
import cluster from 'node:cluster';
import { pino, type DestinationStream, type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { LogFormat, LogLevel } from './config.js';

export type { Logger };

/** A logger at level, writing to destination (stdout when absent) as format says. */
export function createLogger(level: LogLevel, destination?: DestinationStream, format: LogFormat = 'json'): Logger {
  const out =
    format === 'pretty'
      ? pretty({
          destination: (destination as NodeJS.WritableStream | undefined) ?? 1,
          sync: true,
          singleLine: true,
          translateTime: 'SYS:HH:MM:ss.l',
          // A person at one terminal runs one process; with WORKERS the worker still shows among the fields.
          ignore: 'pid',
        })
      : destination;
  return pino(
    {
      level,
      base: { pid: process.pid, ...(cluster.isWorker ? { worker: cluster.worker!.id } : {}) },
      redact: {
        paths: [
          'key',
          '*.key',
          'authorization',
          '*.authorization',
          'headers.authorization',
          '*.headers.authorization',
          'token',
          '*.token',
          'controlToken',
          '*.controlToken',
        ],
        censor: '[redacted]',
      },
    },
    out,
  );
}
