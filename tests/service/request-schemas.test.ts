import { readdirSync } from 'node:fs';
import path from 'node:path';
import Joi from 'joi';
import { openApiDocument } from '../../service/src/app';

/**
 * Every joi schema a request is validated with, and its counterpart in /openapi.json: each limit,
 * format, enum, default and required field joi enforces is documented, and nothing else is.
 * The expectation is read from joi's own description, not from the generator that writes the docs.
 */

type OpenApi = Record<string, unknown>;
interface Document {
  components: { schemas: Record<string, OpenApi>; parameters: Record<string, OpenApi> };
}
const document = openApiDocument() as Document;

/** Every exported joi object schema of every `*.schemas.ts` module under service/src. */
function allRequestSchemas(): { name: string; schema: Joi.ObjectSchema }[] {
  const root = path.join(__dirname, '..', '..', 'service', 'src');
  const files = readdirSync(root, { recursive: true, encoding: 'utf8' }).filter((file) =>
    file.endsWith('.schemas.ts'),
  );
  return files.flatMap((file) => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- every schema module, found by name
    const exports = require(path.join(root, file)) as Record<string, unknown>;
    return Object.entries(exports)
      .filter(([, value]) => Joi.isSchema(value) && (value as Joi.Schema).type === 'object')
      .map(([name, value]) => ({ name: `${file}:${name}`, schema: value as Joi.ObjectSchema }));
  });
}

interface Rule {
  name: string;
  args?: { limit?: number };
}
interface FieldDescription {
  type: string;
  flags?: { presence?: string; default?: unknown; only?: boolean };
  rules?: Rule[];
  allow?: unknown[];
}

/** What OpenAPI must say about one joi field. */
function expected(field: FieldDescription): OpenApi {
  const rules = field.rules ?? [];
  const limit = (name: string) => rules.find((rule) => rule.name === name)?.args?.limit;
  const out: OpenApi = {};
  if (field.type === 'number') {
    const integral =
      rules.some((rule) => rule.name === 'integer') ||
      (field.flags?.only === true && (field.allow ?? []).every((value) => Number.isInteger(value)));
    out.type = integral ? 'integer' : 'number';
    if (limit('min') !== undefined) out.minimum = limit('min');
    if (limit('max') !== undefined) out.maximum = limit('max');
  } else {
    out.type = field.type;
    if (limit('min') !== undefined) out.minLength = limit('min');
    if (limit('max') !== undefined) out.maxLength = limit('max');
    if (rules.some((rule) => rule.name === 'email')) out.format = 'email';
  }
  if (field.flags?.only === true) out.enum = field.allow;
  if (field.flags?.default !== undefined) out.default = field.flags.default;
  return out;
}

/** The parts of a documented field that `expected` speaks about. */
function documented(schema: OpenApi): OpenApi {
  const keys = ['type', 'minimum', 'maximum', 'minLength', 'maxLength', 'enum', 'default'];
  const out = Object.fromEntries(Object.entries(schema).filter(([key]) => keys.includes(key)));
  if (schema.format === 'email') out.format = 'email';
  return out;
}

/** The documented fields of a schema: a body component by its className, or the parameters. */
function counterpart(schema: Joi.ObjectSchema): { fields: Record<string, OpenApi>; required: string[] } {
  const className = (schema.describe().metas as { className?: string }[] | undefined)?.find(
    (meta) => meta.className,
  )?.className;
  if (className) {
    const component = document.components.schemas[className];
    if (!component) throw new Error(`components.schemas.${className} is missing`);
    return {
      fields: component.properties as Record<string, OpenApi>,
      required: (component.required as string[] | undefined) ?? [],
    };
  }
  const keys = Object.keys((schema.describe() as { keys: object }).keys);
  const parameters = Object.values(document.components.parameters).filter((p) =>
    keys.includes(p.name as string),
  );
  return {
    fields: Object.fromEntries(parameters.map((p) => [p.name as string, p.schema as OpenApi])),
    required: parameters.filter((p) => p.required === true).map((p) => p.name as string),
  };
}

const schemas = allRequestSchemas();

test('When the schema modules are read, then every request schema is found', () => {
  expect(schemas.map((s) => s.name).sort()).toEqual(
    [
      'posts/posts.schemas.ts:listQuery',
      'posts/posts.schemas.ts:postIdParams',
      'posts/posts.schemas.ts:postInput',
      'users/users.schemas.ts:loginForm',
      'users/users.schemas.ts:userCreate',
      'votes/votes.schemas.ts:voteInput',
    ].sort(),
  );
});

test.each(schemas)('When $name is compared with /openapi.json, then every field agrees', ({ schema }) => {
  const keys = (schema.describe() as { keys: Record<string, FieldDescription> }).keys;
  const { fields, required } = counterpart(schema);
  expect(Object.keys(fields).sort()).toEqual(Object.keys(keys).sort());
  expect(required.sort()).toEqual(
    Object.entries(keys)
      .filter(([, field]) => field.flags?.presence === 'required')
      .map(([name]) => name)
      .sort(),
  );
  for (const [name, field] of Object.entries(keys)) {
    expect({ name, ...documented(fields[name] ?? {}) }).toEqual({ name, ...expected(field) });
  }
});
