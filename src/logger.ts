// Structured logs (pino). Anything that could hold a merchant key or a token is
// redacted at the logger, so a careless field cannot leak one.
import { pino, type DestinationStream, type Logger } from 'pino';
import type { LogLevel } from './config.js';

export type { Logger };

export function createLogger(level: LogLevel, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: undefined,
      redact: {
        paths: ['key', '*.key', 'authorization', '*.authorization', 'headers.authorization', '*.headers.authorization', 'token', '*.token'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}
