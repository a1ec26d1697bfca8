// A start that failed in a way the operator can fix, said in one line: another
// process on DATA_DIR (or on its sandbox world), a store file that is damaged or
// emptied, a port that is taken or not allowed. main.ts writes it and exits 1.
import { createServer } from 'node:net';
import type { Config } from './config.js';
import { SandboxWorldInUseError } from '@delivery-graph/sandbox';
import { DataDirInUseError } from './store/data-dir-lock.js';
import { StoreFileError } from './store/sqlite-file.js';

/**
 * The one line for a start that failed on something the operator can change; undefined for anything else (it is thrown
 * as it is).
 */
export async function startFailure(config: Config, error: unknown): Promise<string | undefined> {
  // Another process on this DATA_DIR (or on its sandbox world), or a store file that is damaged or emptied: naming it
  // and what to do.
  if (error instanceof DataDirInUseError || error instanceof SandboxWorldInUseError || error instanceof StoreFileError)
    return error.message;
  // A port taken by another process is the commonest way to fail: name every busy one and what to change.
  const { code } = error as NodeJS.ErrnoException;
  if (code === 'EADDRINUSE' || code === 'EACCES')
    return portProblems(config, error as NodeJS.ErrnoException & { port?: number });
  return undefined;
}

/** Every port this configuration listens on, with the variable that sets it (0, any free port, cannot be taken). */
function wantedPorts(config: Config): { variable: string; port: number; host: string }[] {
  const wanted = [{ variable: 'PORT', port: config.port, host: config.host }];
  if (!config.upstream.url) wanted.push({ variable: 'SANDBOX_PORT', port: config.sandbox.port, host: config.host });
  if (config.webhook.port !== undefined)
    wanted.push({ variable: 'WEBHOOK_PORT', port: config.webhook.port, host: config.host });
  if (config.metricsAccess.port !== undefined)
    wanted.push({ variable: 'METRICS_PORT', port: config.metricsAccess.port, host: config.metricsAccess.host });
  return wanted.filter((w) => w.port !== 0);
}

/** Whether listening on port and host fails, and how ('EADDRINUSE', 'EACCES', …); undefined when it is free. */
function listenProblem(port: number, host: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
    probe.listen(port, host, () => probe.close(() => resolve(undefined)));
  });
}

/**
 * The one line for a start that failed on a port. The start has let go of every port it
 * had opened, so each wanted port is tried here: the line names all busy ones at once,
 * not the first the start happened to meet.
 */
async function portProblems(config: Config, error: NodeJS.ErrnoException & { port?: number }): Promise<string> {
  const wanted = wantedPorts(config);
  const problems: { variable: string; port: number; host: string; code: string }[] = [];
  for (const w of wanted) {
    const code = await listenProblem(w.port, w.host);
    if (code === 'EADDRINUSE' || code === 'EACCES') problems.push({ ...w, code });
  }
  // The port went free meanwhile (or the failure was elsewhere): say what the start met.
  if (!problems.length) {
    const met = wanted.find((w) => w.port === error.port) ?? {
      variable: 'PORT',
      port: Number(error.port),
      host: config.host,
    };
    problems.push({ ...met, code: error.code! });
  }
  const described = problems.map(
    ({ port, host, code }) =>
      `port ${port} on ${host} ${code === 'EADDRINUSE' ? 'is already in use' : 'may not be used by this user'}`,
  );
  const settings = problems.map(({ variable, port }) => `${variable}=${port + 1}`).join(' ');
  // In production the process is started by a supervisor (node dist/main.js), not npm start.
  return `${described.join(', ')}; set ${problems.map((p) => p.variable).join(' and ')} to ${problems.length > 1 ? 'free ports' : 'a free port'} (e.g. ${settings}${config.production ? '' : ' npm start'})`;
}
