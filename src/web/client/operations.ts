// The GraphQL operations the tracking page runs, and the shapes of what they answer.
import type { Point } from './map.js';

export const TRACK = /* GraphQL */ `
  query Track($uid: ID!) {
    delivery(uid: $uid) {
      uid
      group
      status
      estimatedDropoffAt
      pickup {
        name
        address {
          street
          number
          city
          latitude
          longitude
        }
      }
      dropoff {
        name
        address {
          street
          number
          city
          latitude
          longitude
        }
      }
      courier {
        name
        location {
          lat
          lng
        }
        vehicle {
          make
          model
        }
      }
      events(first: 100) {
        edges {
          node {
            name
            status
            statusText
            stale
            receivedAt
            courierLocation {
              lat
              lng
            }
          }
        }
      }
    }
  }
`;

export const FOLLOW = /* GraphQL */ `
  subscription Follow($uid: ID!) {
    deliveryUpdated(uid: $uid) {
      name
      status
      statusText
      receivedAt
      courierLocation {
        lat
        lng
      }
    }
  }
`;

export const PIN = /* GraphQL */ `
  subscription Pin($uid: ID!) {
    courierLocation(uid: $uid) {
      milestone
      location {
        lat
        lng
      }
      courier {
        name
      }
    }
  }
`;

export const TOKEN_SCOPE = /* GraphQL */ `
  query TokenScope {
    clientToken {
      uids
      expiresAt
    }
  }
`;

export const BOOK = /* GraphQL */ `
  mutation Book($input: DeliveryInput!, $idempotencyKey: String) {
    createDelivery(input: $input, idempotencyKey: $idempotencyKey) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
        }
      }
      ... on ValidationError {
        fields {
          path
          message
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;

export interface Address {
  street: string | null;
  number: string | null;
  city: string | null;
  latitude: number | null;
  longitude: number | null;
}
export interface TrackedDelivery {
  uid: string;
  group: string;
  status: string;
  estimatedDropoffAt: string | null;
  pickup: { name: string | null; address: Address | null };
  dropoff: { name: string | null; address: Address | null };
  courier: {
    name: string | null;
    location: Point | null;
    vehicle: { make: string | null; model: string | null } | null;
  } | null;
  events: { edges: Array<{ node: DeliveryEvent }> };
}
export interface DeliveryEvent {
  name: string;
  status: string;
  statusText: string | null;
  stale?: boolean;
  receivedAt: string;
  courierLocation: Point | null;
}
export type BookResult =
  | { __typename: 'MutationCreateDeliverySuccess'; data: { uid: string } }
  | { __typename: 'ValidationError'; code: string; message: string; fields: Array<{ path: string; message: string }> }
  | { __typename: string; code: string; message: string };
