/**
 * Validators for the custom resources the chart renders for the Gateway API and its implementations, for
 * CloudNativePG and for the Prometheus Operator, built from their own CRDs vendored in tests/chart/schemas/ (see its README for the
 * repository, path and commit of each). The API server prunes fields a structural CRD schema does
 * not declare, so a misspelt field would silently vanish: every object schema without
 * x-kubernetes-preserve-unknown-fields is closed (additionalProperties: false) before compiling.
 * CEL rules (x-kubernetes-validations) are not evaluated here.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import Ajv, { type ValidateFunction } from 'ajv';
import type { RegExpEngine } from 'ajv/dist/types';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';
import { must, type KubeObject } from './helm';

const crdFiles = [
  // Gateway API v1.5.1, standard channel (kubernetes-sigs/gateway-api,
  // config/crd/standard/, commit e7677b70ae75d14a4448fba94870e7deea6cf0ad).
  'gateway.networking.k8s.io_httproutes.yaml',
  'gateway.nginx.org_ratelimitpolicies.yaml',
  'gateway.nginx.org_proxysettingspolicies.yaml',
  'gateway.nginx.org_observabilitypolicies.yaml',
  'gateway.envoyproxy.io_backendtrafficpolicies.yaml',
  'postgresql.cnpg.io_clusters.yaml',
  'postgresql.cnpg.io_poolers.yaml',
  'postgresql.cnpg.io_scheduledbackups.yaml',
  // The Barman Cloud plugin v0.14.0 (cloudnative-pg/plugin-barman-cloud,
  // config/crd/bases/, commit 1e13020fe5f09fd8fc29ea03828f7b61375b3721).
  'barmancloud.cnpg.io_objectstores.yaml',
  // Prometheus Operator v0.93.0 (prometheus-operator/prometheus-operator,
  // example/prometheus-operator-crd/, commit f8fafd475f3d132e239432ae6172de60a6cb6516).
  'monitoring.coreos.com_servicemonitors.yaml',
  'monitoring.coreos.com_podmonitors.yaml',
  'monitoring.coreos.com_prometheusrules.yaml',
];

interface Crd {
  spec: {
    group: string;
    names: { kind: string };
    versions: { name: string; served: boolean; schema: { openAPIV3Schema: Record<string, unknown> } }[];
  };
}

type Schema = Record<string, unknown>;

/** Closes every object schema that lists its properties, like the API server's pruning does. */
function closed(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closed);
  if (schema === null || typeof schema !== 'object') return schema;
  const copy: Schema = {};
  for (const [key, value] of Object.entries(schema as Schema)) copy[key] = closed(value);
  if (
    copy.type === 'object' &&
    copy.properties !== undefined &&
    copy.additionalProperties === undefined &&
    copy['x-kubernetes-preserve-unknown-fields'] !== true
  )
    copy.additionalProperties = false;
  return copy;
}

/**
 * The API server checks `pattern` with Go's RE2, which spells case-insensitivity as an inline
 * `(?i)` (the Prometheus Operator's CRDs use `^(?i)(abort|warn)?$`); JavaScript takes it as a flag,
 * here for the whole pattern (every use in the vendored CRDs follows the leading `^`).
 */
const goRegExp: RegExpEngine = Object.assign(
  (pattern: string, flags: string) =>
    pattern.includes('(?i)')
      ? new RegExp(pattern.replaceAll('(?i)', ''), `${flags}i`)
      : new RegExp(pattern, flags),
  { code: 'goRegExp' },
);

let validators: Map<string, ValidateFunction> | undefined;

function load(): Map<string, ValidateFunction> {
  if (validators) return validators;
  // The CRDs use OpenAPI keywords (nullable, x-kubernetes-*); strict mode would refuse them.
  const ajv = new Ajv({ allErrors: true, strict: false, code: { regExp: goRegExp } });
  addFormats(ajv);
  for (const format of ['int32', 'int64', 'float', 'double', 'byte']) ajv.addFormat(format, true);
  validators = new Map();
  for (const file of crdFiles) {
    const crd = parse(readFileSync(resolve(__dirname, 'schemas', file), 'utf8')) as Crd;
    for (const version of crd.spec.versions) {
      const schema = closed(version.schema.openAPIV3Schema) as Schema;
      // metadata is the API server's ObjectMeta, not part of the CRD's schema.
      (schema.properties as Schema).metadata = { type: 'object' };
      validators.set(`${crd.spec.group}/${version.name}/${crd.spec.names.kind}`, ajv.compile(schema));
    }
  }
  return validators;
}

/** The vendored CRD's validator for the object's apiVersion and kind, if there is one. */
export function crdValidator(object: KubeObject): ValidateFunction | undefined {
  return load().get(`${object.apiVersion}/${object.kind}`);
}

/** Problems of one object against its CRD schema (empty when valid). */
export function crdProblems(object: KubeObject, validate: ValidateFunction): string[] {
  // Through a copy: the validator is a type guard and would narrow the object itself.
  if (validate({ ...object })) return [];
  return (validate.errors ?? []).map(
    (error) =>
      `${object.apiVersion}/${object.kind} ${object.metadata.name}: ${error.instancePath || '/'} ${error.message ?? ''}${
        error.keyword === 'additionalProperties'
          ? ` (${String((error.params as { additionalProperty?: string }).additionalProperty)})`
          : ''
      }`,
  );
}

/** Problems of an object against its vendored CRD, which it must have. */
export const problemsAgainstCrd = (object: KubeObject): string[] =>
  crdProblems(object, must(crdValidator(object), `${object.kind} CRD`));

/** Expects the object to have a vendored CRD and to be valid against it. */
export function expectCrdValid(object: KubeObject): void {
  expect(problemsAgainstCrd(object)).toEqual([]);
}
