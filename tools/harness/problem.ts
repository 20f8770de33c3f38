/** The one check of an error answer (the specification's error shape): every suite holds the service to the same shape. */

export interface ProblemAnswer {
  status: number;
  contentType: string | undefined;
  /** The body parsed as JSON (or the text when it is not JSON). */
  body: unknown;
}

/**
 * What keeps the answer from being a problem+json of its own status, with a type, a title and a
 * detail to show a person; empty when it is one.
 */
export function problemFaults(answer: ProblemAnswer): string[] {
  const faults: string[] = [];
  if (!(answer.contentType ?? '').startsWith('application/problem+json'))
    faults.push(`content-type ${String(answer.contentType)}`);
  const body = (typeof answer.body === 'object' && answer.body !== null ? answer.body : {}) as Record<
    string,
    unknown
  >;
  if (body.type !== 'about:blank') faults.push(`type ${JSON.stringify(body.type)}`);
  if (body.status !== answer.status)
    faults.push(`status ${JSON.stringify(body.status)} in a ${answer.status}`);
  if (typeof body.title !== 'string') faults.push(`title ${JSON.stringify(body.title)}`);
  if (typeof body.detail !== 'string' || body.detail === '')
    faults.push(`detail ${JSON.stringify(body.detail)}`);
  return faults;
}

export const isProblem = (answer: ProblemAnswer): boolean => problemFaults(answer).length === 0;

/** An answer's problem `detail`, or '' when its body has none. */
export const detailOf = (answer: { body: unknown }): string => {
  const detail = (answer.body as { detail?: unknown } | null)?.detail;
  return typeof detail === 'string' ? detail : '';
};

/** A body as JSON when it parses, else the text itself (for answers read as text). */
export function parsedBody(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}
