// 10,000 connect → subscribe → first message → close cycles leave nothing
// behind: no bus listener, no socket, and the heap back near its baseline.
// WS_LEAK_CYCLES sets the count; the soak tier (npm run test:soak) runs 100,000.
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { waitUntil } from '../helpers/wait.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const CYCLES = Number(process.env.WS_LEAK_CYCLES ?? 10_000);
const PARALLEL = 50;

let stack: Stack;
let uid: string;

beforeAll(async () => {
  stack = await startStack();
  const booked = await stack.gql(
    'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
    { input: deliveryInput() },
  );
  uid = booked.data.createDelivery.data.uid;
});
afterAll(async () => {
  await stack?.stop();
});

/** One client's whole life: connect, init, subscribe, wait for the first message, close. */
function cycle(wsUrl: string, key: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(wsUrl, 'graphql-transport-ws');
    const timer = setTimeout(() => reject(new Error('cycle timed out')), 10_000);
    socket.on('open', () =>
      socket.send(JSON.stringify({ type: 'connection_init', payload: { authorization: `Bearer ${key}` } })),
    );
    socket.on('message', (raw) => {
      const message = JSON.parse(raw.toString());
      if (message.type === 'connection_ack') {
        socket.send(
          JSON.stringify({
            id: '1',
            type: 'subscribe',
            payload: { query: 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { status } }', variables: { uid } },
          }),
        );
      } else if (message.type === 'next') {
        socket.close(1000);
      } else if (message.type === 'error') {
        reject(new Error(JSON.stringify(message.payload)));
      }
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve();
    });
    socket.on('error', reject);
  });
}

/** The server side of every WebSocket still open (the facade's server counts the sandbox's webhook connections too). */
const openSockets = new Set<Duplex>();
const trackSocket = (_req: IncomingMessage, socket: Duplex) => {
  openSockets.add(socket);
  socket.once('close', () => openSockets.delete(socket));
};

/**
 * The heap once every closed client is gone from the server: no WebSocket left
 * open, no listener on the bus; then collected a few times, with a turn of the
 * event loop between for whatever a collection lets go of (finalizers, closed handles).
 */
async function settle(): Promise<number> {
  await waitUntil(
    () => openSockets.size === 0 && stack.app.services.bus.listenerCount() === 0,
    'every WebSocket and listener to go',
  );
  for (let i = 0; i < 5; i += 1) {
    await new Promise((resolve) => setImmediate(resolve));
    gc();
  }
  return process.memoryUsage().heapUsed;
}

describe('WebSocket churn', () => {
  // About 1.5 ms a cycle here: the timeout grows with the count.
  it(
    `returns listeners to zero and the heap to its baseline after ${CYCLES} cycles`,
    { timeout: Math.max(180_000, CYCLES * 20) },
    async () => {
      const wsUrl = `${stack.app.url.replace('http', 'ws')}/graphql`;
      const bus = stack.app.services.bus;
      const server = (stack.app as unknown as { server: Server }).server;
      // The front door's upgrade logger and the WebSocket server's handler: churn must add none.
      const upgradeListeners = server.listenerCount('upgrade');
      server.on('upgrade', trackSocket);
      // Warm-up: compiled operations, caches and pools reach their steady size first.
      for (let i = 0; i < 200; i += PARALLEL)
        await Promise.all(Array.from({ length: PARALLEL }, () => cycle(wsUrl, stack.key)));
      const baseline = await settle();
      expect(bus.listenerCount()).toBe(0);

      let done = 0;
      let peakListeners = 0;
      await Promise.all(
        Array.from({ length: PARALLEL }, async () => {
          while (done < CYCLES) {
            done += 1;
            await cycle(wsUrl, stack.key);
            peakListeners = Math.max(peakListeners, bus.listenerCount());
          }
        }),
      );
      const after = await settle();
      server.off('upgrade', trackSocket);

      expect(peakListeners).toBeGreaterThan(0);
      expect(bus.listenerCount()).toBe(0);
      expect(server.listenerCount('upgrade')).toBe(upgradeListeners);
      console.log(
        `ws churn: ${CYCLES} cycles, heap ${(baseline / 2 ** 20).toFixed(1)} → ${(after / 2 ** 20).toFixed(1)} MiB, peak listeners ${peakListeners}`,
      );
      expect(after).toBeLessThan(baseline * 1.1);
    },
  );
});
