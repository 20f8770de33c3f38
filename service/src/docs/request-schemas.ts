import type Joi from 'joi';
import joiToSwagger from 'joi-to-swagger';

/**
 * The OpenAPI side of the request schemas: generated from the joi schemas that validate the
 * requests (each feature hands in its own), so the documentation and the validation cannot disagree.
 */

export type OpenApiSchema = Record<string, unknown>;

/** Query or path parameters: each named field becomes `#/components/parameters/<name>`. */
export interface ParameterSource {
  in: 'query' | 'path';
  schema: Joi.ObjectSchema;
  /** Field name → component name. */
  names: Record<string, string>;
}

/**
 * joi-to-swagger 6.2 (Twipped/joi-to-swagger, index.js) converts the limits, formats, enums and
 * descriptions; three of its outputs are corrected here, field by field from joi's own description:
 * - `additionalProperties: false` goes: validate() strips unknown fields, it does not refuse them;
 * - a default that is falsy but not `false` (skip's 0) is dropped by it and put back;
 * - a number restricted to integer values (vote's `dir`) is an integer, not a float.
 */
function tidy(swagger: OpenApiSchema, description: Joi.Description): OpenApiSchema {
  const out: OpenApiSchema = { ...swagger };
  if (out.additionalProperties === false) delete out.additionalProperties;
  const flags = (description.flags ?? {}) as { default?: unknown };
  if (flags.default !== undefined && typeof flags.default !== 'function') out.default = flags.default;
  const allowed = description.allow as unknown[] | undefined;
  if (out.type === 'number' && allowed?.every((value) => Number.isInteger(value))) {
    out.type = 'integer';
    delete out.format;
  }
  const keys = (description as { keys?: Record<string, Joi.Description> }).keys;
  const properties = out.properties as Record<string, OpenApiSchema> | undefined;
  if (keys && properties)
    out.properties = Object.fromEntries(
      Object.entries(properties).map(([name, property]) => [
        name,
        keys[name] ? tidy(property, keys[name]) : property,
      ]),
    );
  return out;
}

/** The schema of one joi object schema, without a component reference. */
function openApiOf(schema: Joi.ObjectSchema): OpenApiSchema {
  const { swagger, components } = joiToSwagger(schema);
  const named = (components?.schemas ?? {}) as Record<string, OpenApiSchema>;
  const ref = typeof swagger.$ref === 'string' ? swagger.$ref.split('/').pop() : undefined;
  return tidy(ref ? (named[ref] ?? {}) : swagger, schema.describe());
}

/** The component name a body schema is documented under. */
function componentName(schema: Joi.ObjectSchema): string {
  const metas = (schema.describe().metas ?? []) as { className?: string }[];
  const name = metas.find((meta) => meta.className)?.className;
  if (!name) throw new Error('a request body schema needs a className meta');
  return name;
}

/**
 * `components.schemas` and `components.parameters` for the requests: each body documented as the
 * component its `className` meta names, each parameter under its component name.
 */
export function requestComponents(
  bodySchemas: readonly Joi.ObjectSchema[],
  parameterSources: readonly ParameterSource[],
): {
  schemas: Record<string, OpenApiSchema>;
  parameters: Record<string, OpenApiSchema>;
} {
  const schemas = Object.fromEntries(bodySchemas.map((schema) => [componentName(schema), openApiOf(schema)]));
  const parameters: Record<string, OpenApiSchema> = {};
  for (const source of parameterSources) {
    const object = openApiOf(source.schema);
    const properties = object.properties as Record<string, OpenApiSchema>;
    const required = (object.required as string[] | undefined) ?? [];
    for (const [field, name] of Object.entries(source.names)) {
      const { description, ...schema } = properties[field] ?? {};
      parameters[name] = {
        name: field,
        in: source.in,
        ...(required.includes(field) ? { required: true } : {}),
        ...(description === undefined ? {} : { description }),
        schema,
      };
    }
  }
  return { schemas, parameters };
}
