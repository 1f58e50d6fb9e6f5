// ESLint: typescript-eslint's recommended type-checked rules on the TypeScript, the core recommended rules on
// the plain .mjs scripts and fixtures. Type-aware rules read the compiled declarations of the packages (the
// tests import them by name), so lint after `tsc -b`, as `pretest` does.
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

const unusedVars = { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_' };

export default defineConfig(
  {
    ignores: ['**/dist/**', '**/node_modules/**', 'packages/tidal-query/src/text/unicode61-tables.ts', 'bench/results/**'],
  },
  {
    linterOptions: { reportUnusedDisableDirectives: 'error' },
  },
  {
    files: ['packages/*/src/**/*.ts', 'packages/*/test/**/*.ts', 'test/**/*.ts', 'bench/src/**/*.ts'],
    extends: [js.configs.recommended, tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: {
        // Every linted .ts file belongs to one of these: a package's sources, the bench, or the tests.
        project: ['packages/*/tsconfig.json', 'bench/tsconfig.json', 'tsconfig.test.json'],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      // `x != null` is the one loose comparison the code uses: null or undefined, deliberately.
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      '@typescript-eslint/no-unused-vars': ['error', { ...unusedVars, destructuredArrayIgnorePattern: '^_' }],
      // `typeof import('prom-client')` types an optional dependency that is loaded lazily; the code writes inline `type`.
      '@typescript-eslint/consistent-type-imports': ['error', { disallowTypeAnnotations: false, fixStyle: 'inline-type-imports' }],
      // Passing a caught `unknown` on unchanged is the code's habit; only rejecting with a known non-Error is flagged.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      // Off: an `async` method without `await` is how a Promise-returning contract (API, fastify handler, fake) is met.
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    files: ['packages/*/test/**/*.ts', 'test/**/*.ts'],
    rules: {
      // Off in tests: vitest's asymmetric matchers (expect.any, expect.stringMatching) are typed `any`.
      '@typescript-eslint/no-unsafe-assignment': 'off',
    },
  },
  {
    files: ['scripts/**/*.mjs', 'test/fixtures/**/*.mjs', 'packages/*/test/**/*.mjs'],
    extends: [js.configs.recommended],
    languageOptions: { globals: { ...globals.node } },
    rules: {
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      'no-unused-vars': ['error', unusedVars],
    },
  },
);
