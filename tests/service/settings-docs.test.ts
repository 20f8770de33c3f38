import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  envExample,
  ENV_EXAMPLE,
  SETTINGS_DOC,
  settingsDocWithTable,
  TABLE_START,
} from '../../tools/settings-docs';
import { documentedVariables, loadSettings } from '../../service/src/settings';

describe('The settings docs', () => {
  it('When .env.example is read, then it is the one built from the settings table (`tsx tools/settings-docs.ts` rewrites it)', () => {
    expect(readFileSync(ENV_EXAMPLE, 'utf8')).toBe(envExample());
  });

  it('When docs/settings.md is read, then its settings table is the one built from the settings table (`tsx tools/settings-docs.ts` rewrites it)', () => {
    const doc = readFileSync(SETTINGS_DOC, 'utf8');
    expect(doc).toBe(settingsDocWithTable(doc));
  });

  it('When README.md is read, then it holds no generated table (the generators write into docs/)', () => {
    const readme = readFileSync(join(__dirname, '..', '..', 'README.md'), 'utf8');
    expect(readme).not.toContain(TABLE_START);
  });

  it('When .env.example is loaded as it stands, then the service starts with exactly the defaults of an empty environment', () => {
    const fromFile = Object.fromEntries(
      readFileSync(ENV_EXAMPLE, 'utf8')
        .split('\n')
        .filter((line) => /^[A-Z_]+=/.test(line))
        .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
    );
    expect(Object.keys(fromFile)).toEqual(documentedVariables().map((v) => v.name));
    // Both make a random SECRET_KEY of their own; everything else must be the same.
    const withoutKey = (env: Record<string, string>) => ({ ...loadSettings(env), secretKey: 'random' });
    expect(withoutKey(fromFile)).toEqual(withoutKey({}));
  });
});
