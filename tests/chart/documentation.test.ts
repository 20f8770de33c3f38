import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parse } from 'yaml';
import { chartDir } from './helm';

const valuesPath = resolve(chartDir, 'values.yaml');
const valuesText = readFileSync(valuesPath, 'utf8');
const readme = readFileSync(resolve(chartDir, 'README.md'), 'utf8');
const documented = [...valuesText.matchAll(/^\s*## @param (\S+) /gm)].map((match) => match[1] ?? '');
// The generator and its configuration exactly as `npm run chart:readme` runs them.
const generator = require.resolve('@bitnami/readme-generator-for-helm/bin/index.js');
const generatorConfig = resolve(chartDir, '..', 'tools', 'readme-generator.json');

/**
 * Dotted paths of every value: objects are descended, and so are lists unless all their items are
 * strings (such a list is one value to the generator); other scalars are leaves.
 */
function leafPaths(value: unknown, prefix = ''): string[] {
  if (Array.isArray(value)) {
    if (value.every((item) => typeof item === 'string')) return [prefix];
    return value.flatMap((item: unknown, index) => leafPaths(item, `${prefix}[${index.toString()}]`));
  }
  if (value === null || typeof value !== 'object') return [prefix];
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length === 0) return [prefix];
  return entries.flatMap(([key, child]) => leafPaths(child, prefix ? `${prefix}.${key}` : key));
}

/** The README as the generator leaves it after rewriting its Values section from values.yaml. */
function regenerated(): string {
  const dir = mkdtempSync(join(tmpdir(), 'chart-readme-'));
  try {
    const copy = join(dir, 'README.md');
    writeFileSync(copy, readme);
    execFileSync(
      process.execPath,
      [generator, '--values', valuesPath, '--readme', copy, '--config', generatorConfig],
      { stdio: 'pipe' },
    );
    return readFileSync(copy, 'utf8');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('Documentation of the values', () => {
  it('When values.yaml is read, then every value is documented where it stands (## @param on it or on a parent)', () => {
    const undocumented = leafPaths(parse(valuesText)).filter(
      (path) => !documented.some((param) => path === param || path.startsWith(`${param}.`)),
    );
    expect(undocumented).toEqual([]);
  });

  it('When chart/README.md is read, then its values table lists every documented value', () => {
    expect(documented.length).toBeGreaterThan(50);
    const rows = readme
      .split('\n')
      .map((line) => /^\| `([^`]+)` +\|/.exec(line)?.[1])
      .filter((name) => name !== undefined);
    expect(documented.filter((param) => !rows.includes(param))).toEqual([]);
  });

  it('When chart/README.md is read, then its Values section is the one readme-generator-for-helm builds from values.yaml (descriptions and defaults included; `npm run chart:readme` rewrites it)', () => {
    expect(readme).toBe(regenerated());
  });

  it('When chart/README.md is read, then it covers helm install per environment, skaffold and the ingress-nginx operator notes', () => {
    for (const environment of ['dev', 'staging', 'prod'])
      expect(readme).toContain(`-f chart/values-${environment}.yaml`);
    expect(readme).toContain('limit-req-status-code: "429"');
    expect(readme).toContain('externalTrafficPolicy: Local');
    expect(readme).toContain('use-forwarded-headers');
    expect(readme).toContain('skaffold dev');
    expect(readme).toMatch(/ingress-nginx is retired/);
  });

  it('When chart/README.md is read, then it explains the move off ingress-nginx: values, counting, client address and the measured side-by-side', () => {
    const start = readme.indexOf('## Moving off ingress-nginx');
    expect(start).toBeGreaterThan(0);
    const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
    for (const value of ['gateway.enabled', 'gateway.parentRef', 'gateway.rateLimit.implementation'])
      expect(section).toContain(value);
    for (const implementation of ['nginx-gateway-fabric', 'envoy-gateway', '`none`'])
      expect(section).toContain(implementation);
    // How each counts, and where the client address comes from.
    expect(section).toMatch(/per nginx \(data plane\) replica/);
    expect(section).toMatch(/per route match/);
    expect(section).toMatch(/Redis/);
    expect(section).toContain('externalTrafficPolicy: Local');
    expect(section).toContain('clientIPDetection');
    // The side-by-side of both paths as the suite measured them, and the /users decision.
    expect(section).toContain(
      '| Case | Ingress objects (ingress-nginx) | HTTPRoutes + RateLimitPolicy (NGINX Gateway Fabric) |',
    );
    expect(section).toMatch(/308 to `\/users\/`/);
  });
});
