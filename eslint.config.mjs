// ESLint (flat config): the recommended JavaScript and typescript-eslint rules, and few others.
// Formatting is Prettier's job (`npm run format`), not ESLint's. `npm run lint` runs both checks.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', '.tools/', '.stack/', '.stack-epp/', '.cache/', 'coverage/', 'bench/results/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      // A `let` that a closure reads before its one assignment stays a `let`.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // The header, request-id and JSON validators match control characters on purpose.
      'no-control-regex': 'off',
    },
  },
  {
    files: ['test/**/*.ts'],
    languageOptions: { globals: { ...globals.jest } },
    rules: {
      // Tests reach into untyped JSON answers (`(body.messages as any)[0].content`); src/ may not.
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
);
