import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { dockerfile, dockerfileStages, instructions, repoRoot } from './helm';

const stages = dockerfileStages.map(([, lines]) => lines);
const runtime = stages.at(-1) ?? [];

describe('Dockerfile', () => {
  it('When the image is built, then the Node base image is pinned to an exact 24.x LTS slim release on Debian trixie, which engines allows', () => {
    expect(dockerfile).toContainEqual(
      expect.stringMatching(/^ARG NODE_IMAGE=node:24\.\d+\.\d+-trixie-slim$/),
    );
    const { engines } = JSON.parse(readFileSync(resolve(repoRoot, 'package.json'), 'utf8')) as {
      engines: { node: string };
    };
    expect(engines.node.split('||').map((range) => range.trim())).toContain('^24.11.0');
    for (const stage of stages) expect(stage[0]).toMatch(/^FROM \$\{NODE_IMAGE\} AS \w+$/);
  });

  it('When the image is built, then TypeScript compiles with dev dependencies and the runtime gets production dependencies only', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(dockerfile).toContain('RUN npm run build');
    expect(dockerfile).toContainEqual(expect.stringContaining('npm ci --omit=dev'));
    // The embedded database (optional dependencies) stays out: the chart always sets DB_HOSTNAME.
    expect(dockerfile).toContainEqual(expect.stringContaining('npm ci --omit=dev --omit=optional'));
  });

  it('When the image runs, then it holds only dist/ and node_modules from the build (no sources, no dev tooling)', () => {
    const copies = runtime.filter((line) => line.startsWith('COPY '));
    expect(copies).toEqual([
      'COPY package.json ./',
      'COPY --from=deps /app/node_modules ./node_modules',
      'COPY --from=build /app/dist ./dist',
    ]);
    expect(runtime).toContainEqual(
      expect.stringMatching(/^RUN rm -rf .*\/usr\/local\/lib\/node_modules\/npm/),
    );
  });

  it('When the image runs, then it is production mode, as a non-root numeric user, with node itself as PID 1', () => {
    expect(runtime).toContainEqual(expect.stringMatching(/^ENV NODE_ENV=production/));
    expect(runtime).toContain('USER 1000:1000');
    expect(runtime.at(-1)).toBe('CMD ["node", "dist/service/src/main.js"]');
  });

  it('When the build context is sent, then .dockerignore keeps local modules, build output, secrets and the chart out', () => {
    const ignored = instructions(readFileSync(resolve(repoRoot, '.dockerignore'), 'utf8'));
    expect(ignored).toEqual(
      expect.arrayContaining(['**/node_modules', 'dist', '.git', '.env', '.tools', 'chart']),
    );
  });
});
