/**
 * Invalid NetworkPolicies are refused when the mesh file is compiled, with file, line and field, as
 * the API server refuses them (kubernetes pkg/apis/networking/validation `ValidateNetworkPolicySpec`,
 * `ValidateNetworkPolicyPort`, `ValidateNetworkPolicyPeer`, `ValidateIPBlock`, apimachinery
 * `ValidateLabelSelector`). Valid edge forms are accepted.
 */
import { describe, expect, test } from 'vitest';
import { NETWORK_POLICIES } from '../../../src/netpol/compile.ts';
import { compileMesh } from '../../../src/state/compile.ts';
import { caught } from '../../helpers/config-error.ts';

const GATEWAY = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: waypoint, namespace: x }
spec: { gatewayClassName: istio-waypoint, listeners: [{ name: mesh, port: 15008, protocol: HBONE }] }
---
`;

/** A NetworkPolicy whose spec is `spec` (indented by two), its spec on line 10 of the file. */
const mesh = (spec: string) => `${GATEWAY}apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: np, namespace: x }
spec:
${spec}
`;

/** The mesh compiled with its NetworkPolicy part, which validates them. */
const compile = (text: string) => compileMesh({ text, file: 'mesh.yaml', parts: [NETWORK_POLICIES] });

describe('refused like the API server refuses them', () => {
  const cases: [string, string, string, RegExp, number][] = [
    ['endPort with a named port', '  ingress: [{ ports: [{ port: http, endPort: 90 }] }]', 'spec.ingress[0].ports[0].endPort', /may not be specified when `port` is non-numeric/, 10],
    ['endPort below port', '  ingress:\n  - ports:\n    - port: 90\n      endPort: 80', 'spec.ingress[0].ports[0].endPort', /greater than or equal to `port`/, 13],
    ['endPort without port', '  ingress: [{ ports: [{ endPort: 80 }] }]', 'spec.ingress[0].ports[0].endPort', /when `port` is not specified/, 10],
    ['port out of range', '  ingress: [{ ports: [{ port: 70000 }] }]', 'spec.ingress[0].ports[0].port', /between 1 and 65535/, 10],
    ['invalid port name', '  ingress: [{ ports: [{ port: "8080" }] }]', 'spec.ingress[0].ports[0].port', /at least one letter/, 10],
    ['unknown protocol', '  ingress: [{ ports: [{ port: 80, protocol: ICMP }] }]', 'spec.ingress[0].ports[0].protocol', /supported values: "TCP", "UDP", "SCTP"/, 10],
    ['except outside the cidr', '  ingress:\n  - from:\n    - ipBlock:\n        cidr: 10.0.0.0/16\n        except: [10.1.0.0/24]', 'spec.ingress[0].from[0].ipBlock.except[0]', /strict subset of `cidr`/, 14],
    ['except equal to the cidr', '  ingress: [{ from: [{ ipBlock: { cidr: 10.0.0.0/16, except: [10.0.0.0/16] } }] }]', 'spec.ingress[0].from[0].ipBlock.except[0]', /strict subset/, 10],
    ['cidr without a mask', '  ingress: [{ from: [{ ipBlock: { cidr: 10.0.0.1 } }] }]', 'spec.ingress[0].from[0].ipBlock.cidr', /valid CIDR/, 10],
    ['ipBlock with a selector', '  ingress: [{ from: [{ ipBlock: { cidr: 10.0.0.0/8 }, podSelector: {} }] }]', 'spec.ingress[0].from[0]', /may not specify both ipBlock and another peer/, 10],
    ['an empty peer', '  ingress: [{ from: [{}] }]', 'spec.ingress[0].from[0]', /must specify a peer/, 10],
    ['unknown policyType', '  policyTypes: [Ingress, Sideways]', 'spec.policyTypes[1]', /supported values: "Ingress", "Egress"/, 10],
    ['In without values', '  podSelector: { matchExpressions: [{ key: a, operator: In }] }', 'spec.podSelector.matchExpressions[0].values', /must be specified when `operator` is 'In' or 'NotIn'/, 10],
    ['Exists with values', '  podSelector: { matchExpressions: [{ key: a, operator: Exists, values: [x] }] }', 'spec.podSelector.matchExpressions[0].values', /may not be specified/, 10],
    ['unknown operator', '  podSelector: { matchExpressions: [{ key: a, operator: Gt, values: ["1"] }] }', 'spec.podSelector.matchExpressions[0].operator', /Unsupported value: "Gt"/, 10],
    ['invalid label key', '  ingress: [{ from: [{ namespaceSelector: { matchLabels: { "bad key": x } } }] }]', 'spec.ingress[0].from[0].namespaceSelector.matchLabels["bad key"]', /invalid label key/, 10],
    ['invalid egress too', '  egress: [{ to: [{}] }]', 'spec.egress[0].to[0]', /must specify a peer/, 10],
  ];
  test.each(cases)('%s', (_name, spec, field, message, line) => {
    const err = caught(() => compile(mesh(spec)));
    expect(err.location).toMatchObject({ file: 'mesh.yaml', object: 'NetworkPolicy/x/np', field });
    expect(err.message).toMatch(message);
    expect(err.location.line).toBe(line);
    expect(err.toString()).toMatch(new RegExp(`^mesh\\.yaml:${line}: `));
  });
});

describe('accepted', () => {
  test('valid forms compile and are kept for the NetworkPolicy mode', () => {
    const snap = compile(
      mesh(
        [
          '  podSelector: {}',
          '  policyTypes: [Ingress]',
          '  ingress:',
          '  - {}',
          '  - from: []',
          '    ports: [{ port: 80 }, { port: 1, endPort: 65535 }, { port: serve-81-tcp, protocol: TCP }, { protocol: UDP }]',
          '  - from:',
          '    - ipBlock: { cidr: 10.0.0.0/8, except: [10.1.0.0/16, 10.2.3.4/32] }',
          '    - ipBlock: { cidr: 10.0.0.1/32 }',
          '    - ipBlock: { cidr: "2001:db8::/32", except: ["2001:db8:1::/48"] }',
          '    - namespaceSelector: { matchExpressions: [{ key: kubernetes.io/metadata.name, operator: NotIn, values: [x] }] }',
          '      podSelector: { matchExpressions: [{ key: app, operator: DoesNotExist }] }',
        ].join('\n'),
      ),
    );
    expect(snap.resources('NetworkPolicy').map((r) => `${r.namespace}/${r.name}`)).toEqual(['x/np']);
  });
});
