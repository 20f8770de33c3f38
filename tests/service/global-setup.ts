import { ensureTemplate, TEMPLATE_VARIABLE } from '../../tools/harness/pglite-template';

/**
 * Once per run, before any test file: the migrated embedded database each file copies instead of
 * making its own (tools/harness/pglite-template.ts). On PostgreSQL every file has a scratch
 * database of its own, so nothing is made.
 */
export default async function globalSetup(): Promise<void> {
  if (process.env.DB_HOSTNAME) return;
  process.env[TEMPLATE_VARIABLE] = await ensureTemplate();
}
