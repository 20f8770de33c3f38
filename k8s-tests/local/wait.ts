/** Waiting on what the runner started: a bounded poll (the HTTP probe is tools/harness/poll's). */
import { pollUntil } from '../../tools/harness/poll';

/** Polls until check() is true (tools/harness/poll's pollUntil); throws once timeoutMs has passed. */
export async function waitFor(
  what: string,
  timeoutMs: number,
  check: () => Promise<boolean>,
  everyMs = 200,
): Promise<void> {
  const { held } = await pollUntil(check, (ok) => ok, { withinMs: timeoutMs, everyMs });
  if (!held) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}
