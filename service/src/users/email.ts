import { domainToUnicode } from 'node:url';

/**
 * The e-mail policy: one mailbox, one account, whatever look-alike form it is typed in. Invisible
 * characters refused, NFKC and UTS #46, one script per part (docs/security.md, "E-mail addresses").
 */

const INVISIBLE = /[\p{Cc}\p{Cf}\p{Z}\p{Co}\p{Cs}\p{Cn}\p{Default_Ignorable_Code_Point}]/u;

/** UAX #31 Table 4, Recommended Scripts (Common and Inherited are neutral). */
const SCRIPTS = [
  'Latin',
  'Greek',
  'Cyrillic',
  'Armenian',
  'Hebrew',
  'Arabic',
  'Thaana',
  'Devanagari',
  'Bengali',
  'Gurmukhi',
  'Gujarati',
  'Oriya',
  'Tamil',
  'Telugu',
  'Kannada',
  'Malayalam',
  'Sinhala',
  'Thai',
  'Lao',
  'Tibetan',
  'Myanmar',
  'Georgian',
  'Hangul',
  'Ethiopic',
  'Khmer',
  'Mongolian',
  'Hiragana',
  'Katakana',
  'Bopomofo',
  'Han',
].map((name) => ({ name, pattern: new RegExp(`\\p{Script=${name}}`, 'u') }));

const NEUTRAL = /[\p{Script=Common}\p{Script=Inherited}]/u;

/** UTS #39 Highly Restrictive: the script sets allowed beyond a single script. */
const COMBINATIONS = [
  new Set(['Latin', 'Han', 'Hiragana', 'Katakana']),
  new Set(['Latin', 'Han', 'Bopomofo']),
  new Set(['Latin', 'Han', 'Hangul']),
];

/** Undefined when `text` passes the script rule, else why not. */
function scriptProblem(text: string): string | undefined {
  const used = new Set<string>();
  for (const char of text) {
    if (NEUTRAL.test(char)) continue;
    const script = SCRIPTS.find((s) => s.pattern.test(char));
    if (!script)
      return `uses a character (U+${(char.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0')}) from a script not accepted in addresses`;
    used.add(script.name);
  }
  if (used.size <= 1 || COMBINATIONS.some((c) => [...used].every((s) => c.has(s)))) return undefined;
  return `mixes scripts (${[...used].join(', ')})`;
}

export type EmailResult = { ok: true; email: string } | { ok: false; reason: string };

/** The stored form of an address, or why it is refused. Format (RFC 5321) is checked by the schema. */
export function normaliseEmail(input: string): EmailResult {
  if (INVISIBLE.test(input))
    return { ok: false, reason: 'must not contain invisible, formatting or space characters' };
  const nfkc = input.normalize('NFKC');
  const at = nfkc.lastIndexOf('@');
  // No local part or domain to judge: the address format check (the schema's) refuses it.
  if (at <= 0 || at === nfkc.length - 1) return { ok: true, email: nfkc };
  const local = nfkc.slice(0, at);
  const domain = domainToUnicode(nfkc.slice(at + 1));
  if (domain === '') return { ok: false, reason: 'must have a valid domain' };
  // Domain labels are judged one by one, as registries do: `пример.com` is fine, `exаmple.com` not.
  for (const part of [local, ...domain.split('.')]) {
    const problem = scriptProblem(part);
    if (problem) return { ok: false, reason: problem };
  }
  return { ok: true, email: `${local}@${domain}` };
}
