// `npm run cluster` as an operator runs it: a Redis primary, a replica, three
// Sentinels, the sandbox and two instances, each on a port counted from --port;
// both instances serve the same data, a failover tried with the process id it
// names is measured and said, and Ctrl-C (SIGINT) stops every process it
// started. `-- --help` answers with the usage.
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { deliveryInput } from '../helpers/stack.js';
import { redisAvailable } from '../helpers/redis.js';

const root = new URL('../..', import.meta.url).pathname;
const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { __typename ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const READ = `query($uid: ID!) { delivery(uid: $uid) { uid status } }`;

/** A base port with the eight after it (two instances, the sandbox, two Redis servers, three Sentinels) free now. */
async function freeBase(): Promise<number> {
  const free = (port: number) =>
    new Promise<boolean>((resolve) => {
      const probe = createServer();
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
    });
  for (;;) {
    // Below the ephemeral range, where other tests' port-0 listeners land.
    const base = 20_000 + Math.floor(Math.random() * 10_000);
    if ((await Promise.all(Array.from({ length: 8 }, (_, n) => free(base + n)))).every(Boolean)) return base;
  }
}

describe('npm run cluster -- --help', () => {
  it('prints the usage, the port layout included, and exits 0', () => {
    const result = spawnSync('npm', ['run', 'cluster', '--silent', '--', '--help'], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' },
      encoding: 'utf8',
    });
    expect(result.status).toBe(0);
    expect(result.stdout).toMatch(/^Usage: npm run cluster/);
    expect(result.stdout).toContain('--port=P');
    expect(result.stdout).toContain('Sentinels on P+N+3 to P+N+5');
  });
});

describe.skipIf(!redisAvailable('cluster.test.ts'))('npm run cluster', () => {
  it('starts the Sentinel set, the sandbox and two instances on the ports from --port, on one store, and stops all of it on Ctrl-C', async () => {
    const base = await freeBase();
    const child = spawn('npm', ['run', 'cluster', '--silent', '--', '--instances=2', `--port=${base}`], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', LOG_LEVEL: 'silent' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no "ready" within 60 s:\n${output}`)), 60_000);
        child.stdout!.on('data', () => {
          if (output.includes('ready; Ctrl-C stops everything.')) {
            clearTimeout(timer);
            resolve();
          }
        });
        child.once('exit', (code) => reject(new Error(`exited with ${code}:\n${output}`)));
      });
      const urls = [...output.matchAll(/instance \d+\s+(http:\/\/\S+)\/graphql/g)].map((match) => match[1]!);
      // Everything on the ports the usage names: the instances, the sandbox, the Redis servers, the Sentinels.
      expect(urls).toEqual([`http://127.0.0.1:${base}`, `http://127.0.0.1:${base + 1}`]);
      expect(output).toContain(`sandbox upstream    http://127.0.0.1:${base + 2}/api/v1`);
      expect(output).toContain(`Redis primary       127.0.0.1:${base + 3}   (replica 127.0.0.1:${base + 4})`);
      expect(output).toContain(`Sentinels           127.0.0.1:${base + 5},127.0.0.1:${base + 6},127.0.0.1:${base + 7}`);
      const key = /merchant key\s+(\S+)/.exec(output)![1]!;
      expect(key).toBe('sk_test_demo_merchant');
      const gql = async (url: string, query: string, variables: Record<string, unknown>) =>
        (await (
          await fetch(`${url}/graphql`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
            body: JSON.stringify({ query, variables }),
          })
        ).json()) as any;
      // Booked on one instance, read on the other: one store.
      const booked = await gql(urls[0]!, CREATE, { input: deliveryInput() });
      const uid = booked.data.createDelivery.data.uid as string;
      expect((await gql(urls[1]!, READ, { uid })).data.delivery.uid).toBe(uid);
      for (const url of urls) expect((await fetch(`${url}/ready`)).status).toBe(200);

      // The failover it offers: a process id to kill, as a shell would; it says how long the Sentinels took.
      const offered = /Try a failover: kill -9 (\d+) {3}\(the Redis primary, 127\.0\.0\.1:(\d+)\)/.exec(output);
      expect(offered, output).not.toBeNull();
      expect(Number(offered![2])).toBe(base + 3);
      process.kill(Number(offered![1]), 'SIGKILL');
      const failover = await new Promise<RegExpExecArray>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no failover line within 60 s:\n${output}`)), 60_000);
        const look = () => {
          const found =
            /failover: the Redis primary 127\.0\.0\.1:(\d+) \(pid (\d+)\) stopped; the Sentinels promoted 127\.0\.0\.1:(\d+), which took writes (\d+\.\d) s later\./.exec(
              output,
            );
          if (found && output.includes('is back, as the replica of')) {
            clearTimeout(timer);
            resolve(found);
          } else setTimeout(look, 50);
        };
        look();
      });
      expect(failover.slice(1, 4).map(Number)).toEqual([base + 3, Number(offered![1]), base + 4]);
      const seconds = Number(failover[4]);
      // The Sentinels call a primary down after a second of silence, then agree and promote.
      expect(seconds).toBeGreaterThanOrEqual(1);
      expect(seconds).toBeLessThan(60);
      console.log(`failover measured by npm run cluster: ${seconds} s`);
      // And the next one is offered, on the new primary.
      expect(output).toMatch(
        new RegExp(`Try a failover: kill -9 \\d+ {3}\\(the Redis primary, 127\\.0\\.0\\.1:${base + 4}\\)`),
      );
      // The instances serve on the promoted primary: booked on one, read on the other.
      const after = await gql(urls[1]!, CREATE, { input: deliveryInput() });
      const second = after.data.createDelivery.data.uid as string;
      expect((await gql(urls[0]!, READ, { uid: second })).data.delivery.uid).toBe(second);

      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      // npm passes the signal on to the script, as a terminal's Ctrl-C would reach it.
      child.kill('SIGINT');
      expect(await exited).toBe(0);
      for (const url of urls) await expect(fetch(`${url}/health`)).rejects.toThrow();
      // Node warnings go to the stderr of the process that has them: none from any of its processes.
      expect(output).not.toMatch(/warning/i);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 120_000);
});
