// Apollo Client (tested with `@apollo/client` 3) over HTTP with automatic persisted
// queries, and over graphql-ws for subscriptions: split() sends each operation
// down the link its kind needs. Books a delivery, reads it, and follows it to its end.
// Node's own ES modules need these index.js paths of the @apollo/client tested; with a bundler, '@apollo/client' will do.
import { ApolloClient, HttpLink, InMemoryCache, gql, split } from '@apollo/client/core/index.js';
import { createPersistedQueryLink } from '@apollo/client/link/persisted-queries/index.js';
import { GraphQLWsLink } from '@apollo/client/link/subscriptions/index.js';
import { getMainDefinition } from '@apollo/client/utilities/index.js';
import { createClient } from 'graphql-ws';
import { createHash } from 'node:crypto';
import WebSocket from 'ws';

const url = `http://127.0.0.1:${process.env.PORT ?? 4000}/graphql`;
const key = 'sk_test_demo_merchant';

// In a browser: crypto-hash's sha256, and no webSocketImpl (the browser has its own WebSocket).
const sha256 = (text) => createHash('sha256').update(text).digest('hex');
const http = createPersistedQueryLink({ sha256 }).concat(
  new HttpLink({ uri: url, headers: { authorization: `Bearer ${key}` } }),
);
// Over WebSocket the key travels in connection_init, not in a header.
const ws = createClient({
  url: url.replace(/^http/, 'ws'),
  webSocketImpl: WebSocket,
  connectionParams: { authorization: `Bearer ${key}` },
});
const isSubscription = ({ query }) => {
  const definition = getMainDefinition(query);
  return definition.kind === 'OperationDefinition' && definition.operation === 'subscription';
};
const client = new ApolloClient({
  link: split(isSubscription, new GraphQLWsLink(ws), http),
  cache: new InMemoryCache({
    // Every type that implements Error, so that `... on Error` matches each of them.
    possibleTypes: {
      Error: [
        'BookingOutcomeUnknownError',
        'CancelRefusedError',
        'IdempotencyConflictError',
        'KeyLinkRefusedError',
        'NotCancelableError',
        'NotFoundError',
        'ValidationError',
      ],
    },
  }),
});

const BOOK = gql`
  mutation Book($input: DeliveryInput!) {
    createDelivery(input: $input) {
      ... on MutationCreateDeliverySuccess {
        data {
          uid
          status
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;
const READ = gql`
  query Read($uid: ID!) {
    delivery(uid: $uid) {
      uid
      status
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

const input = {
  pickup: {
    name: 'Ada Shop',
    email: 'shop@example.com',
    address: { street: 'Main St', city: 'Springfield', country: 'US' },
  },
  dropoff: { name: 'Grace', address: { street: 'Elm St', city: 'Springfield', country: 'US' } },
  mode: 'NOW',
};
const booked = (await client.mutate({ mutation: BOOK, variables: { input } })).data.createDelivery;
if (!booked.data) throw new Error(`${booked.code}: ${booked.message}`);
const { uid } = booked.data;
const { data } = await client.query({ query: READ, variables: { uid } });
console.log('apollo read', data.delivery.uid, data.delivery.status);

// The subscription ends by itself once nothing can follow (delivered, returned, or canceled for good).
await new Promise((resolve, reject) => {
  client.subscribe({ query: FOLLOW, variables: { uid } }).subscribe({
    next: ({ data, errors }) => {
      if (errors) reject(new Error(errors[0].message));
      else console.log('apollo update', data.deliveryUpdated.status);
    },
    error: reject,
    complete: resolve,
  });
});
client.stop();
await ws.dispose();
