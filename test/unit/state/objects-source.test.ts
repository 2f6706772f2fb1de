/**
 * The mesh compiled from parsed objects (the API server's JSON) is the mesh compiled from the same
 * objects as YAML text: one compiler, so behaviour never depends on where config came from. Only
 * error locations differ: the object and field instead of file:line. And workloads/services can
 * come from a discovery source (istiod) instead of the objects.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { parseAllDocuments } from 'yaml';

import { AUTHZ } from '../../../src/authz/index.ts';
import { NETWORK_POLICIES } from '../../../src/netpol/index.ts';
import { compileDestinationRules, DESTINATION_RULES, ROUTES } from '../../../src/routing/index.ts';
import { compileMesh, type CompileOptions } from '../../../src/state/compile.ts';
import type { DiscoveryContext, MeshSnapshot, Service, Workload } from '../../../src/state/types.ts';
import { ConfigError } from '../../../src/util/errors.ts';
import { PEER_AUTHENTICATION } from '../../../src/ztunnel/index.ts';
import { caught } from '../../helpers/config-error.ts';
import { served, type Doc } from '../../helpers/fake-kube.ts';
import { authorizationPolicy, meshText, namespace, networkPolicy, pod, service, servicePort, toService, waypointGateway } from '../../helpers/mesh.ts';

const SHOP = readFileSync(new URL('../../fixtures/mesh/shop.yaml', import.meta.url), 'utf8');

/** More kinds than shop.yaml has: every kind the cluster mode watches, compiled or kept. */
const EXTRA: Doc[] = [
  { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'GatewayClass', metadata: { name: 'istio-waypoint' }, spec: { controllerName: 'istio.io/mesh-controller' } },
  networkPolicy('db-from-shop', 'other', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'shop' } } }] }] }),
  { apiVersion: 'networking.istio.io/v1', kind: 'DestinationRule', metadata: { name: 'reviews', namespace: 'shop' }, spec: { host: 'reviews.shop.svc.cluster.local', trafficPolicy: { loadBalancer: { simple: 'ROUND_ROBIN' } } } },
  { apiVersion: 'security.istio.io/v1', kind: 'PeerAuthentication', metadata: { name: 'default', namespace: 'istio-system' }, spec: { mtls: { mode: 'STRICT' } } },
  { apiVersion: 'telemetry.istio.io/v1', kind: 'Telemetry', metadata: { name: 'mesh-default', namespace: 'istio-system' }, spec: { accessLogging: [{ providers: [{ name: 'envoy' }] }] } },
  authorizationPolicy('deny-delete', { targetRefs: toService('reviews'), action: 'DENY', rules: [{ to: [{ operation: { methods: ['DELETE'] } }] }] }, { namespace: 'shop' }),
];

const PARTS = [AUTHZ, NETWORK_POLICIES, PEER_AUTHENTICATION, ROUTES, DESTINATION_RULES.with({ compile: (s) => compileDestinationRules(s, 'ROUND_ROBIN') })];

/** The documents of `text` as the API server would serve them (uid, resourceVersion, managedFields, ...). */
const asServed = (text: string): Doc[] => parseAllDocuments(text).map((d, i) => served(d.toJS() as Doc, 100 + i));

const decide = (snap: MeshSnapshot, ip: string, port: number, method: string, principal: string) =>
  snap.part(AUTHZ).forTarget(snap.resolveTarget(ip, port)!).http.evaluate({ principal, method, path: '/', host: 'reviews' }).decision;

describe('one compiler for YAML text and API objects', () => {
  test('the same mesh from YAML text and from the API server JSON compiles to the same snapshot', () => {
    const text = `${SHOP}---\n${meshText(...EXTRA)}`;
    const opts: CompileOptions = { parts: PARTS };
    const fromText = compileMesh({ text, file: 'shop.yaml', ...opts });
    const objects = asServed(text);
    expect((objects[0].metadata as Doc).managedFields).toBeDefined();
    const fromObjects = compileMesh({ objects: JSON.parse(JSON.stringify(objects)) as unknown[], origin: 'the Kubernetes API', ...opts });

    expect(JSON.parse(JSON.stringify(fromObjects.toJSON()))).toEqual(JSON.parse(JSON.stringify(fromText.toJSON())));
    expect([...fromObjects.kinds()].sort()).toEqual([...fromText.kinds()].sort());
    expect(fromObjects.services.length).toBeGreaterThan(3);
    // The parts compiled from either source decide alike.
    for (const snap of [fromText, fromObjects]) {
      expect(decide(snap, '10.96.0.10', 9080, 'GET', 'spiffe://example.org/ns/shop/sa/productpage')).toBe('ALLOW');
      expect(decide(snap, '10.96.0.10', 9080, 'DELETE', 'spiffe://example.org/ns/shop/sa/productpage')).toBe('DENY');
      expect(decide(snap, '10.96.0.10', 9080, 'GET', 'spiffe://example.org/ns/shop/sa/other')).toBe('DENY');
    }
    // Resources not read from a file have no file position.
    expect(fromObjects.resources('AuthorizationPolicy')[0].locate).toBeUndefined();
  });
});

describe('errors of parsed objects name the object and field, not file:line', () => {
  const base = [waypointGateway('demo'), namespace('demo')].map((d, i) => served(d, i + 1));
  const compileObjects = (...docs: Doc[]) => compileMesh({ objects: [...base, ...docs.map((d, i) => served(d, 50 + i))], origin: 'the Kubernetes API', parts: [AUTHZ] });

  test('an invalid field of a compiled kind', () => {
    const bad = service({ name: 'web', namespace: 'demo', vip: '127.0.92.100', ports: [servicePort('http', 80)] });
    ((bad.spec as Doc).ports as Doc[])[0].port = 70000;
    const err = caught(() => compileObjects(bad));
    expect(err.location).toEqual({ object: 'Service/demo/web', field: 'spec.ports[0].port' });
    expect(String(err)).toMatch(/^Service\/demo\/web: field spec\.ports\[0\]\.port: /);
  });

  test('an invalid policy (a part refuses it)', () => {
    const err = caught(() => compileObjects(authorizationPolicy('bad', { action: 'DENY', rules: [{ to: [{ operation: { methods: 'GET' } }] }] }, { namespace: 'demo' })));
    expect(err.location.file).toBeUndefined();
    expect(err.location.line).toBeUndefined();
    expect(err.location.object).toBe('AuthorizationPolicy/demo/bad');
    expect(err.location.field).toBe('spec.rules[0].to[0].operation.methods');
  });

  test('an object without apiVersion, or of a kind its group does not have, is named as far as it names itself', () => {
    const noVersion = caught(() => compileObjects({ kind: 'Service', metadata: { name: 'x', namespace: 'demo' } }));
    expect(noVersion.location).toEqual({ object: 'Service/demo/x', field: 'apiVersion' });
    const typo = caught(() => compileObjects({ apiVersion: 'security.istio.io/v1', kind: 'AuthorizationPolicie', metadata: { name: 'y', namespace: 'demo' } }));
    expect(typo.location).toEqual({ object: 'AuthorizationPolicie/demo/y', field: 'kind' });
    expect(typo.message).toMatch(/did you mean AuthorizationPolicy\?/);
  });

  test('no waypoint Gateway names the source, not a file', () => {
    const err = caught(() => compileMesh({ objects: [served(namespace('demo'), 1)], origin: 'the Kubernetes API' }));
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.location).toEqual({});
    expect(err.message).toMatch(/^no Gateway with gatewayClassName istio-waypoint in the Kubernetes API/);
  });
});

describe('discovered workloads and services', () => {
  test('replace the objects’ Pods and Services; resolve gets the waypoint and namespace labels; results are frozen', () => {
    const objects = [
      waypointGateway('demo', { for: 'all' }),
      namespace('demo', { team: 'a' }),
      service({ name: 'ignored', namespace: 'demo', vip: '127.0.92.200', ports: [servicePort('http', 80)] }),
      pod({ name: 'ignored-1', namespace: 'demo', labels: { app: 'ignored' }, ip: '127.0.92.201' }),
    ].map((d, i) => served(d, i + 1));
    // What a discovery source builds: here, the mesh of another compile.
    const elsewhere = compileMesh({
      text: meshText(
        waypointGateway('demo', { for: 'all' }),
        namespace('demo', { 'istio.io/use-waypoint': 'waypoint' }),
        service({ name: 'web', namespace: 'demo', vip: '127.0.92.100', ports: [servicePort('http', 80, 8080)] }),
        pod({ name: 'web-1', namespace: 'demo', labels: { app: 'web' }, ip: '127.0.92.11' }),
      ),
      file: 'elsewhere.yaml',
    });
    const calls: DiscoveryContext[] = [];
    const copy = <T>(v: T): T => structuredClone(v);
    const discovered = {
      resolve(ctx: DiscoveryContext) {
        calls.push(ctx);
        return {
          workloads: elsewhere.workloads.map((w) => copy(w) as Workload),
          services: elsewhere.services.map((s) => ({ ...s, endpoints: new Map(s.endpoints) }) as Service),
        };
      },
    };
    const snap = compileMesh({ objects, discovered, domainSuffix: 'example.local', clusterId: 'c1' });
    expect(calls).toHaveLength(1);
    expect(calls[0].waypoint).toEqual(snap.waypoint);
    expect(calls[0].waypoint.name).toBe('waypoint');
    expect([calls[0].trustDomain, calls[0].domainSuffix, calls[0].clusterId]).toEqual(['cluster.local', 'example.local', 'c1']);
    expect(calls[0].namespaceLabels('demo')).toEqual({ team: 'a', 'kubernetes.io/metadata.name': 'demo' });
    expect(snap.services.map((s) => s.name)).toEqual(['web']);
    expect(snap.workloads.map((w) => w.name)).toEqual(['web-1']);
    expect(snap.resolveTarget('127.0.92.100', 80)?.kind).toBe('service');
    expect(snap.resolveTarget('127.0.92.200', 80)).toBeUndefined();
    expect(Object.isFrozen(snap.services[0])).toBe(true);
    expect(Object.isFrozen(snap.workloads[0].labels)).toBe(true);
  });
});
