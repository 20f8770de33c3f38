/**
 * The proof table: what each suite sent and observed, one JSON file per suite in the report folder
 * (K8S_REPORT_DIR), printed as `key | value` rows. CLI: `tsx k8s-tests/report.ts <folder>`.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** A suite's figures as `<folder>/<name>.json`, when the runner gave a folder. */
export function writeReport(name: string, figures: unknown): void {
  const dir = process.env.K8S_REPORT_DIR;
  if (dir) writeFileSync(join(dir, `${name}.json`), JSON.stringify(figures, null, 2));
}

/** Nested objects become dotted keys; a list of plain values, or a list item of them, stays on one row. */
function flatten(value: unknown, key: string, rows: [string, string][], item = false): void {
  const plain = (v: unknown) => typeof v !== 'object' || v === null;
  if (Array.isArray(value) && value.every(plain)) rows.push([key, value.join(', ')]);
  else if (Array.isArray(value))
    value.forEach((inner, i) => {
      flatten(inner, `${key}.${String(i)}`, rows, true);
    });
  else if (item && !plain(value) && Object.values(value as object).every(plain))
    rows.push([
      key,
      Object.entries(value as object)
        .map(([name, v]) => `${name}=${String(v)}`)
        .join(', '),
    ]);
  else if (!plain(value))
    for (const [name, inner] of Object.entries(value as object)) flatten(inner, `${key}.${name}`, rows);
  else rows.push([key, String(value)]);
}

export function formatReport(dir: string): string {
  const rows: [string, string][] = [];
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort())
    flatten(JSON.parse(readFileSync(join(dir, file), 'utf8')), file.slice(0, -'.json'.length), rows);
  if (rows.length === 0) return `Proof table: no report was written in ${dir}`;
  const width = Math.max(...rows.map(([key]) => key.length));
  return ['Proof table', ...rows.map(([key, value]) => `| ${key.padEnd(width)} | ${value}`)].join('\n');
}

if (require.main === module) {
  const dir = process.argv[2];
  if (!dir) throw new Error('usage: tsx k8s-tests/report.ts <report folder>');
  process.stdout.write(`${formatReport(dir)}\n`);
}
