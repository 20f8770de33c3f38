/** What the bench scripts share: how they format figures and print them as Markdown tables. */

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
