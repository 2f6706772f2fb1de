/**
 * Every validation error names the file, the line of the offending node, the document, the object
 * and the field. Each case marks the expected line with `#!` in its YAML.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';

import { ConfigError } from '../../../src/util/errors.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import { MeshStore } from '../../../src/state/store.ts';
import { caught } from '../../helpers/config-error.ts';

const GATEWAY = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: waypoint, namespace: default}
spec: {gatewayClassName: istio-waypoint}
`;

/** Line (1-based) holding the `#!` marker. */
const markedLine = (text: string): number => {
  const i = text.split('\n').findIndex((l) => l.includes('#!'));
  if (i < 0) throw new Error('test case has no #! marker');
  return i + 1;
};


interface Case {
  name: string;
  /** Documents after the Gateway (document 0). */
  yaml: string;
  document: number;
  object?: string;
  field?: string;
  message: RegExp;
}

const cases: Case[] = [
  {
    name: 'YAML syntax error',
    yaml: `apiVersion: v1
kind: Service
metadata:
  name: broken
spec:
  selector: {app: a
  ports: [] #!
`,
    document: 1,
    message: /YAML syntax error/,
  },
  {
    name: 'missing kind',
    yaml: `apiVersion: v1 #!
metadata: {name: a}
`,
    document: 1,
    field: 'kind',
    message: /has no kind/,
  },
  {
    name: 'missing apiVersion',
    yaml: `kind: Service #!
metadata: {name: a}
`,
    document: 1,
    field: 'apiVersion',
    message: /Service has no apiVersion/,
  },
  {
    name: 'missing metadata.name',
    yaml: `apiVersion: v1
kind: Service
metadata: #!
  namespace: shop
`,
    document: 1,
    field: 'metadata.name',
    message: /Service has no metadata.name/,
  },
  {
    name: 'bad podIP',
    yaml: `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: shop}
status:
  podIP: 10.0.0.999 #!
`,
    document: 1,
    object: 'Pod/shop/p',
    field: 'status.podIP',
    message: /"10.0.0.999" is not a valid IP address/,
  },
  {
    name: 'bad podIPs entry',
    yaml: `apiVersion: v1
kind: Pod
metadata: {name: p}
status:
  podIPs:
  - ip: 10.0.0.1
  - ip: not-an-ip #!
`,
    document: 1,
    object: 'Pod/default/p',
    field: 'status.podIPs[1].ip',
    message: /"not-an-ip" is not a valid IP address/,
  },
  {
    name: 'bad clusterIP',
    yaml: `apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop}
spec:
  clusterIP: 10.96.0.1.1 #!
  ports: [{port: 80}]
`,
    document: 1,
    object: 'Service/shop/s',
    field: 'spec.clusterIP',
    message: /"10.96.0.1.1" is not a valid IP address/,
  },
  {
    name: 'bad IPv6 clusterIPs entry',
    yaml: `apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop}
spec:
  clusterIPs:
  - 10.96.0.1
  - fd00::zz #!
`,
    document: 1,
    object: 'Service/shop/s',
    field: 'spec.clusterIPs[1]',
    message: /"fd00::zz" is not a valid IP address/,
  },
  {
    name: 'WorkloadEntry address that is not an IP',
    yaml: `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm, namespace: shop}
spec:
  address: vm.example.com #!
`,
    document: 1,
    object: 'WorkloadEntry/shop/vm',
    field: 'spec.address',
    message: /"vm.example.com" is not an IP address/,
  },
  {
    name: 'port out of range',
    yaml: `apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop}
spec:
  ports:
  - port: 80
  - port: 70000 #!
`,
    document: 1,
    object: 'Service/shop/s',
    field: 'spec.ports[1].port',
    message: /between 1 and 65535, got 70000/,
  },
  {
    name: 'port not an integer',
    yaml: `apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop}
spec:
  ports:
  - port: 80.5 #!
`,
    document: 1,
    object: 'Service/shop/s',
    field: 'spec.ports[0].port',
    message: /must be an integer port number \(1-65535\), got 80.5/,
  },
  {
    name: 'port as a string',
    yaml: `apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop}
spec:
  ports:
  - port: "80" #!
`,
    document: 1,
    object: 'Service/shop/s',
    field: 'spec.ports[0].port',
    message: /got "80"/,
  },
  {
    name: 'Service port without port',
    yaml: `apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop}
spec:
  ports:
  - port: 80
    name: http
  - name: grpc #!
    targetPort: 9090
`,
    document: 1,
    object: 'Service/shop/s',
    field: 'spec.ports[1].port',
    message: /is required/,
  },
  {
    name: 'targetPort 0',
    yaml: `apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop}
spec:
  ports:
  - port: 80
    targetPort: 0 #!
`,
    document: 1,
    object: 'Service/shop/s',
    field: 'spec.ports[0].targetPort',
    message: /got 0/,
  },
  {
    name: 'containerPort out of range',
    yaml: `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: shop}
spec:
  containers:
  - name: app
    ports:
    - containerPort: 0 #!
`,
    document: 1,
    object: 'Pod/shop/p',
    field: 'spec.containers[0].ports[0].containerPort',
    message: /between 1 and 65535/,
  },
  {
    name: 'WorkloadEntry port map value',
    yaml: `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm, namespace: shop}
spec:
  address: 10.0.0.1
  ports:
    http: 99999 #!
`,
    document: 1,
    object: 'WorkloadEntry/shop/vm',
    field: 'spec.ports.http',
    message: /between 1 and 65535/,
  },
  {
    name: 'label value that is not a string',
    yaml: `apiVersion: v1
kind: Pod
metadata:
  name: p
  labels:
    version: 2 #!
`,
    document: 1,
    object: 'Pod/default/p',
    field: 'metadata.labels.version',
    message: /label values must be strings/,
  },
  {
    name: 'duplicate object',
    yaml: `apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop}
---
apiVersion: v1
kind: Service
metadata:
  name: s #!
  namespace: shop
`,
    document: 2,
    object: 'Service/shop/s',
    field: 'metadata.name',
    message: /duplicate Service\/shop\/s: already defined in document 1 \(line 6\)/,
  },
  {
    name: 'ServiceEntry without hosts',
    yaml: `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se, namespace: shop}
spec:
  hosts: [] #!
`,
    document: 1,
    object: 'ServiceEntry/shop/se',
    field: 'spec.hosts',
    message: /at least one host/,
  },
  {
    name: 'ServiceEntry bad address',
    yaml: `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se, namespace: shop}
spec:
  hosts: [a.example.com]
  addresses:
  - 10.0.0.0/40 #!
`,
    document: 1,
    object: 'ServiceEntry/shop/se',
    field: 'spec.addresses[0]',
    message: /"10.0.0.0\/40" is not a valid IP address or CIDR/,
  },
  {
    name: 'ServiceEntry STATIC endpoint with a hostname',
    yaml: `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se, namespace: shop}
spec:
  hosts: [a.example.com]
  resolution: STATIC
  endpoints:
  - address: 10.0.0.1
  - address: a.example.com #!
`,
    document: 1,
    object: 'ServiceEntry/shop/se',
    field: 'spec.endpoints[1].address',
    message: /hostnames need resolution: DNS/,
  },
  {
    name: 'invalid waypoint-for',
    yaml: `apiVersion: v1
kind: Namespace
metadata: {name: other}
`,
    document: 0,
    object: 'Gateway/default/waypoint',
    field: 'metadata.labels["istio.io/waypoint-for"]',
    message: /must be service, workload, all or none, got "services"/,
  },
  {
    name: 'item of a kind: List',
    yaml: `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: ok, namespace: shop}
- apiVersion: v1
  kind: Service
  metadata: {name: bad, namespace: shop}
  spec:
    ports:
    - port: -1 #!
`,
    document: 1,
    object: 'Service/shop/bad',
    field: 'spec.ports[0].port',
    message: /got -1/,
  },
  {
    name: 'MeshConfig inside the istio ConfigMap',
    yaml: `apiVersion: v1
kind: ConfigMap
metadata: {name: istio, namespace: istio-system}
data:
  mesh: |
    defaultConfig: {}
    trustDomain: [a, b] #!
`,
    document: 1,
    object: 'ConfigMap/istio-system/istio',
    field: 'data.mesh.trustDomain',
    message: /MeshConfig trustDomain must be a string, got \["a","b"\]/,
  },
];

describe('ConfigError locations', () => {
  test.each(cases)('$name', (c) => {
    let gateway = GATEWAY;
    let yaml = c.yaml;
    if (c.name === 'invalid waypoint-for') {
      gateway = GATEWAY.replace(
        'metadata: {name: waypoint, namespace: default}',
        'metadata:\n  name: waypoint\n  namespace: default\n  labels:\n    istio.io/waypoint-for: services #!',
      );
      yaml = yaml.replace('#!', '');
    }
    const text = `${gateway}---\n${yaml}`;
    const err = caught(() => compileMesh({ text, file: 'mesh.yaml' }));
    const line = markedLine(text);
    expect(err.location).toEqual({ file: 'mesh.yaml', line, document: c.document, object: c.object, field: c.field });
    expect(err.message).toMatch(c.message);
    const printed = err.toString();
    if (process.env.SHOW_ERRORS) console.log(printed);
    expect(printed).toContain(`mesh.yaml:${line}: document ${c.document}`);
    if (c.object) expect(printed).toContain(c.object);
    if (c.field) expect(printed).toContain(`field ${c.field}`);
  });
});

describe('errors from files', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'wp-state-err-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('MeshStore.open rejects an invalid mesh file with its path and line', async () => {
    const file = join(dir, 'bad.yaml');
    await writeFile(file, `${GATEWAY}---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {podIP: "1.2.3"}\n`);
    const err = await MeshStore.open({ meshFile: file }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect(String(err)).toBe(`${file}:9: document 1: Pod/default/p: field status.podIP: "1.2.3" is not a valid IP address`);
  });

  test('explicit MeshConfig file errors point into that file', async () => {
    const file = join(dir, 'mesh.yaml');
    const meshConfigFile = join(dir, 'meshconfig.yaml');
    await writeFile(file, GATEWAY);
    await writeFile(meshConfigFile, 'trustDomain: a\ntrustDomainAliases: b\n');
    const err = await MeshStore.open({ meshFile: file, meshConfigFile }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).location).toEqual({ file: meshConfigFile, line: 2, field: 'trustDomainAliases' });
    expect(String(err)).toContain('must be a list of strings');
  });

  test('a missing mesh file is an error', async () => {
    await expect(MeshStore.open({ meshFile: join(dir, 'nope.yaml') })).rejects.toThrow(/ENOENT/);
  });
});

test('harmless extra fields and unknown kinds are accepted', () => {
  const text = `${GATEWAY}---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: shop, uid: abc, resourceVersion: "12"}
spec:
  type: ClusterIP
  sessionAffinity: None
  clusterIP: 10.96.0.1
  ports: [{port: 80, protocol: TCP, nodePort: 30000}]
status: {loadBalancer: {}}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {anything: [1, 2, 3]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: d}
`;
  const snap = compileMesh({ text, file: 'extra.yaml' });
  expect(snap.services.map((s) => s.hostname)).toEqual(['s.shop.svc.cluster.local']);
  expect(snap.resources('Widget').map((r) => [r.apiVersion, r.namespace, r.name])).toEqual([['example.com/v1', 'default', 'w']]);
  expect(snap.resources('DaemonSet')).toEqual([]);
});

test('a kind and name shared by different API groups is not a duplicate', () => {
  const text = `${GATEWAY}---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: waypoint, namespace: default}
spec: {servers: []}
`;
  const snap = compileMesh({ text, file: 'g.yaml' });
  expect(snap.resources('Gateway').map((r) => r.apiVersion)).toEqual(['gateway.networking.k8s.io/v1', 'networking.istio.io/v1']);
});

test('kind: List items are compiled like top-level objects', () => {
  const text = `apiVersion: v1
kind: List
items:
- ${GATEWAY.trimEnd().split('\n').join('\n  ')}
- apiVersion: v1
  kind: Service
  metadata: {name: s, labels: {istio.io/use-waypoint: waypoint}}
  spec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}
`;
  const snap = compileMesh({ text, file: 'list.yaml' });
  expect(snap.waypoint.name).toBe('waypoint');
  expect(snap.resolveTarget('10.96.0.1', 80)?.kind).toBe('service');
});
