/**
 * What the bench scripts share: their options, how they print (progress lines, figures as Markdown
 * tables), what the figures were measured on, and how they end on an error.
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { knexTo } from '../harness/postgres';

/** The options read through option() and flag() so far, the ones onlyKnownOptions accepts. */
const read = new Map<string, 'string' | 'boolean'>();

/** Option `name` as parseArgs reads the command line; the strict check of every option is runMain's. */
function given(name: string, type: 'string' | 'boolean'): string | boolean | undefined {
  read.set(name, type);
  const { values } = parseArgs({ args: process.argv.slice(2), options: { [name]: { type } }, strict: false });
  return values[name];
}

/** `--name value` from the command line, or the fallback. */
export function option(name: string, fallback: string): string {
  const value = given(name, 'string');
  return typeof value === 'string' ? value : fallback;
}

/** Whether `--name`, an option without a value, is on the command line. */
export function flag(name: string): boolean {
  return given(name, 'boolean') === true;
}

/** A comma-separated option's numbers. */
export const numbers = (name: string, fallback: string): number[] =>
  option(name, fallback)
    .split(',')
    .map((s) => Number(s.trim()));

/** The sizes tools/harness/seed.ts seeds a bench database at. */
export const SIZES = [10_000, 100_000, 1_000_000];

/** Exits with `message` (status 2) unless the options are valid: a run on them would not measure what it says. */
export function usage(valid: boolean, message: string): void {
  if (valid) return;
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

/**
 * Exits (status 2) on an argument that is not an option read so far, an option without its value,
 * or a value written `--name=value` (option() reads `--name value`), naming the accepted options: a
 * mistyped option would otherwise be ignored and its default run. runMain calls it, once the bench's
 * options are read.
 */
function onlyKnownOptions(): void {
  const known = [...read.keys()].map((name) => `--${name}`).join(', ');
  let inline: string | undefined;
  try {
    const { tokens } = parseArgs({
      args: process.argv.slice(2),
      options: Object.fromEntries([...read].map(([name, type]) => [name, { type }])),
      strict: true,
      allowPositionals: false,
      tokens: true,
    });
    for (const token of tokens) if (token.kind === 'option' && token.inlineValue) inline = token.rawName;
  } catch (error) {
    usage(false, `${(error as Error).message}\nthe options are ${known}`);
  }
  usage(inline === undefined, `write ${String(inline)} and its value apart: ${String(inline)} <value>`);
}

export const log = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

/** Runs a bench's main, then `after`; on an error, exits with `failCode` after printing its cause too (where a server that did not start says why). */
export function runMain(main: () => Promise<void>, { after = async () => {}, failCode = 1 } = {}): void {
  onlyKnownOptions();
  void main().then(after, async (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    const cause = error instanceof Error ? error.cause : undefined;
    if (cause instanceof Error) process.stderr.write(`cause: ${cause.message}\n`);
    await after();
    process.exit(failCode);
  });
}

/** A number with thousands separators and `digits` decimals. */
export const fmt = (n: number, digits = 0): string =>
  n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** A target's verdict. */
export const mark = (ok: boolean): string => (ok ? '✅ met' : '❌ missed');

/** One row of a table: its cells by column; a number is printed with fmt (whole), a string as it is. */
export type Row = Record<string, string | number>;

/** Cells that read as figures, bare or as a ratio (×) or a percentage (%): aligned right. */
const FIGURE = /^(\*\*)?[-+−]?[\d,.]+( [×%])?(\*\*)?$|^–$/;

/** Rows as a Markdown table, its columns the rows' keys in the order first seen, so each section's rows say what its columns are. */
export function table(rows: Row[]): string[] {
  const columns = [...new Set(rows.flatMap((row) => Object.keys(row)))];
  if (columns.length === 0) return [];
  const text = (cell: string | number | undefined) =>
    cell === undefined ? '–' : typeof cell === 'number' ? fmt(cell) : cell;
  const right = (column: string) => rows.every((row) => FIGURE.test(text(row[column])));
  return [
    `| ${columns.join(' | ')} |`,
    `|${columns.map((column) => (right(column) ? '---:' : '---')).join('|')}|`,
    ...rows.map((row) => `| ${columns.map((column) => text(row[column])).join(' | ')} |`),
  ];
}

/** A heading and its tables (a note is a table of one line), or nothing when every table is empty. */
export const section = (heading: string, ...tables: string[][]): string[] => {
  const shown = tables.filter((t) => t.length > 0);
  return shown.length === 0 ? [] : [heading, '', ...shown.flatMap((t) => [...t, ''])];
};

/** One of the PostgreSQL server's settings (server_version, data_directory). */
export async function postgresSetting(name: string, database = 'postgres'): Promise<string> {
  const k = knexTo(database, 1);
  try {
    return (
      (await k.raw<{ rows: { v: string }[] }>('SELECT current_setting(?) AS v', [name])).rows[0]?.v ?? '?'
    );
  } finally {
    await k.destroy();
  }
}

export const loadAverage = (): number[] => os.loadavg().map((l) => Number(l.toFixed(2)));

/** Load averages as every bench prints them, now's unless given. */
export const loadAverageText = (l: number[] = loadAverage()): string => l.join(' / ');

/** This machine's CPUs: how many, and which. */
export const cpusText = (): string => `${String(os.cpus().length)} × ${os.cpus()[0]?.model.trim() ?? '?'}`;

/**
 * What a run's figures were measured on, as cells of its table, its servers on Node `node`: the load
 * averages are taken now, as the run ends, since other work on the machine moves the figures.
 */
export const machine = async (node: string): Promise<Row> => ({
  CPUs: cpusText(),
  'Memory GB': Math.round(os.totalmem() / 2 ** 30),
  'Servers on Node': node,
  PostgreSQL: await postgresSetting('server_version'),
  'Load average at the end': loadAverageText(),
});
