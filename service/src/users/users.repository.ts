import { readConfirmed } from '../db/confirmed';
import type { Database } from '../db/connection';
import { brokenConstraint, errorFields } from '../db/errors';
import { hasNul } from '../db/limits';
import { statement } from '../db/statements';
import type { User } from './user';

export interface UserWithHash extends User {
  password: string;
}

/** The columns a user is shown with: every field of User, which the compiler holds them to. */
const PUBLIC_COLUMNS = Object.keys({ id: true, email: true, created_at: true } satisfies Record<
  keyof User,
  true
>);

/** The unique indexes on the address: lower(email), as the database's locale folds it, and fold_case(email). */
const EMAIL_INDEXES = new Set(['users_email_lower_unique', 'users_email_folded_unique']);

/** Inserts a user; undefined when the e-mail is already taken (in any letter case). */
export async function createUser(
  db: Database,
  email: string,
  passwordHash: string,
): Promise<User | undefined> {
  try {
    const [user] = await db
      .knex<UserWithHash>('users')
      .insert({ email, password: passwordHash })
      .returning<User[]>(PUBLIC_COLUMNS);
    return user;
  } catch (error) {
    // The unique index on fold_case(email) decides, so two simultaneous registrations cannot both
    // win, and an address taken in another letter case of any script is refused.
    if (errorFields(error).code !== '23505') throw error;
    if (!EMAIL_INDEXES.has(brokenConstraint(error, '23505') ?? '')) return undefined;
    // Deleted since the insert met it: the address is free again, and this request registers it.
    return (await emailStands(db, email)) ? undefined : createUser(db, email, passwordHash);
  }
}

/** Whether an account holds the address, confirmed by the synchronous standby (readConfirmed). */
async function emailStands(db: Database, email: string): Promise<boolean> {
  return readConfirmed(
    db,
    async (trx) =>
      (
        await trx('users')
          .select('id')
          .whereRaw('lower(email) = lower(?) OR fold_case(email) = fold_case(?)', [email, email])
          .forKeyShare()
      ).length > 0,
  );
}

/** Replaces a user's password hash with `next`, unless it is no longer `previous`. */
export async function replacePasswordHash(
  db: Database,
  id: number,
  previous: string,
  next: string,
): Promise<void> {
  await db.knex('users').where({ id, password: previous }).update({ password: next });
}

export const userById = statement<{ id: number }>('user_by_id', (knex, param) =>
  knex('users').select(PUBLIC_COLUMNS).where('id', param('id')),
);

/** Asked on every authenticated request, so it is a prepared statement (statements.ts). */
export async function findUserById(db: Database, id: number): Promise<User | undefined> {
  return (await db.run<User, { id: number }>(userById, { id }))[0];
}

/**
 * The account of an address in any letter case, through the unique index on fold_case(email).
 * Where accounts made before that index share a folded address (`email_lookalike`), the one the
 * database's own lower() matched before keeps answering to it, so each still logs in as it did;
 * any other spelling reaches the oldest, unmarked one.
 */
export const userByEmail = statement<{ email: string }>('user_by_email', (knex, param) =>
  knex('users')
    .select([...PUBLIC_COLUMNS, 'password'])
    .whereRaw('fold_case(email) = fold_case(?)', [param('email')])
    .orderByRaw('lower(email) = lower(?) DESC, email_lookalike IS TRUE, id', [param('email')])
    .limit(1),
);

/** Case-insensitive look-up, any script, on any database locale. */
export async function findUserByEmail(db: Database, email: string): Promise<UserWithHash | undefined> {
  // PostgreSQL refuses a NUL in text outright (22021, which would be a 500), and no stored e-mail
  // can hold one: such an address matches nobody, and the login still does a full bcrypt compare.
  if (hasNul(email)) return undefined;
  return (await db.run<UserWithHash, { email: string }>(userByEmail, { email }))[0];
}
