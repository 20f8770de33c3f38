import { domainToUnicode } from 'node:url';
import type { Knex } from 'knex';

/**
 * Brings addresses stored before the e-mail policy (service/src/users/email.ts) to the form
 * registration and login now use: NFKC, and the domain mapped by UTS #46 (case folded, `xn--`
 * decoded). The mapping is written out here rather than imported, so this migration stays what it
 * was when the policy changes. Only rows that can differ are read (non-ASCII, or an `xn--` label).
 *
 * A row whose new form is already another account's (lower(email) is unique) is left as stored:
 * two accounts were made for one mailbox, and which one is the owner's is not the migration's to
 * decide. Such a row can no longer be logged in to by address; operators find them with
 * `SELECT id, email FROM users WHERE email <> normalize(email, NFKC)`.
 */
function stored(email: string): string {
  const nfkc = email.normalize('NFKC');
  const at = nfkc.lastIndexOf('@');
  if (at <= 0) return nfkc;
  const domain = domainToUnicode(nfkc.slice(at + 1));
  return domain === '' ? nfkc : `${nfkc.slice(0, at)}@${domain}`;
}

export async function up(knex: Knex): Promise<void> {
  const rows = await knex<{ id: number; email: string }>('users')
    .select('id', 'email')
    .whereRaw(`email ~ '[^\\x01-\\x7e]' OR email ILIKE '%xn--%'`)
    .orderBy('id');
  for (const row of rows) {
    const email = stored(row.email);
    if (email === row.email) continue;
    const taken: unknown = await knex('users')
      .whereRaw('lower(email) = lower(?)', [email])
      .whereNot('id', row.id)
      .first('id');
    if (!taken) await knex('users').where('id', row.id).update({ email });
  }
}

/** The old forms are not kept; the normalised ones are valid addresses under the old rules too. */
export async function down(): Promise<void> {
  // Nothing to undo.
}
