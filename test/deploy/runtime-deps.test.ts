/**
 * What runs needs only `dependencies`: every import of src/, filters/ and bin/ that Node executes
 * (type-only imports are erased by type stripping) names a Node builtin, a relative file or a
 * package of package.json `dependencies` — never one only in `devDependencies`, which the image's
 * `npm ci --omit=dev` leaves out. (.ci/run also runs `waypoint --version` on such an install.)
 */
import fs from 'node:fs';
import { isBuiltin } from 'node:module';
import path from 'node:path';
import ts from 'typescript';
import { expect, test } from 'vitest';
import { ROOT } from './objects.ts';

/** Module specifiers `file` loads when Node runs it (static imports and re-exports that are not type-only, dynamic imports, require). */
function runtimeImports(file: string, text: string): string[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, file.endsWith('.js') ? ts.ScriptKind.JS : ts.ScriptKind.TS);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node) && !node.importClause?.isTypeOnly && ts.isStringLiteral(node.moduleSpecifier)) found.push(node.moduleSpecifier.text);
    else if (ts.isExportDeclaration(node) && !node.isTypeOnly && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) found.push(node.moduleSpecifier.text);
    else if (ts.isCallExpression(node) && (node.expression.kind === ts.SyntaxKind.ImportKeyword || (ts.isIdentifier(node.expression) && node.expression.text === 'require'))) {
      const [arg] = node.arguments;
      if (arg && ts.isStringLiteralLike(arg)) found.push(arg.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

/** The package a bare specifier names (`@scope/name/sub` → `@scope/name`). */
function packageOf(spec: string): string {
  const parts = spec.split('/');
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.(ts|js|mjs)$/.test(f) && !f.endsWith('.d.ts') && !f.endsWith('.test.ts'))
    .map((f) => path.join(dir, f));
}

const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> };

test('every package src/, filters/ and bin/ load at run time is a dependency, not a devDependency', () => {
  const files = ['src', 'filters', 'bin'].flatMap(sourceFiles);
  expect(files.length).toBeGreaterThan(50);
  const wrong: string[] = [];
  const used = new Set<string>();
  for (const file of files) {
    for (const spec of runtimeImports(file, fs.readFileSync(path.join(ROOT, file), 'utf8'))) {
      if (spec.startsWith('.') || spec.startsWith('node:') || isBuiltin(spec)) continue;
      const name = packageOf(spec);
      used.add(name);
      if (!(name in pkg.dependencies)) wrong.push(`${file}: ${spec} (${name in pkg.devDependencies ? 'a devDependency' : 'not in package.json'})`);
    }
  }
  expect(wrong).toEqual([]);
  // The scan sees the real imports (a scan that found nothing would pass vacuously).
  for (const name of ['commander', 'yaml', 'zod', 'prom-client']) expect(used).toContain(name);
});

test('the scan tells a runtime import from an erased type-only one', () => {
  const src = [
    "import type { IService } from 'kubernetes-models/v1/Service';",
    "export type { IGateway } from '@kubernetes-models/gateway-api';",
    "import { type A, b } from 'mixed';",
    "import './side-effect.ts';",
    "export { x } from '@scope/pkg/sub';",
    "const later = await import('dynamic');",
  ].join('\n');
  expect(runtimeImports('x.ts', src)).toEqual(['mixed', './side-effect.ts', '@scope/pkg/sub', 'dynamic']);
  expect(packageOf('@scope/pkg/sub')).toBe('@scope/pkg');
  expect(packageOf('kubernetes-models/v1/Service')).toBe('kubernetes-models');
});
