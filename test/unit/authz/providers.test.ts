/**
 * An ext_authz provider's `service` is `[<Namespace>/]<Hostname>` (MeshConfig
 * `envoyExtAuthzGrpc.service`): istiod's `extensionproviders.LookupCluster` matches hostnames only,
 * the namespace prefix restricting where; a Service's short name never resolves.
 */
import { describe, expect, test } from 'vitest';
import { extAuthzProviders, lookupProviderService } from '../../../src/authz/providers.ts';
import { findProviderService } from '../../../src/ext-authz/endpoints.ts';
import { meshWith } from './mesh.ts';

const serviceEntry = (namespace: string, host: string, ip: string) => ({
  apiVersion: 'networking.istio.io/v1',
  kind: 'ServiceEntry',
  metadata: { name: 'shared', namespace },
  spec: { hosts: [host], addresses: [ip], ports: [{ number: 9000, name: 'grpc', protocol: 'GRPC' }], resolution: 'STATIC' },
});
const snap = meshWith([serviceEntry('foo', 'authz.example.com', '127.96.0.40'), serviceEntry('bar', 'authz.example.com', '127.96.0.41')]);

const found = (ref: string) => {
  const r = lookupProviderService(snap, ref);
  return typeof r === 'string' ? r : `${r.kind} ${r.namespace}/${r.name}`;
};

describe('lookupProviderService', () => {
  test('a Service FQDN, alone or with its namespace', () => {
    expect(found('authz.foo.svc.cluster.local')).toBe('Service foo/authz');
    expect(found('foo/authz.foo.svc.cluster.local')).toBe('Service foo/authz');
    expect(found('ext.example.com')).toBe('ServiceEntry foo/ext');
  });

  test('a short name is not a hostname, with or without namespace', () => {
    expect(found('foo/authz')).toBe('could not find service foo/authz in Istio service registry');
    expect(found('authz')).toBe('could not find service authz in Istio service registry');
    expect(found('authz.foo')).toMatch(/could not find/);
  });

  test('the namespace prefix restricts the lookup', () => {
    expect(found('bar/authz.foo.svc.cluster.local')).toMatch(/could not find/);
    expect(found('bar/authz.example.com')).toBe('ServiceEntry bar/shared');
  });

  test('a hostname in several namespaces needs the prefix', () => {
    expect(found('authz.example.com')).toBe(
      'found authz.example.com in multiple namespaces [bar foo], specify the namespace explicitly in the format of <Namespace>/<Hostname>',
    );
  });

  test('the engine and the client agree', () => {
    const providers = meshWith([], {
      extensionProviders: [
        { name: 'short', envoyExtAuthzGrpc: { service: 'foo/authz', port: 9000 } },
        { name: 'fqdn', envoyExtAuthzGrpc: { service: 'authz.foo.svc.cluster.local', port: 9000 } },
      ],
    });
    const p = extAuthzProviders(providers);
    expect(p.get('short')?.error).toBe('could not find service foo/authz in Istio service registry');
    expect(p.get('fqdn')?.error).toBeUndefined();
    expect(findProviderService(providers, 'foo/authz')).toBeUndefined();
    expect(findProviderService(providers, 'authz.foo.svc.cluster.local')?.name).toBe('authz');
  });
});
