// ESLint holds what Prettier does not: typescript-eslint's recommended rules, and the size of
// functions and files in src/ and packages/*/src/ (a function over 100 lines is split into named steps; a file
// over 600 lines into files of one concern each; the Redis store's Lua scripts are data, not code).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/** Files the size rules do not hold, each with why; test/unit/layout.test.ts names the same ones. */
export const sizeExemptions = {
  'src/store/redis-scripts.ts': "the Redis store's Lua scripts: data, not code",
};

export default tseslint.config(
  {
    ignores: ['**/node_modules/', 'dist/', 'coverage/', 'data/', 'bench/profiles/', 'examples/typed-client/src/gql/'],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        setImmediate: 'readonly',
        clearImmediate: 'readonly',
        queueMicrotask: 'readonly',
        URL: 'readonly',
        URLSearchParams: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        performance: 'readonly',
        structuredClone: 'readonly',
        fetch: 'readonly',
        Response: 'readonly',
        Request: 'readonly',
        Headers: 'readonly',
        WebSocket: 'readonly',
        crypto: 'readonly',
        globalThis: 'readonly',
      },
    },
    rules: {
      // A binding assigned once after closures that read it were made (the composition root's metrics).
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
    },
  },
  {
    // Tests and benches read JSON answers whose shape the assertion checks.
    files: ['test/**', 'packages/*/test/**', 'bench/**', 'examples/**', 'scripts/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off', 'no-useless-assignment': 'off', 'prefer-const': 'off' },
  },
  {
    files: ['src/**/*.ts', 'packages/*/src/**/*.ts'],
    rules: {
      'max-lines-per-function': ['error', { max: 100, skipBlankLines: false, skipComments: false, IIFEs: true }],
      'max-lines': ['error', { max: 600, skipBlankLines: false, skipComments: false }],
    },
  },
  {
    files: Object.keys(sizeExemptions),
    rules: { 'max-lines-per-function': 'off', 'max-lines': 'off' },
  },
);
