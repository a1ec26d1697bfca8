// What the front (src/http/front.ts) costs per new connection: it admits each
// connection (its caps) before handing the socket to the HTTP server's parser,
// where node:http alone hands it to its parser at once. A server process of its own (node:http listening itself, or behind the
// front) takes bursts of connections that each send a request line; this prints
// the server's CPU time per connection for each, rounds alternating.
//
//   npm run build && node bench/probes/front-accept.mjs [--connections=5000] [--rounds=2]
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    connections: { type: 'string', default: '5000' },
    rounds: { type: 'string', default: '2' },
    serve: { type: 'string' },
  },
});

if (values.serve) {
  // The server side: answers its port, then its CPU time when asked.
  const { createFronts, takeHandedConnections } = await import(
    new URL('../../dist/http/front.js', import.meta.url).href
  );
  const http = createServer({ connectionsCheckingInterval: 1_000 }, (_req, res) => res.end('ok'));
  let address;
  if (values.serve === 'plain') {
    await new Promise((resolve) => http.listen(0, '127.0.0.1', resolve));
    address = http.address();
  } else {
    takeHandedConnections(http);
    const fronts = createFronts({ maxConnections: 1_000_000, onConnectionRefused() {}, onListenerError() {} });
    address = (await fronts.listen(0, '127.0.0.1', { name: 'main', server: http })).address();
  }
  const before = process.cpuUsage();
  process.send({ port: address.port });
  process.on('message', () => {
    const used = process.cpuUsage(before);
    process.send({ cpuMs: (used.user + used.system) / 1000 });
  });
  process.once('disconnect', () => process.exit(0));
} else {
  const connections = Number(values.connections);
  const results = { plain: [], front: [] };
  for (let round = 0; round < Number(values.rounds); round += 1) {
    for (const mode of ['plain', 'front']) {
      const server = fork(fileURLToPath(import.meta.url), [`--serve=${mode}`]);
      const { port } = await new Promise((resolve) => server.once('message', resolve));
      const sockets = [];
      // Bursts of 500, each once the previous one is connected: the listen backlog never overflows.
      for (let burst = 0; burst < connections; burst += 500) {
        await Promise.all(
          Array.from({ length: Math.min(500, connections - burst) }, () => {
            const socket = connect(port, '127.0.0.1');
            socket.on('error', () => undefined);
            sockets.push(socket);
            return new Promise((resolve) =>
              socket.once('connect', () => resolve(socket.write('GET /health HTTP/1.1\r\nhost: probe\r\n'))),
            );
          }),
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
      server.send('cpu');
      const { cpuMs } = await new Promise((resolve) => server.once('message', resolve));
      results[mode].push(Math.round((cpuMs * 1000) / connections));
      for (const socket of sockets) socket.destroy();
      server.disconnect();
      await new Promise((resolve) => server.once('exit', resolve));
    }
  }
  console.log(JSON.stringify({ connections, serverCpuMicrosecondsPerConnection: results }));
}
