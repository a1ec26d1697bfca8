// Child processes for contenders: spawn, wait for a ready line, read memory, stop.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const BENCH = fileURLToPath(new URL('..', import.meta.url));

/** Spawns a process and resolves once its output matches `ready` (the match is returned). */
export function spawnReady(command, args, { env = {}, cwd = ROOT, ready = /ready (\d+)/, timeoutMs = 60_000 } = {}) {
  const started = performance.now();
  const child = spawn(command, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${command} ${args.join(' ')} not ready in ${timeoutMs} ms:\n${output}`));
    }, timeoutMs);
    const onData = (chunk) => {
      output += chunk.toString();
      const match = ready.exec(output);
      if (match) {
        clearTimeout(timer);
        child.stdout.off('data', onData);
        child.stderr.off('data', onData);
        child.stdout.resume();
        child.stderr.resume();
        resolve({
          child,
          match,
          readyMs: performance.now() - started,
          rssKb: () => rssKb(child.pid),
          stop: () => stop(child),
        });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited with ${code} before ready:\n${output}`));
    });
    // A missing binary (ENOENT) is an error event, not an exit: without this it would be an unhandled crash.
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`${command} could not be started: ${error.message}`));
    });
  });
}

export function rssKb(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
}

/**
 * SIGTERM, then SIGKILL if it has not exited after `killAfterMs` (a profiled facade needs longer: it writes its profile
 * on exit).
 */
export function stop(child, killAfterMs = 5_000) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), killAfterMs).unref();
  });
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
