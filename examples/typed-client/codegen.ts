// graphql-codegen configuration: the client preset reads the facade's printed
// schema and every graphql(`...`) call in src/, and writes src/gql/ — the
// typed graphql() function plus one result/variables type per operation.
// `npm run codegen` regenerates it; `npm run codegen:check` fails when the
// committed copy is stale.
import type { CodegenConfig } from '@graphql-codegen/cli';

// codegen:check generates into a temporary folder and compares; everyone else
// writes straight into src/gql/ (the trailing slash tells the preset it is a folder).
const outputDir = process.env.CODEGEN_OUT_DIR ?? 'src/gql/';

const config: CodegenConfig = {
  schema: '../../schema.graphql',
  documents: ['src/**/*.ts', '!src/gql/**'],
  // No operation found is a mistake here, not something to skip quietly.
  ignoreNoDocuments: false,
  generates: {
    [outputDir]: {
      preset: 'client',
      presetConfig: {
        // The example has no fragments; with none, masking only adds a file.
        fragmentMasking: false,
      },
      config: {
        // Documents are TypedDocumentString objects: plain strings that carry
        // their result and variables types, so fetch and graphql-ws can send
        // them as they are, with no GraphQL client library and no graphql-tag.
        documentMode: 'string',
        // Enums as string unions ('DROPOFF_COMPLETE' | ...): nothing at run time.
        enumsAsTypes: true,
        // src/gql/graphql.ts keeps only what the operations use (their results and
        // variables, and the enums, inputs and scalars they reach), not the whole schema.
        onlyOperationTypes: true,
        useTypeImports: true,
        // Relative imports end in .js, as NodeNext module resolution wants.
        emitLegacyCommonJSImports: false,
        // Every custom scalar of schema.graphql must be listed here: an unknown
        // one is an error instead of a silent `any`.
        strictScalars: true,
        scalars: {
          Date: 'string', // "YYYY-MM-DD"
          DateTime: 'string', // "YYYY-MM-DDTHH:MM:SSZ"
          Decimal: 'string', // "12.50": exact, never a binary float
          JSON: 'unknown',
          _Any: 'unknown', // federation's entity representation (gateways send it; docs/federation.md)
        },
      },
    },
  },
};

export default config;
