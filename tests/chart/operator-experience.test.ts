import { environmentOptions, environments, findOne, installNotes, must, renderEnvironment } from './helm';

describe('helm test', () => {
  it.each(environments)(
    'When the %s values are rendered, then a test hook pod checks /healthz/ready through the Service',
    async (environment) => {
      const pod = findOne(await renderEnvironment(environment), 'Pod', 'social-posts-test-ready');
      expect(pod.metadata?.annotations?.['helm.sh/hook']).toBe('test');
      const container = must(pod.spec?.containers[0], 'test container');
      expect(container.command?.at(-1)).toBe('http://social-posts:80/healthz/ready');
      expect(pod.spec?.restartPolicy).toBe('Never');
      // The API's NetworkPolicy admits pods with this label.
      expect(pod.metadata?.labels?.['social-posts-client']).toBe('true');
      expect(pod.spec?.securityContext?.runAsNonRoot).toBe(true);
    },
  );
});

describe('NOTES.txt', () => {
  it('When prod is installed, then the notes show the HTTPS API and docs addresses, the probes and the 429 controller setting', async () => {
    const notes = await installNotes(environmentOptions('prod'));
    expect(notes).toContain('https://api.social-posts.example.com/');
    expect(notes).toContain('https://api.social-posts.example.com/docs');
    expect(notes).toContain('/healthz/live');
    expect(notes).toContain('/healthz/ready');
    expect(notes).toContain('limit-req-status-code: "429"');
    expect(notes).toContain('helm test social-posts -n social-posts-prod');
    expect(notes).toContain('Secret "social-posts-secrets"');
  });

  it('When dev is installed, then the notes use http, name the in-chart PostgreSQL and warn that its claim outlives uninstall', async () => {
    const notes = await installNotes(environmentOptions('dev'));
    expect(notes).toContain('http://social-posts.localtest.me/docs');
    expect(notes).toContain('social-posts-postgresql');
    expect(notes).toContain('outlives `helm uninstall`');
    expect(notes).toContain("SECRET_KEY kept from the release's Secret, or generated at first install");
  });
});
