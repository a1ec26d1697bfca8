// The built server as a deployment runs it: `npm run build`, then dist/ alone
// (no src/ beside it) on node_modules without esbuild. The tracking page is
// served from the static bundle the build wrote; nothing is bundled at run time.
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = new URL('../..', import.meta.url).pathname;

describe('the built server, deployed without src/ and without esbuild', () => {
  let deploy: string;
  let child: ReturnType<typeof spawn>;
  let url: string;

  beforeAll(async () => {
    execFileSync('npm', ['run', 'build', '--silent'], { cwd: root, stdio: 'ignore' });
    deploy = mkdtempSync(path.join(tmpdir(), 'dg-deploy-'));
    cpSync(path.join(root, 'dist'), path.join(deploy, 'dist'), { recursive: true });
    cpSync(path.join(root, 'package.json'), path.join(deploy, 'package.json'));
    // Every installed package but esbuild (and its platform binaries).
    mkdirSync(path.join(deploy, 'node_modules'));
    for (const name of readdirSync(path.join(root, 'node_modules'))) {
      if (name === 'esbuild' || name === '.bin') continue;
      if (name === '@esbuild') continue;
      symlinkSync(path.join(root, 'node_modules', name), path.join(deploy, 'node_modules', name));
    }
    child = spawn(process.execPath, ['dist/main.js'], {
      cwd: deploy,
      env: {
        PATH: process.env.PATH ?? '',
        PORT: '0',
        SANDBOX_PORT: '0',
        DATA_DIR: path.join(deploy, 'data'),
        LOG_LEVEL: 'silent',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    url = await new Promise<string>((resolve, reject) => {
      let output = '';
      child.once('exit', (code) => reject(new Error(`dist/main.js exited with ${code}:\n${output}`)));
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        const served = /serving on (http:\/\/\S+)/.exec(output);
        if (served) resolve(served[1]!);
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', onData);
    });
  }, 120_000);

  afterAll(() => {
    if (child?.exitCode === null) child.kill('SIGKILL');
    if (deploy) rmSync(deploy, { recursive: true, force: true });
  });

  it('serves the tracking page and its files from the bundle the build wrote', async () => {
    const page = await fetch(`${url}/`);
    expect(page.status).toBe(200);
    const html = await page.text();
    for (const asset of [/\/tracking\/app\.js\?v=\w+/, /\/tracking\/app\.css\?v=\w+/]) {
      const href = asset.exec(html)?.[0];
      expect(href, `${asset} in the page`).toBeDefined();
      const file = await fetch(`${url}${href}`);
      expect(file.status).toBe(200);
      expect((await file.arrayBuffer()).byteLength).toBeGreaterThan(1000);
    }
  });

  // The SQLite writer thread runs dist/store/sqlite-writer.js here (no esbuild to bundle the source).
  it('writes through the SQLite writer thread, then stops on SIGTERM with exit code 0', async () => {
    // /ready writes a row to the store's file: a writer thread that could not start answers 503.
    const ready = await fetch(`${url}/ready`);
    expect(await ready.json()).toMatchObject({ status: 'ready', store: 'ok' });
    expect(ready.status).toBe(200);
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
