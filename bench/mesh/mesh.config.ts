// GraphQL Mesh v1 compose configuration: the "what a user would pick instead"
// contender of the benchmark. It turns openapi/upstream.yaml into a GraphQL
// subgraph (every operationId becomes a root field: GET -> Query, others ->
// Mutation) and composes it into a supergraph that Hive Gateway serves.
//
// Compose with (from bench/mesh/):
//   UPSTREAM_URL=http://127.0.0.1:4010/api/v1 npx mesh-compose -c mesh.config.ts -o supergraph.graphql
// (start.mjs does exactly that, then serves the result in-process.)
//
// The endpoint is baked into the supergraph's @transport directive at compose
// time, so a different UPSTREAM_URL needs a new compose.
import { defineConfig } from '@graphql-mesh/compose-cli';
import { loadOpenAPISubgraph } from '@omnigraph/openapi';

const endpoint = process.env.UPSTREAM_URL;
if (!endpoint) {
  throw new Error('UPSTREAM_URL is not set (e.g. http://127.0.0.1:4010/api/v1)');
}

export const composeConfig = defineConfig({
  subgraphs: [
    {
      sourceHandler: loadOpenAPISubgraph('Upstream', {
        // Resolved relative to this file's directory (mesh-compose's cwd is set to it by start.mjs).
        source: '../../openapi/upstream.yaml',
        endpoint,
        // Forward the caller's bearer key untouched. String interpolation is
        // evaluated per upstream call by the gateway at run time against the
        // GraphQL context; Hive Gateway's context.headers holds the incoming
        // HTTP request headers with lower-case names. (A function would not
        // survive composition: the options are serialised into the supergraph.)
        operationHeaders: {
          Authorization: '{context.headers.authorization}',
        },
      }),
    },
  ],
});
