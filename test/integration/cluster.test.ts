// `npm run cluster` as an operator runs it: a Redis primary, a replica, three
// Sentinels, the sandbox and two instances; both serve the same data, and
// Ctrl-C (SIGINT) stops every process it started.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { deliveryInput } from '../helpers/stack.js';
import { redisAvailable } from '../helpers/redis.js';

const root = new URL('../..', import.meta.url).pathname;
const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { __typename ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const READ = `query($uid: ID!) { delivery(uid: $uid) { uid status } }`;

describe.skipIf(!redisAvailable('cluster.test.ts'))('npm run cluster', () => {
  it('starts the Sentinel set, the sandbox and two instances on one store, and stops all of it on Ctrl-C', async () => {
    const child = spawn('npm', ['run', 'cluster', '--silent', '--', '--instances=2', '--port=0'], { cwd: root, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', LOG_LEVEL: 'silent' }, stdio: ['ignore', 'pipe', 'pipe'] });
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
      expect(urls).toHaveLength(2);
      const key = /merchant key\s+(\S+)/.exec(output)![1]!;
      expect(output).toMatch(/Sentinels\s+127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+/);
      const gql = async (url: string, query: string, variables: Record<string, unknown>) =>
        (await (await fetch(`${url}/graphql`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify({ query, variables }) })).json()) as any;
      // Booked on one instance, read on the other: one store.
      const booked = await gql(urls[0]!, CREATE, { input: deliveryInput() });
      const uid = booked.data.createDelivery.data.uid as string;
      expect((await gql(urls[1]!, READ, { uid })).data.delivery.uid).toBe(uid);
      for (const url of urls) expect((await fetch(`${url}/ready`)).status).toBe(200);

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
