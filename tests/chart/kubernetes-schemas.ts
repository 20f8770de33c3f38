/**
 * Checks of rendered objects against the Kubernetes API types of kubernetes-models (generated from the
 * Kubernetes OpenAPI schemas). Each apiVersion/kind maps by path to its model: kubernetes-models/<apiVersion>/<Kind>.
 *
 * - schemaProblems: the model's JSON-schema validator (types, required fields, formats).
 * - unknownFieldProblems: the validators accept any extra key, so a misspelt field (`readinesProbe`)
 *   would pass them while the API server drops it. Each object becomes an object literal typed with
 *   the model's interface, and TypeScript's excess-property check names keys the API type lacks.
 *
 * Custom resources, the Gateway API's HTTPRoute among them, use their vendored CRD schemas
 * (crd-schemas.ts), which also catch unknown fields; their metadata, which a CRD leaves to the API
 * server, is checked as ObjectMeta both ways.
 */
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import ts from 'typescript';
import { crdProblems, crdValidator } from './crd-schemas';
import type { KubeObject } from './helm';

const load = createRequire(__filename);
// ObjectMeta's model from the apimachinery package kubernetes-models itself is built on.
const loadBesideModels = createRequire(load.resolve('kubernetes-models/package.json'));

function modelPath(object: KubeObject): string {
  return `kubernetes-models/${object.apiVersion}/${object.kind}`;
}

function nameOf(object: KubeObject): string {
  return `${object.apiVersion}/${object.kind} ${object.metadata.name}`;
}

type Model = new (data: unknown) => { validate(): void };

function loadModel(object: KubeObject): Model | undefined {
  try {
    const exports = load(modelPath(object)) as Record<string, Model | undefined>;
    return exports[object.kind];
  } catch {
    return undefined;
  }
}

function modelProblems(name: string, Model: Model, data: unknown): string[] {
  try {
    new Model(data).validate();
    return [];
  } catch (error) {
    return [`${name}: ${error instanceof Error ? error.message : String(error)}`];
  }
}

let objectMeta: Model | undefined;

function objectMetaModel(): Model {
  objectMeta ??= (
    loadBesideModels('@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta') as { ObjectMeta: Model }
  ).ObjectMeta;
  return objectMeta;
}

export function schemaProblems(objects: KubeObject[]): string[] {
  return objects.flatMap((object) => {
    const crd = crdValidator(object);
    if (crd)
      return [
        ...crdProblems(object, crd),
        ...modelProblems(`${nameOf(object)} metadata`, objectMetaModel(), object.metadata),
      ];
    const Model = loadModel(object);
    if (!Model) return [`${nameOf(object)}: kubernetes-models has no schema for this kind`];
    return modelProblems(nameOf(object), Model, object);
  });
}

const options: ts.CompilerOptions = {
  strict: true,
  noEmit: true,
  skipLibCheck: true,
  types: [],
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.CommonJS,
  moduleResolution: ts.ModuleResolutionKind.Node10,
};

// Kept so the next check reuses the parsed kubernetes-models declarations (seconds saved per call).
let previousProgram: ts.Program | undefined;

export function unknownFieldProblems(objects: KubeObject[]): string[] {
  // A virtual file beside this one, so module resolution finds node_modules/kubernetes-models.
  const fileName = resolve(__dirname, '__rendered_objects__.ts');
  const problems: string[] = [];
  const lines: string[] = [];
  objects.forEach((object, index) => {
    // Custom resources: their CRD schema is closed against unknown fields (schemaProblems); their
    // metadata is a Pod's (ObjectMeta), which kubernetes-models types.
    if (crdValidator(object)) {
      lines.push(`// ${nameOf(object)} metadata`);
      lines.push(
        `export const object${index}: NonNullable<import('kubernetes-models/v1/Pod').IPod['metadata']> = ${JSON.stringify(object.metadata, null, 1)};`,
      );
      return;
    }
    if (!loadModel(object)) {
      problems.push(`${nameOf(object)}: kubernetes-models has no type for this kind`);
      return;
    }
    lines.push(`// ${nameOf(object)}`);
    lines.push(
      `export const object${index}: import('${modelPath(object)}').I${object.kind} = ${JSON.stringify(object, null, 1)};`,
    );
  });
  const source = lines.join('\n');
  const host = ts.createCompilerHost(options);
  const original = {
    readFile: host.readFile.bind(host),
    fileExists: host.fileExists.bind(host),
    getSourceFile: host.getSourceFile.bind(host),
  };
  host.readFile = (name) => (name === fileName ? source : original.readFile(name));
  host.fileExists = (name) => name === fileName || original.fileExists(name);
  host.getSourceFile = (name, languageVersion, ...rest) =>
    name === fileName
      ? ts.createSourceFile(name, source, languageVersion)
      : original.getSourceFile(name, languageVersion, ...rest);
  const program = ts.createProgram([fileName], options, host, previousProgram);
  previousProgram = program;
  const sourceLines = source.split('\n');
  for (const diagnostic of [...program.getSyntacticDiagnostics(), ...program.getSemanticDiagnostics()]) {
    let where = '';
    if (diagnostic.file && diagnostic.start !== undefined) {
      const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
      // The nearest "// <object>" comment above the error names the object.
      const heading = sourceLines
        .slice(0, line + 1)
        .reverse()
        .find((text) => text.startsWith('// '));
      where = `${heading?.slice(3) ?? '?'}: `;
    }
    problems.push(`${where}${ts.flattenDiagnosticMessageText(diagnostic.messageText, ' ')}`);
  }
  return problems;
}
