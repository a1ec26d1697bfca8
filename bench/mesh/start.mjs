// Start the GraphQL Mesh v1 contender: compose openapi/upstream.yaml with
// mesh-compose (mesh.config.ts), then serve the supergraph with Hive Gateway
// in-process (createGatewayRuntime + node:http), logging off.
//
// Programmatic:
//   import { startMesh } from './bench/mesh/start.mjs';
//   const { url, stop } = await startMesh({ upstreamUrl: 'http://127.0.0.1:4010/api/v1', port: 0 });
//   // POST GraphQL to `url` (http://127.0.0.1:PORT/graphql) ... then: await stop();
//
// CLI (serves until SIGINT/SIGTERM):
//   node bench/mesh/start.mjs --upstream http://127.0.0.1:4010/api/v1 --port 4000
//   (or UPSTREAM_URL=... PORT=... node bench/mesh/start.mjs)
//
// The upstream endpoint is baked into the supergraph at compose time, so every
// startMesh() composes again for its upstreamUrl (about 1.5-5 s, in a child
// process: mesh-compose needs its TypeScript import hooks). Pass
// `compose: false` to reuse an existing supergraph file.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createGatewayRuntime } from '@graphql-hive/gateway-runtime';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

export const DEFAULT_SUPERGRAPH_PATH = join(here, 'supergraph.graphql');

function meshComposeBin() {
  const pkgPath = require.resolve('@graphql-mesh/compose-cli/package.json');
  const pkg = JSON.parse(readFileSync(pkgPath, 'utf8'));
  return join(dirname(pkgPath), pkg.bin['mesh-compose']);
}

/**
 * Run mesh-compose (mesh.config.ts) for `upstreamUrl` and write the supergraph SDL to `output`.
 * Resolves with the output path; rejects with mesh-compose's stderr on failure.
 */
export function composeSupergraph({ upstreamUrl, output = DEFAULT_SUPERGRAPH_PATH }) {
  if (!upstreamUrl) throw new Error('composeSupergraph: upstreamUrl is required');
  const out = resolve(output);
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [meshComposeBin(), '--config-path', 'mesh.config.ts', '--output', out], {
      cwd: here,
      env: { ...process.env, UPSTREAM_URL: upstreamUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    child.stdout.on('data', (d) => (log += d));
    child.stderr.on('data', (d) => (log += d));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (code === 0) resolvePromise(out);
      else reject(new Error(`mesh-compose failed (code ${code}, signal ${signal}):\n${log}`));
    });
  });
}

/**
 * Compose (unless compose: false) and start Hive Gateway on host:port (port 0 = any free port).
 * Returns { url, port, supergraphPath, timings: { composeMs, gatewayMs, totalMs }, gateway, server, stop }.
 * The gateway is warmed (supergraph loaded, one query executed) before this resolves.
 */
export async function startMesh({
  upstreamUrl,
  port = 0,
  host = '127.0.0.1',
  supergraphPath = DEFAULT_SUPERGRAPH_PATH,
  compose = true,
  gatewayOptions = {},
} = {}) {
  const t0 = performance.now();
  if (compose) await composeSupergraph({ upstreamUrl, output: supergraphPath });
  const t1 = performance.now();

  const gateway = createGatewayRuntime({
    supergraph: resolve(supergraphPath),
    logging: false,
    landingPage: false,
    graphiql: false,
    ...gatewayOptions,
  });
  const server = createServer(gateway);
  await new Promise((res, rej) => {
    server.once('error', rej);
    server.listen(port, host, () => {
      server.off('error', rej);
      res();
    });
  });
  const actualPort = server.address().port;
  const url = `http://${host}:${actualPort}/graphql`;

  // The supergraph is loaded lazily on the first request; force it now so the
  // first benchmark request does not pay for it. `{ __typename }` touches no upstream.
  const warm = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query: '{ __typename }' }),
  });
  const warmBody = await warm.json();
  if (warmBody?.data?.__typename !== 'Query') {
    server.close();
    throw new Error(`Mesh gateway warm-up failed: ${warm.status} ${JSON.stringify(warmBody)}`);
  }
  const t2 = performance.now();

  let stopped = false;
  async function stop() {
    if (stopped) return;
    stopped = true;
    await new Promise((res) => {
      server.close(() => res());
      server.closeAllConnections?.();
    });
    await gateway.dispose?.();
  }

  return {
    url,
    port: actualPort,
    supergraphPath: resolve(supergraphPath),
    timings: { composeMs: t1 - t0, gatewayMs: t2 - t1, totalMs: t2 - t0 },
    gateway,
    server,
    stop,
  };
}

function parseArgs(argv) {
  const opts = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => argv[++i];
    if (a === '--upstream' || a === '--upstream-url') opts.upstreamUrl = next();
    else if (a === '--port') opts.port = Number(next());
    else if (a === '--host') opts.host = next();
    else if (a === '--supergraph') opts.supergraphPath = next();
    else if (a === '--no-compose') opts.compose = false;
    else if (a === '--help' || a === '-h') opts.help = true;
    else throw new Error(`unknown argument ${a}`);
  }
  return opts;
}

const isMain = process.argv[1] && pathToFileURL(resolve(process.argv[1])).href === import.meta.url;
if (isMain) {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.help) {
    console.log(
      'usage: node bench/mesh/start.mjs --upstream <base url ending in /api/v1> [--port 4000] [--host 127.0.0.1] [--supergraph path] [--no-compose]\n' +
        '       (UPSTREAM_URL and PORT environment variables are also read)',
    );
    process.exit(0);
  }
  opts.upstreamUrl ??= process.env.UPSTREAM_URL;
  opts.port ??= process.env.PORT ? Number(process.env.PORT) : 4000;
  if (!opts.upstreamUrl && opts.compose !== false) {
    console.error('UPSTREAM_URL / --upstream is required');
    process.exit(2);
  }
  const mesh = await startMesh(opts);
  console.log(
    `mesh (Hive Gateway) listening on ${mesh.url} -> ${opts.upstreamUrl ?? '(supergraph as composed)'}; ` +
      `compose ${mesh.timings.composeMs.toFixed(0)} ms, gateway ready ${mesh.timings.gatewayMs.toFixed(0)} ms`,
  );
  const shutdown = async () => {
    await mesh.stop();
    process.exit(0);
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
}
