// Load generators run in processes of their own, so that the orchestrator's
// bookkeeping never competes with them or with the contender for the 2 cores:
// the orchestrator forks a small script from bench/load/ per generator, sends
// it commands over the IPC channel and gets its measurements back. Structured
// clone ("advanced" serialization) carries typed arrays of timings as they are.
import { fork } from 'node:child_process';
import path from 'node:path';
import { sharedNow, epochNow } from './clock.mjs';
import { BENCH } from './proc.mjs';

/** Forks bench/load/<script>.mjs; `call(command, args)` resolves with its answer. */
export function forkWorker(script) {
  const child = fork(path.join(BENCH, 'load', `${script}.mjs`), [], {
    serialization: 'advanced',
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const pending = new Map();
  let nextId = 0;
  let exited;
  child.on('message', ({ id, ok, result, error }) => {
    const waiting = pending.get(id);
    if (!waiting) return;
    pending.delete(id);
    if (ok) waiting.resolve(result);
    else waiting.reject(new Error(`${script} (pid ${child.pid}): ${error}`));
  });
  const gone = new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      exited = signal ?? code;
      for (const waiting of pending.values())
        waiting.reject(new Error(`${script} (pid ${child.pid}) exited (${exited})`));
      pending.clear();
      resolve();
    });
  });
  return {
    script,
    pid: child.pid,
    call(command, args = {}) {
      if (exited !== undefined) return Promise.reject(new Error(`${script} has exited (${exited})`));
      return new Promise((resolve, reject) => {
        const id = (nextId += 1);
        pending.set(id, { resolve, reject });
        child.send({ id, command, args });
      });
    },
    /** Closing the channel ends the worker (see serve); killed if it lingers. */
    async stop() {
      if (exited !== undefined) return;
      if (child.connected) child.disconnect();
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await gone;
      clearTimeout(timer);
    },
  };
}

/** The worker's side: runs each command's handler and answers; every worker also answers a clock reading. */
export function serve(handlers) {
  const all = { ...handlers, __clock: () => ({ shared: sharedNow(), epoch: epochNow() }) };
  process.on('message', async ({ id, command, args }) => {
    try {
      if (!(command in all)) throw new Error(`unknown command ${command}`);
      process.send({ id, ok: true, result: await all[command](args) });
    } catch (error) {
      process.send({ id, ok: false, error: error instanceof Error ? error.stack : String(error) });
    }
  });
  // The orchestrator went away (or is done with this worker): nothing left to measure.
  process.once('disconnect', () => process.exit(0));
}
