/**
 * The "## Values" section of chart/README.md, built from chart/values.yaml: one table per
 * `## @section`, one row per `## @param <path> <description>`, the default read from the values
 * themselves. tests/chart/documentation.test.ts checks the README against it, so the table cannot
 * drift from the file it describes.
 *
 * CLI: `tsx tools/chart-values-table.ts` rewrites the section in place.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';

const chartDir = join(__dirname, '..', 'chart');
export const VALUES_HEADING = '## Values';

/** A default as the table shows it: scalars bare, "" for an empty string, objects as JSON. */
function formatDefault(value: unknown): string {
  if (typeof value === 'string') return value === '' ? '""' : value;
  const json = (v: unknown): string => {
    if (Array.isArray(v)) return `[${v.map(json).join(', ')}]`;
    if (v !== null && typeof v === 'object')
      return `{${Object.entries(v)
        .map(([key, child]) => `${JSON.stringify(key)}: ${json(child)}`)
        .join(', ')}}`;
    return JSON.stringify(v);
  };
  return json(value);
}

function valueAt(values: unknown, path: string): unknown {
  return path
    .split('.')
    .reduce<unknown>((node, key) => (node as Record<string, unknown> | undefined)?.[key], values);
}

/** The section's markdown, from its heading to the end of the file (it is the README's last). */
export function valuesSection(valuesText: string): string {
  const values: unknown = parse(valuesText);
  const out = [
    VALUES_HEADING,
    '',
    'Every value is documented in `values.yaml` where it stands (`## @param`); the same list:',
  ];
  for (const line of valuesText.split('\n')) {
    const section = /^## @section (.+)$/.exec(line);
    if (section) {
      out.push('', `### ${section[1] ?? ''}`, '', '| Name | Description | Default |', '|---|---|---|');
      continue;
    }
    const param = /^\s*## @param (\S+) (.+)$/.exec(line);
    if (param) {
      const [, path = '', description = ''] = param;
      out.push(
        `| \`${path}\` | ${description.replaceAll('|', '\\|')} | \`${formatDefault(valueAt(values, path))}\` |`,
      );
    }
  }
  return `${out.join('\n')}\n`;
}

export function readmeWithValuesSection(readme: string, valuesText: string): string {
  const start = readme.indexOf(`\n${VALUES_HEADING}\n`);
  if (start < 0) throw new Error(`chart/README.md has no "${VALUES_HEADING}" section`);
  return `${readme.slice(0, start + 1)}${valuesSection(valuesText)}`;
}

if (require.main === module) {
  const readmePath = join(chartDir, 'README.md');
  const valuesText = readFileSync(join(chartDir, 'values.yaml'), 'utf8');
  writeFileSync(readmePath, readmeWithValuesSection(readFileSync(readmePath, 'utf8'), valuesText));
}
