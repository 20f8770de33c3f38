/**
 * What the schema's columns can hold, which the layers above check before a value reaches SQL:
 * the request schemas, the token's subject, the list cursor and the repositories.
 */

/** The largest value of PostgreSQL's `integer`, the type of every id column. */
export const MAX_ID = 2_147_483_647;

/** Whether a row could have `id`: outside 1 to MAX_ID none can, and SQL would refuse the value. */
export const isPossibleId = (id: number): boolean => id >= 1 && id <= MAX_ID;

/** PostgreSQL refuses a NUL character in text outright (22021), so no stored text can hold one. */
export const hasNul = (value: string): boolean => value.includes('\0');
