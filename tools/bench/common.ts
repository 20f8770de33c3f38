/**
 * What the bench scripts share: how they format figures and print them as Markdown tables, and what
 * the figures were measured on.
 */
import os from 'node:os';
import knex from 'knex';
import { pgConnection } from '../harness/seed';

/** A number with thousands separators and `digits` decimals. */
export const fmt = (n: number, digits = 0): string =>
  n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** A target's verdict. */
export const mark = (ok: boolean): string => (ok ? '✅ met' : '❌ missed');

/** One row of a table: its cells by column; a number is printed with fmt (whole), a string as it is. */
export type Row = Record<string, string | number>;

/** Cells that read as figures: aligned right. */
const FIGURE = /^(\*\*)?[-+−]?[\d,.]+( ×)?(\*\*)?$|^–$/;

/**
 * Rows as a Markdown table: the columns are the rows' keys in the order first seen ('–' where a
 * row has none), aligned right where every cell reads as a figure. No rows, no table.
 */
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

/** One of the PostgreSQL server's settings (server_version, data_directory). */
export async function postgresSetting(name: string, database = 'postgres'): Promise<string> {
  const k = knex({ client: 'pg', connection: { ...pgConnection, database }, pool: { min: 0, max: 1 } });
  try {
    return (
      (await k.raw<{ rows: { v: string }[] }>('SELECT current_setting(?) AS v', [name])).rows[0]?.v ?? '?'
    );
  } finally {
    await k.destroy();
  }
}

/** What a run's figures were measured on; the load average (1, 5 and 15 min) when it ended. */
export interface Machine {
  cpus: string;
  memoryGb: number;
  node: string;
  postgres: string;
  loadAverage: number[];
}

export const loadAverage = (): number[] => os.loadavg().map((l) => Number(l.toFixed(2)));

/** This machine now, its servers on Node `node`. */
export const machine = async (node: string): Promise<Machine> => ({
  cpus: `${String(os.cpus().length)} × ${os.cpus()[0]?.model.trim() ?? '?'}`,
  memoryGb: Math.round(os.totalmem() / 2 ** 30),
  node,
  postgres: await postgresSetting('server_version'),
  loadAverage: loadAverage(),
});

/** The machine's cells of a run's table. */
export const machineRow = (m: Machine): Row => ({
  CPUs: m.cpus,
  'Memory GB': m.memoryGb,
  'Servers on Node': m.node,
  PostgreSQL: m.postgres,
  'Load average at the end': m.loadAverage.join(' / '),
});
