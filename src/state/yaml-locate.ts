/**
 * Map a field path inside a parsed YAML document back to a source line, and print field paths the
 * way Kubernetes error messages do (`spec.ports[1].port`, `metadata.labels["istio.io/rev"]`).
 */
import { isMap, isScalar, isSeq, type Document, type LineCounter, type Node } from 'yaml';

/** Path of a field inside an object: map keys and sequence indexes, outermost first. */
export type FieldPath = readonly (string | number)[];

const PLAIN_KEY = /^[A-Za-z_$][\w$-]*$/;

/** `['spec', 'ports', 1, 'port']` → `spec.ports[1].port`; keys with dots or slashes are quoted. */
export function formatFieldPath(path: FieldPath): string {
  let out = '';
  for (const step of path) {
    if (typeof step === 'number') out += `[${step}]`;
    else if (PLAIN_KEY.test(step)) out += out ? `.${step}` : step;
    else out += `[${JSON.stringify(step)}]`;
  }
  return out;
}

/**
 * 1-based line of the deepest node along `path` that exists in `doc`: the value itself when it is a
 * scalar or a sequence item, else the line of its key (so a missing `spec.ports[1].port` points at
 * `ports[1]`, and an invalid `spec` mapping points at `spec:`). Undefined when even the document
 * root has no position.
 */
export function lineOf(doc: Document, counter: LineCounter, path: FieldPath): number | undefined {
  let node: unknown = doc.contents;
  let line = startLine(node, counter);
  for (const step of path) {
    if (isMap(node) && typeof step === 'string') {
      const pair = node.items.find((p) => (isScalar(p.key) ? String(p.key.value) : p.key) === step);
      if (!pair) break;
      line = startLine(pair.key, counter) ?? line;
      node = pair.value;
      if (isScalar(node) || isSeq(node)) line = startLine(node, counter) ?? line;
    } else if (isSeq(node) && typeof step === 'number') {
      const item = node.items[step];
      if (item === undefined) break;
      node = item;
      line = startLine(node, counter) ?? line;
    } else {
      break;
    }
  }
  return line;
}

/** The node at `path` (no fallback), or undefined. */
export function nodeAt(doc: Document, path: FieldPath): Node | undefined {
  const found = doc.getIn(path, true);
  return found && typeof found === 'object' ? (found as Node) : undefined;
}

function startLine(node: unknown, counter: LineCounter): number | undefined {
  const range = (node as { range?: [number, number, number] } | null | undefined)?.range;
  return range ? counter.linePos(range[0]).line : undefined;
}
