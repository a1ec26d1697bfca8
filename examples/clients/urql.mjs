// urql (tested with `@urql/core` 5; the React, Vue and Svelte bindings take the same
// client) over HTTP, and over graphql-ws for subscriptions through
// subscriptionExchange. Reads availability, books a delivery and follows it to its end.
import { Client, cacheExchange, fetchExchange, gql, subscriptionExchange } from '@urql/core';
import { createClient } from 'graphql-ws';
import { onEnd, pipe, subscribe } from 'wonka';
import WebSocket from 'ws';

const url = `http://127.0.0.1:${process.env.PORT ?? 4000}/graphql`;
const key = 'sk_test_demo_merchant';

// Over WebSocket the key travels in connection_init, not in a header. In a browser: no webSocketImpl.
const ws = createClient({
  url: url.replace(/^http/, 'ws'),
  webSocketImpl: WebSocket,
  connectionParams: { authorization: `Bearer ${key}` },
});
const client = new Client({
  url,
  fetchOptions: { headers: { authorization: `Bearer ${key}` } },
  exchanges: [
    cacheExchange,
    fetchExchange,
    subscriptionExchange({
      forwardSubscription: (request) => ({
        subscribe: (sink) => ({ unsubscribe: ws.subscribe({ ...request, query: request.query ?? '' }, sink) }),
      }),
    }),
  ],
});

const AVAILABILITY = gql`
  query Availability {
    availability {
      group
      available
    }
  }
`;
const BOOK = gql`
  mutation Book($input: DeliveryInput!) {
    createDelivery(input: $input) {
      ... on MutationCreateDeliverySuccess {
        data {
          uid
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;
const FOLLOW = gql`
  subscription Follow($uid: ID!) {
    deliveryUpdated(uid: $uid) {
      name
      status
    }
  }
`;

const availability = await client.query(AVAILABILITY, {}).toPromise();
if (availability.error) throw availability.error;
for (const { group, available } of availability.data.availability) console.log('urql availability', group, available);

const input = {
  pickup: {
    name: 'Ada Shop',
    email: 'shop@example.com',
    address: { street: 'Main St', city: 'Springfield', country: 'US' },
  },
  dropoff: { name: 'Grace', address: { street: 'Elm St', city: 'Springfield', country: 'US' } },
  mode: 'NOW',
};
const booked = await client.mutation(BOOK, { input }).toPromise();
if (booked.error) throw booked.error;
const result = booked.data.createDelivery;
if (!result.data) throw new Error(`${result.code}: ${result.message}`);

// The subscription ends by itself once nothing can follow (delivered, returned, or canceled for good): wonka, urql's
// stream library, says when its source ends.
await new Promise((resolve, reject) =>
  pipe(
    client.subscription(FOLLOW, { uid: result.data.uid }),
    onEnd(resolve),
    subscribe(({ data, error }) => {
      if (error) reject(error);
      else console.log('urql update', data.deliveryUpdated.status);
    }),
  ),
);
await ws.dispose();
