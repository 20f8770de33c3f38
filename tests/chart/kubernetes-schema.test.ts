import { allRenderings, environments, renderEnvironment, type KubeObject } from './helm';
import { schemaProblems, unknownFieldProblems } from './kubernetes-schemas';
import { treeVersions } from '../../tools/harness/releases';

describe('Kubernetes OpenAPI schemas', () => {
  it.each(allRenderings)(
    'When %s are rendered, then every object is valid against its Kubernetes schema',
    async (_name, renderObjects) => {
      const objects = await renderObjects();
      expect(objects.length).toBeGreaterThan(5);
      expect(schemaProblems(objects)).toEqual([]);
    },
  );

  it.each(allRenderings)(
    'When %s are rendered, then no object carries a field its Kubernetes API type lacks',
    async (_name, renderObjects) => {
      expect(unknownFieldProblems(await renderObjects())).toEqual([]);
    },
  );

  it('When a field name is misspelt, then the field check names it', () => {
    const misspelt = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'x' },
      spec: { selectr: { app: 'x' } },
    };
    expect(unknownFieldProblems([misspelt as KubeObject])).toEqual([
      expect.stringContaining('\'"selectr"\' does not exist'),
    ]);
  });

  it('When an object breaks its schema, then the check reports it (the validators are live)', () => {
    const broken = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'x' },
      spec: { ports: [{ port: 'eighty' }] },
    };
    expect(schemaProblems([broken as KubeObject])).toEqual([expect.stringContaining('port')]);
    expect(schemaProblems([{ apiVersion: 'v1', kind: 'Unknown', metadata: { name: 'y' } }])).toEqual([
      expect.stringContaining('kubernetes-models has no schema'),
    ]);
  });
});

describe('Labels', () => {
  it.each(environments)(
    'When the %s values are rendered, then every object carries the app.kubernetes.io labels',
    async (environment) => {
      for (const object of await renderEnvironment(environment)) {
        expect(object.metadata.labels).toMatchObject({
          'app.kubernetes.io/name': 'social-posts',
          'app.kubernetes.io/instance': 'social-posts',
          'app.kubernetes.io/managed-by': 'Helm',
          'app.kubernetes.io/version': treeVersions().app,
          'helm.sh/chart': `social-posts-${treeVersions().chart}`,
        });
      }
    },
  );
});
