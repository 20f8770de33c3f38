import type { Knex } from 'knex';

/**
 * A query whose SQL knex builds once: each run only binds its values. On PostgreSQL it runs as a
 * named prepared statement, so the server parses it once per connection instead of on every
 * request, and plans it once too where a generic plan is as good as a custom one (the point
 * look-ups; the lists keep a custom plan per run, as their LIMIT and search need). Built lazily
 * on first use, so a module defines its statements at load time without a database at hand.
 */
export interface Statement<P> {
  /** The prepared statement's name: one per distinct SQL text, within a connection. */
  readonly name: string;
  /** The SQL with $1…$n placeholders, and the values for them from the parameters of one run. */
  compile(knex: Knex): Compiled<P>;
}

/** What a statement's builder gets: a placeholder number for each parameter, bound at run time. */
export type Param<P> = (key: keyof P & string) => number;

// Placeholders are numbers because knex only binds a number as limit or offset. Far beyond any
// value a query of this service holds as a constant, so no constant is mistaken for a parameter.
const PLACEHOLDER_BASE = 7_000_000_000_000;

const definedNames = new Set<string>();

export interface Compiled<P> {
  text: string;
  values: (params: P) => unknown[];
}

/**
 * Defines a statement. `build` writes the query with knex, with `param('x')` wherever the value
 * of parameter `x` goes; every other value it binds is a constant of the statement.
 */
export function statement<P extends object>(
  name: string,
  build: (knex: Knex, param: Param<P>) => Knex.QueryBuilder | Knex.Raw,
): Statement<P> {
  // A name must stand for one SQL text: PostgreSQL refuses a second text under a prepared name.
  if (definedNames.has(name)) throw new Error(`statement ${name} is defined twice`);
  // Per knex instance: tests open many databases in one process (the SQL is the same for each).
  const compiledFor = new WeakMap<Knex, Compiled<P>>();
  const defining: Statement<P> = {
    name,
    compile(knex) {
      const known = compiledFor.get(knex);
      if (known) return known;
      const keys: (keyof P & string)[] = [];
      const param: Param<P> = (key) => {
        let index = keys.indexOf(key);
        if (index < 0) index = keys.push(key) - 1;
        return PLACEHOLDER_BASE + index;
      };
      const { sql, bindings } = build(knex, param).toSQL().toNative();
      // Each placeholder reads its parameter, or holds the constant the builder bound.
      const slots = bindings.map((binding): { key: keyof P & string } | { constant: unknown } => {
        const index = typeof binding === 'number' ? binding - PLACEHOLDER_BASE : -1;
        const key = index >= 0 && index < keys.length ? keys[index] : undefined;
        return key === undefined ? { constant: binding } : { key };
      });
      const compiled: Compiled<P> = {
        text: sql,
        values: (params) => slots.map((slot) => ('key' in slot ? params[slot.key] : slot.constant)),
      };
      compiledFor.set(knex, compiled);
      return compiled;
    },
  };
  definedNames.add(name);
  return defining;
}
