/**
 * YAML of the waypoint's objects: one multi-document stream (`waypoint generate`) or a kustomize
 * base (deploy/base: a file per kind of object and its kustomization.yaml), both from the same
 * {@link waypointManifests} list, each object under a comment saying why it is there.
 */
import { Document } from 'yaml';
import { waypointManifests, type Manifest, type ManifestOptions } from './manifests.ts';

/** The options deploy/base is generated with (`waypoint generate`'s defaults, namespace `default`). */
export function baseOptions(version: string): ManifestOptions {
  return { namespace: 'default', name: 'waypoint', image: `node-waypoint:${version}`, clusterDomain: 'cluster.local' };
}

/** Wrap `text` into comment lines of at most `width` characters. */
function commentLines(text: string, width = 98): string {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/)) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines.map((l) => ` ${l}`).join('\n');
}

/** One object as a YAML document, its `why` as the comment above it. */
function documentOf(m: Manifest): string {
  const doc = new Document(m.object);
  if (doc.contents && m.why) (doc.contents as { commentBefore?: string }).commentBefore = commentLines(m.why);
  return doc.toString({ lineWidth: 0, indentSeq: false });
}

/** A stream of documents under a header comment. */
function stream(header: string, manifests: readonly Manifest[]): string {
  return `${header.split('\n').map((l) => `# ${l}`.trimEnd()).join('\n')}\n${manifests.map(documentOf).join('---\n')}`;
}

/** `waypoint generate`'s output: every object of the waypoint, in apply order. */
export function generateYaml(o: ManifestOptions, version: string): string {
  return stream(`node-waypoint ${version}: namespace waypoint "${o.name}" in namespace "${o.namespace}".\nApply with: ${generateCommand(o, version)} | kubectl apply -f -`, waypointManifests(o));
}

/** The `waypoint generate` command line that prints `o` (the flags that differ from the defaults). */
function generateCommand(o: ManifestOptions, version: string): string {
  const defaults = baseOptions(version);
  const flags = [`--namespace ${o.namespace}`];
  if (o.name !== defaults.name) flags.push(`--name ${o.name}`);
  if (o.image !== defaults.image) flags.push(`--image ${o.image}`);
  if (o.clusterDomain !== defaults.clusterDomain) flags.push(`--cluster-domain ${o.clusterDomain}`);
  return `waypoint generate ${flags.join(' ')}`;
}

/** deploy/base: file name → content, kustomization.yaml listing every other file in apply order. */
export function kustomizeBase(version: string): Map<string, string> {
  const o = baseOptions(version);
  const byFile = new Map<string, Manifest[]>();
  for (const m of waypointManifests(o)) byFile.set(m.file, [...(byFile.get(m.file) ?? []), m]);
  const generated = `Generated from src/deploy by \`npm run deploy:base\` (the objects of \`waypoint generate --namespace ${o.namespace}\`); do not edit.`;
  const files = new Map<string, string>();
  for (const [file, manifests] of byFile) files.set(file, stream(generated, manifests));
  const kustomization = {
    apiVersion: 'kustomize.config.k8s.io/v1beta1',
    kind: 'Kustomization',
    resources: [...byFile.keys()],
  };
  files.set('kustomization.yaml', stream(`${generated}\nAnother namespace: see deploy/overlays/example.`, [{ file: '', why: '', object: kustomization }]));
  return files;
}
