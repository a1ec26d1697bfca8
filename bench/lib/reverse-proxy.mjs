// The limit for any Node proxy: a plain reverse proxy on undici that passes a
// GET through to the upstream and the answer back, nothing more.
// Run as a child process: node reverse-proxy.mjs <port> <upstreamOrigin>
import { createServer } from 'node:http';
import { Pool } from 'undici';

const [port, origin] = [Number(process.argv[2] ?? 0), process.argv[3]];
const pool = new Pool(origin, { connections: 64, pipelining: 1, keepAliveTimeout: 30_000 });

const server = createServer(async (req, res) => {
  try {
    const upstream = await pool.request({
      method: 'GET',
      path: req.url,
      headers: { authorization: req.headers.authorization ?? '' },
    });
    const body = Buffer.from(await upstream.body.arrayBuffer());
    res.writeHead(upstream.statusCode, { 'content-type': 'application/json', 'content-length': body.length }).end(body);
  } catch {
    res.writeHead(502).end();
  }
});
server.keepAliveTimeout = 65_000;
server.listen(port, '127.0.0.1', () => console.log(`ready ${server.address().port}`));
