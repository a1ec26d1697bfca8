// CPU of verifying one webhook token: jose's jwtVerify (WebCrypto: the RSA check
// runs in libuv's thread pool, the promise resolves on the next turn of the
// loop) against a synchronous node:crypto verify with the key imported once,
// and the facade's verifier (dist/webhooks/verify.js: the full verify(), the
// payload checks included), with another checkout's verifier beside it
// (--dist=<checkout>/dist, e.g. 73fe34c's, which is jose's).
// Per variant: µs of CPU per token over all of this process's threads
// (process.cpuUsage), µs on the main thread alone (/proc/self/task/<pid>/stat),
// and wall µs per token, one token at a time and with 64 in flight (as under
// load). The variants alternate per round; medians of the rounds.
//
//   npm run build && node bench/probes/verify.mjs [--tokens=20000] [--rounds=3] [--dist=<other checkout>/dist]
import { generateKeyPairSync, sign, createPublicKey, verify as cryptoVerify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { spawnSync } from 'node:child_process';
import { importSPKI, jwtVerify } from 'jose';

const { values } = parseArgs({
  options: {
    tokens: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    dist: { type: 'string' },
  },
});
const ISSUER = 'bench';
const count = Number(values.tokens);
const rounds = Number(values.rounds);
const TICK_US = 1e6 / (Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100);

const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const publicKeyPem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
const header = b64({ alg: 'RS256', typ: 'JWT' });
/** Tokens as the bench's poster signs them: a realtime event as the payload claim. */
const tokens = Array.from({ length: count }, (_, n) => {
  const claims = b64({
    iss: ISSUER,
    iat: Math.floor(Date.now() / 1000),
    exp: Math.floor(Date.now() / 1000) + 3600,
    payload: {
      uid: `00000000-0000-4000-9000-${String(n % 100).padStart(12, '0')}`,
      event_name: 'delivery.dropoff_enroute',
      status: `e${n}`,
    },
  });
  const input = `${header}.${claims}`;
  return `${input}.${sign('sha256', Buffer.from(input), privateKey).toString('base64url')}`;
});

const joseKey = await importSPKI(publicKeyPem, 'RS256');
const nodeKey = createPublicKey(publicKeyPem);
const ours = await import(path.resolve(new URL('../../dist', import.meta.url).pathname, 'webhooks/verify.js'));
const oursVerifier = await ours.createWebhookVerifier(publicKeyPem, ISSUER);
const other = values.dist && (await import(path.resolve(values.dist, 'webhooks/verify.js')));
const otherVerifier = other && (await other.createWebhookVerifier(publicKeyPem, ISSUER));

const variants = {
  'jose jwtVerify (WebCrypto, thread pool)': (token) =>
    jwtVerify(token, joseKey, { algorithms: ['RS256'], issuer: ISSUER, requiredClaims: ['exp'], clockTolerance: 30 }),
  'node:crypto verify, cached KeyObject (signature only)': (token) => {
    const end = token.lastIndexOf('.');
    if (
      !cryptoVerify(
        'sha256',
        Buffer.from(token.slice(0, end), 'latin1'),
        nodeKey,
        Buffer.from(token.slice(end + 1), 'base64url'),
      )
    )
      throw new Error('bad signature');
  },
  "this checkout's verifier (dist/webhooks/verify.js)": (token) => oursVerifier.verify(`Bearer ${token}`),
  ...(otherVerifier ? { [`${values.dist}'s verifier`]: (token) => otherVerifier.verify(`Bearer ${token}`) } : {}),
};

/** This thread's CPU so far, µs (utime + stime of the main thread's task). */
function mainThreadUs() {
  const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * TICK_US;
}

async function measure(verify, inFlight) {
  const cpu = process.cpuUsage();
  const main = mainThreadUs();
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < tokens.length) await verify(tokens[next++]);
    }),
  );
  const wallUs = (performance.now() - started) * 1000;
  const used = process.cpuUsage(cpu);
  return {
    allUs: (used.user + used.system) / tokens.length,
    mainUs: (mainThreadUs() - main) / tokens.length,
    wallUs: wallUs / tokens.length,
  };
}

const results = Object.fromEntries(Object.keys(variants).map((name) => [name, { 1: [], 64: [] }]));
// A first pass of each, not counted: every path compiled before it is measured.
for (const verify of Object.values(variants)) await measure(verify, 8);
for (let round = 0; round < rounds; round += 1) {
  for (const [name, verify] of Object.entries(variants)) {
    for (const inFlight of [1, 64]) results[name][inFlight].push(await measure(verify, inFlight));
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const cell = (runs, key) => median(runs.map((r) => r[key])).toFixed(1);
console.log(`${count} RS256 tokens (2048-bit key), ${rounds} round(s), medians; µs per token`);
console.log('| variant | CPU all threads, 1 / 64 in flight | main thread, 1 / 64 | wall, 1 / 64 |');
console.log('| --- | --- | --- | --- |');
for (const [name, r] of Object.entries(results)) {
  console.log(
    `| ${name} | ${cell(r[1], 'allUs')} / ${cell(r[64], 'allUs')} | ${cell(r[1], 'mainUs')} / ${cell(r[64], 'mainUs')} | ${cell(r[1], 'wallUs')} / ${cell(r[64], 'wallUs')} |`,
  );
}
