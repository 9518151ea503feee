import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { defineConfig } from 'vitest/config';

// dist/.gitkeep is committed so that `go build` can embed dist/ before the
// frontend is built; Vite empties dist/ on every build, so put it back.
const keepDist = {
  name: 'keep-dist-gitkeep',
  closeBundle() {
    writeFileSync(resolve(__dirname, 'dist/.gitkeep'), '');
  },
};

export default defineConfig({
  plugins: [keepDist],
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2020',
    sourcemap: false,
    chunkSizeWarningLimit: 300,
  },
  server: {
    // `npm run dev` against a running `verdict serve`
    proxy: { '/api': 'http://127.0.0.1:8177', '/media': 'http://127.0.0.1:8177' },
  },
  test: {
    environment: 'jsdom',
    include: ['test/**/*.test.ts'],
    globals: true,
  },
});
