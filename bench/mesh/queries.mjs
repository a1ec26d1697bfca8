// The GraphQL operations the Mesh contender answers, as its generated schema names them.
export { MESH_QUERY as MESH_SINGLE_READ, meshBatchQuery } from './smoke.mjs';
