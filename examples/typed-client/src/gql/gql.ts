/* eslint-disable */
import * as types from './graphql.js';



/**
 * Map of all GraphQL operations in the project.
 *
 * This map has several performance disadvantages:
 * 1. It is not tree-shakeable, so it will include all operations in the project.
 * 2. It is not minifiable, so the string of a GraphQL query will be multiple times inside the bundle.
 * 3. It does not support dead code elimination, so it will add unused operations.
 *
 * Therefore it is highly recommended to use the babel or swc plugin for production.
 * Learn more about it here: https://the-guild.dev/graphql/codegen/plugins/presets/preset-client#reducing-bundle-size
 */
type Documents = {
    "\n  mutation BookDelivery($input: DeliveryInput!, $idempotencyKey: String) {\n    createDelivery(input: $input, idempotencyKey: $idempotencyKey) {\n      __typename\n      ... on MutationCreateDeliverySuccess {\n        data {\n          uid\n          status\n          trackingUrl\n        }\n      }\n      ... on ValidationError {\n        fields {\n          path\n          message\n        }\n      }\n      ... on Error {\n        code\n        message\n      }\n    }\n  }\n": typeof types.BookDeliveryDocument,
    "\n  subscription FollowDelivery($uid: ID!) {\n    deliveryUpdated(uid: $uid) {\n      status\n      name\n      receivedAt\n      courierLocation {\n        lat\n        lng\n      }\n    }\n  }\n": typeof types.FollowDeliveryDocument,
};
const documents: Documents = {
    "\n  mutation BookDelivery($input: DeliveryInput!, $idempotencyKey: String) {\n    createDelivery(input: $input, idempotencyKey: $idempotencyKey) {\n      __typename\n      ... on MutationCreateDeliverySuccess {\n        data {\n          uid\n          status\n          trackingUrl\n        }\n      }\n      ... on ValidationError {\n        fields {\n          path\n          message\n        }\n      }\n      ... on Error {\n        code\n        message\n      }\n    }\n  }\n": types.BookDeliveryDocument,
    "\n  subscription FollowDelivery($uid: ID!) {\n    deliveryUpdated(uid: $uid) {\n      status\n      name\n      receivedAt\n      courierLocation {\n        lat\n        lng\n      }\n    }\n  }\n": types.FollowDeliveryDocument,
};

/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  mutation BookDelivery($input: DeliveryInput!, $idempotencyKey: String) {\n    createDelivery(input: $input, idempotencyKey: $idempotencyKey) {\n      __typename\n      ... on MutationCreateDeliverySuccess {\n        data {\n          uid\n          status\n          trackingUrl\n        }\n      }\n      ... on ValidationError {\n        fields {\n          path\n          message\n        }\n      }\n      ... on Error {\n        code\n        message\n      }\n    }\n  }\n"): typeof import('./graphql.js').BookDeliveryDocument;
/**
 * The graphql function is used to parse GraphQL queries into a document that can be used by GraphQL clients.
 */
export function graphql(source: "\n  subscription FollowDelivery($uid: ID!) {\n    deliveryUpdated(uid: $uid) {\n      status\n      name\n      receivedAt\n      courierLocation {\n        lat\n        lng\n      }\n    }\n  }\n"): typeof import('./graphql.js').FollowDeliveryDocument;


export function graphql(source: string) {
  return (documents as any)[source] ?? {};
}
