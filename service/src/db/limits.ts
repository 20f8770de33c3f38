/**
 * What the schema's columns can hold, which the layers above check before a value reaches SQL:
 * the request schemas, the token's subject, the list cursor and the repositories.
 */

/** The largest value of PostgreSQL's `integer`, the type of every id column. */
export const MAX_ID = 2_147_483_647;

/** PostgreSQL refuses a NUL character in text outright (22021), so no stored text can hold one. */
export const hasNul = (value: string): boolean => value.includes('\0');
