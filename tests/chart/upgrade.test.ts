import { renderBeside } from './fake-kube-api';
import { secretObject } from '../../tools/harness/manifests';
import { decode, findOne, render, type KubeObject } from './helm';

const namespace = 'social-posts-dev';
const keptKey = 'the-key-generated-at-first-install-0123456789abcdef0123';
const keptPassword = 'the-password-generated-at-first-install';

/** The Secret as the first install left it in the cluster, owned by the release. */
const installedSecret = secretObject(
  {
    name: 'social-posts',
    namespace,
    labels: { 'app.kubernetes.io/managed-by': 'Helm' },
    annotations: { 'meta.helm.sh/release-name': 'social-posts', 'meta.helm.sh/release-namespace': namespace },
  },
  'Opaque',
  { SECRET_KEY: keptKey, DB_PASSWORD: keptPassword },
);

/**
 * `helm template --dry-run=server` renders with `lookup` answered by a (fake) API server, as
 * `helm upgrade` does; plain `helm template` has no cluster and lookup returns nothing.
 */
describe('SECRET_KEY across upgrades', () => {
  const renderUpgrade = (set: Record<string, string> = {}): Promise<KubeObject[]> =>
    renderBeside([installedSecret], { values: ['values-dev.yaml'], namespace, set });

  it('When the release already has a Secret, then the upgrade keeps its generated SECRET_KEY and DB_PASSWORD', async () => {
    const secret = findOne(await renderUpgrade(), 'Secret', 'social-posts');
    expect(decode(secret, 'SECRET_KEY')).toBe(keptKey);
    expect(decode(secret, 'DB_PASSWORD')).toBe(keptPassword);
  });

  it('When the operator sets a new SECRET_KEY on upgrade, then the value wins over the kept one', async () => {
    const rotated = 'a-rotated-signing-key-chosen-by-the-operator-0123';
    const secret = findOne(await renderUpgrade({ 'secret.secretKey': rotated }), 'Secret', 'social-posts');
    expect(decode(secret, 'SECRET_KEY')).toBe(rotated);
    expect(decode(secret, 'DB_PASSWORD')).toBe(keptPassword);
  });

  it('When rendered without a cluster (plain helm template), then each render generates a different key', async () => {
    const key = async () =>
      decode(findOne(await render({ values: ['values-dev.yaml'], namespace }), 'Secret'), 'SECRET_KEY');
    expect(await key()).not.toBe(await key());
  });
});
