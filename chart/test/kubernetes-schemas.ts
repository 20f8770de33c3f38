/**
 * Checks of rendered objects against the Kubernetes API types of kubernetes-models (generated from the
 * Kubernetes OpenAPI schemas). Each apiVersion/kind maps by path to its model: kubernetes-models/<apiVersion>/<Kind>.
 *
 * - schemaProblems: the model's JSON-schema validator (types, required fields, formats).
 * - unknownFieldProblems: the validators accept any extra key, so a misspelt field (`readinesProbe`)
 *   would pass them while the API server drops it. Each object becomes an object literal typed with
 *   the model's interface, and TypeScript's excess-property check names keys the API type lacks.
 *
 * Gateway API objects (gateway.networking.k8s.io) use @kubernetes-models/gateway-api the same way;
 * the implementations' policies use their vendored CRD schemas (crd-schemas.ts), which also catch
 * unknown fields.
 */
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import ts from 'typescript';
import { crdProblems, crdValidator } from './crd-schemas';
import { repoRoot, type KubeObject } from './helm';

const load = createRequire(__filename);
const GATEWAY_API_GROUP = 'gateway.networking.k8s.io/';
const gatewayApiPackage = '@kubernetes-models/gateway-api';

function isGatewayApi(object: KubeObject): boolean {
  return object.apiVersion.startsWith(GATEWAY_API_GROUP);
}

function modelPath(object: KubeObject): string {
  if (isGatewayApi(object)) return `${gatewayApiPackage}/${object.apiVersion}/${object.kind}`;
  return `kubernetes-models/${object.apiVersion}/${object.kind}`;
}

/**
 * @kubernetes-models/gateway-api ships ES modules only, which jest's CommonJS loader cannot
 * require: its validators run in a node child process instead, one per call.
 */
function gatewayApiProblems(objects: KubeObject[]): string[] {
  if (objects.length === 0) return [];
  const root = `${pathToFileURL(resolve(repoRoot, 'node_modules', gatewayApiPackage)).href}/`;
  const script = `
    let text = '';
    for await (const chunk of process.stdin) text += chunk;
    const problems = [];
    for (const object of JSON.parse(text)) {
      const name = object.apiVersion + '/' + object.kind + ' ' + object.metadata.name;
      let Model;
      try {
        Model = (await import(new URL(object.apiVersion + '/' + object.kind + '.js', ${JSON.stringify(root)})))[object.kind];
      } catch {}
      if (!Model) { problems.push(name + ': ${gatewayApiPackage} has no schema for this kind'); continue; }
      try { new Model(object).validate(); } catch (error) { problems.push(name + ': ' + error.message); }
    }
    process.stdout.write(JSON.stringify(problems));`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
    input: JSON.stringify(objects),
    encoding: 'utf8',
  });
  return JSON.parse(out) as string[];
}

function nameOf(object: KubeObject): string {
  return `${object.apiVersion}/${object.kind} ${object.metadata.name}`;
}

type Model = new (data: unknown) => { validate(): void };

function loadModel(object: KubeObject): Model | undefined {
  if (isGatewayApi(object)) return undefined;
  try {
    const exports = load(modelPath(object)) as Record<string, Model | undefined>;
    return exports[object.kind];
  } catch {
    return undefined;
  }
}

export function schemaProblems(objects: KubeObject[]): string[] {
  const gatewayApi = gatewayApiProblems(objects.filter(isGatewayApi));
  return gatewayApi.concat(objects.filter((object) => !isGatewayApi(object)).flatMap(otherProblems));
}

function otherProblems(object: KubeObject): string[] {
  const crd = crdValidator(object);
  if (crd) return crdProblems(object, crd);
  const Model = loadModel(object);
  if (!Model) return [`${nameOf(object)}: kubernetes-models has no schema for this kind`];
  try {
    new Model(object).validate();
    return [];
  } catch (error) {
    return [`${nameOf(object)}: ${error instanceof Error ? error.message : String(error)}`];
  }
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
    // Custom resources: their CRD schema is closed against unknown fields (schemaProblems).
    if (crdValidator(object)) return;
    if (!isGatewayApi(object) && !loadModel(object)) {
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
