// What the front door costs per request on a kept-alive connection, against
// node:http alone: the front (src/http/front.ts) hands each admitted connection to
// the server, whose parser reads it straight from the socket, and the door asks
// two things of each parsed request on a shared port (its slot's verdict, and its
// head against 16 KiB: headOver in src/http/server-limits.ts). A server process
// of its own (node:http listening itself, or behind the front with the caps of a
// shared port and the parser limit of webhooks) answers POSTs of a small GraphQL
// body over 8 kept-alive connections; this prints its CPU time per request for
// each, rounds alternating.
//
//   npm run build && node bench/probes/front-requests.mjs [--requests=32000] [--rounds=3]
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

const { values } = parseArgs({
  options: {
    requests: { type: 'string', default: '32000' },
    rounds: { type: 'string', default: '3' },
    serve: { type: 'string' },
  },
});
const CONNECTIONS = 8;
const BODY = JSON.stringify({ query: '{ delivery(uid: "00000000-0000-4000-b000-000000000001") { uid status } }' });

if (values.serve) {
  const front = values.serve === 'front';
  const { createFronts, takeHandedConnections } = await import(
    new URL('../../dist/http/front.js', import.meta.url).href
  );
  const { headOver } = await import(new URL('../../dist/http/server-limits.js', import.meta.url).href);
  const fronts = createFronts({ maxConnections: 100_000, onConnectionRefused() {}, onListenerError() {} });
  const answer = (req, res) => {
    req.resume();
    req.on('end', () => res.end('{"data":{"delivery":null}}'));
  };
  const http = createServer(
    { connectionsCheckingInterval: 1_000, maxHeaderSize: front ? 278_528 : 16_384 },
    front
      ? (req, res) => {
          // The door's checks on a shared port, as src/http/server.ts asks them.
          const path = (req.url ?? '/').split('?', 1)[0];
          if (fronts.slotVerdict(req.socket, path) !== 'serve' || headOver(req, 16_384)) throw new Error('refused');
          answer(req, res);
        }
      : answer,
  );
  let port;
  if (values.serve === 'plain') {
    await new Promise((resolve) => http.listen(0, '127.0.0.1', resolve));
    port = http.address().port;
  } else {
    takeHandedConnections(http);
    const listener = await fronts.listen(0, '127.0.0.1', {
      name: 'main',
      server: http,
      perAddress: 25_000,
      reservedSlots: 64,
      reservedFor: '/webhooks',
    });
    port = listener.address().port;
  }
  process.send({ port });
  process.on('message', () => {
    const used = process.cpuUsage();
    process.send({ cpuMs: (used.user + used.system) / 1000 });
  });
  process.once('disconnect', () => process.exit(0));
} else {
  const requests = Number(values.requests);
  const results = { plain: [], front: [] };
  for (let round = 0; round < Number(values.rounds); round += 1) {
    for (const mode of ['plain', 'front']) {
      const server = fork(fileURLToPath(import.meta.url), [`--serve=${mode}`]);
      const { port } = await new Promise((resolve) => server.once('message', resolve));
      const pool = new Pool(`http://127.0.0.1:${port}`, { connections: CONNECTIONS });
      const send = async (count) => {
        await Promise.all(
          Array.from({ length: CONNECTIONS }, async () => {
            for (let i = 0; i < count / CONNECTIONS; i += 1) {
              const response = await pool.request({
                method: 'POST',
                path: '/graphql',
                headers: { 'content-type': 'application/json', authorization: 'Bearer sk_bench_merchant' },
                body: BODY,
              });
              await response.body.text();
            }
          }),
        );
      };
      const cpu = async () => {
        server.send('cpu');
        return (await new Promise((resolve) => server.once('message', resolve))).cpuMs;
      };
      await send(4_000);
      const before = await cpu();
      await send(requests);
      results[mode].push((((await cpu()) - before) * 1000) / requests);
      await pool.close();
      server.disconnect();
    }
  }
  const show = (list) => list.map((us) => us.toFixed(1)).join(', ');
  console.log(
    `server CPU per request (µs), ${requests} POSTs over ${CONNECTIONS} kept-alive connections, by round: node:http alone ${show(results.plain)}; behind the front ${show(results.front)}`,
  );
}
