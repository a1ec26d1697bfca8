// Entry point: loadConfig → startApp → banner; stops gracefully on SIGTERM/SIGINT.
// With WORKERS=N the first process supervises N workers that each run startApp (cluster.ts).
import cluster from 'node:cluster';
import { existsSync } from 'node:fs';
import { startApp } from './app.js';
import { announce, help } from './banner.js';
import { reportListening, runPrimary } from './cluster.js';
import { ConfigError, loadConfig, unknownSettings } from './config.js';
import { createLogger } from './logger.js';
import { startFailure } from './start-failure.js';

async function main(): Promise<void> {
  if (process.argv.includes('--help') || process.argv.includes('-h')) {
    console.log(help());
    return;
  }
  // A local .env file, when there is one, fills in variables not already set.
  if (existsSync('.env')) process.loadEnvFile('.env');
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`delivery-graph: bad configuration: ${error.message}`);
      process.exit(1);
    }
    throw error;
  }

  const logger = createLogger(config.logLevel, undefined, config.logFormat);
  // A misspelled setting is silently its default: name it (once, not once per worker).
  if (!cluster.isWorker) {
    for (const { variable, closest } of unknownSettings())
      logger.warn(
        { variable, closest },
        `${variable} is not a setting of delivery-graph and is ignored; did you mean ${closest}?`,
      );
  }

  if (config.workers > 1 && cluster.isPrimary) {
    await runPrimary(config, (where, sandbox) => announce(config, logger, where, sandbox));
    return;
  }
  let app;
  try {
    app = await startApp(config, { logger });
  } catch (error) {
    // Another process on DATA_DIR, a damaged store file, busy ports: one line, naming it and what to do
    // (start-failure.ts).
    const line = await startFailure(config, error);
    if (line === undefined) throw error;
    console.error(`delivery-graph: ${line}`);
    process.exit(1);
  }
  // Stopping is in place before the banner says the server is there: a signal that follows it is a graceful stop.
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    const started = performance.now();
    app.logger.info({ signal }, 'stopping');
    // The last line says the process has stopped and how: a collector then knows no line is missing.
    const stopped = (exitCode: number) => {
      app.logger.info({ signal, exitCode, durationMs: Math.round(performance.now() - started) }, 'stopped');
      process.exit(exitCode);
    };
    app.stop().then(
      () => stopped(0),
      (error: unknown) => {
        app.logger.error({ err: error }, 'stop failed');
        stopped(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  if (cluster.isWorker) {
    // One of WORKERS: the primary prints the banner; this one says where it serves.
    reportListening(app);
  } else {
    announce(config, logger, app, app.sandbox);
  }
}

main().catch((error: unknown) => {
  console.error('delivery-graph failed to start:', error instanceof Error ? error.message : error);
  process.exit(1);
});
