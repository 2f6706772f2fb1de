import { describe, expect, test } from 'vitest';
import { formatBaggage } from '../../../src/peer/baggage.ts';
import { MAX_BAGGAGE_LENGTH, parseBaggage } from '../../../src/peer/baggage-parse.ts';
import { EMPTY_PEER, type PeerInfo } from '../../../src/peer/peer-info.ts';
import type { Workload } from '../../../src/state/types.ts';

const EMPTY: PeerInfo = EMPTY_PEER;

function parse(value: string | readonly string[]): PeerInfo {
  const peer = parseBaggage(value);
  if (peer === undefined) throw new Error('expected a peer');
  return peer;
}

describe('ztunnel baggage (ZT:src/baggage.rs tests)', () => {
  test('full value', () => {
    expect(
      parse('k8s.cluster.name=K1,k8s.namespace.name=NS1,k8s.deployment.name=N1,service.name=N2,service.version=V1'),
    ).toEqual({
      ...EMPTY,
      cluster: 'K1',
      namespace: 'NS1',
      workload: 'N1',
      type: 'deployment',
      service: 'N2',
      app: 'N2',
      revision: 'V1',
      version: 'V1',
    });
  });

  test('empty values give unknown fields', () => {
    expect(parse('k8s.cluster.name=,k8s.namespace.name=,k8s.deployment.name=,service.name=,service.version=')).toEqual(
      EMPTY,
    );
  });

  test('several header lines are merged', () => {
    const peer = parse(['k8s.cluster.name=K1', 'k8s.namespace.name=NS1', 'k8s.job.name=N1', 'service.name=N2']);
    expect(peer).toMatchObject({ cluster: 'K1', namespace: 'NS1', workload: 'N1', type: 'job', service: 'N2' });
  });

  test('no header → undefined (next discovery method); empty header → all-unknown peer', () => {
    expect(parseBaggage(undefined)).toBeUndefined();
    expect(parseBaggage([])).toBeUndefined();
    expect(parse('')).toEqual(EMPTY);
  });

  test('what our own formatBaggage (ztunnel’s writer) emits reads back', () => {
    const workload = {
      clusterId: 'Kubernetes',
      namespace: 'demo',
      workloadType: 'cronjob',
      workloadName: 'nightly',
      canonicalName: 'reports',
      canonicalRevision: 'v7',
      region: 'eu-west1',
      zone: 'eu-west1-c',
    } as Workload;
    expect(parse(formatBaggage(workload))).toEqual({
      ...EMPTY,
      cluster: 'Kubernetes',
      namespace: 'demo',
      workload: 'nightly',
      type: 'cronjob',
      service: 'reports',
      app: 'reports',
      revision: 'v7',
      version: 'v7',
      region: 'eu-west1',
      availabilityZone: 'eu-west1-c',
    });
  });
});

describe('Envoy keys (PX:metadata_object.cc convertBaggageToWorkloadMetadata)', () => {
  test('app.* fill service.* when absent and the other way round', () => {
    expect(parse('app.name=a,app.version=1')).toMatchObject({ app: 'a', service: 'a', version: '1', revision: '1' });
    expect(parse('service.name=s,app.name=a,service.version=2,app.version=1')).toMatchObject({
      app: 'a',
      service: 's',
      version: '1',
      revision: '2',
    });
  });

  test('k8s.instance.name is the pod name; k8s.pod.name is a pod-type workload', () => {
    expect(parse('k8s.instance.name=web-1,k8s.pod.name=web-1')).toMatchObject({ name: 'web-1', workload: 'web-1', type: 'pod' });
  });

  test('identity never comes from baggage', () => {
    expect(parse('identity=spiffe://x/ns/a/sa/b,IDENTITY=y').identity).toBe('');
  });
});

describe('H5 malformed inputs degrade gracefully', () => {
  test('member without = is skipped', () => {
    expect(parse('k8s.namespace.name,k8s.cluster.name=c')).toEqual({ ...EMPTY, cluster: 'c' });
  });

  test('stray commas and blank members', () => {
    expect(parse(',,k8s.namespace.name=ns,, ,')).toEqual({ ...EMPTY, namespace: 'ns' });
  });

  test('duplicate keys: last wins (ztunnel and Envoy), and a later empty value clears', () => {
    expect(parse('k8s.namespace.name=a,k8s.namespace.name=b').namespace).toBe('b');
    expect(parse('k8s.namespace.name=a,k8s.namespace.name=').namespace).toBe('');
    expect(parse(['k8s.namespace.name=a', 'k8s.namespace.name=b']).namespace).toBe('b');
    // The last workload key decides both the name and the type.
    expect(parse('k8s.deployment.name=d,k8s.job.name=j')).toMatchObject({ workload: 'j', type: 'job' });
    expect(parse('k8s.deployment.name=d,k8s.pod.name=')).toMatchObject({ workload: '', type: '' });
  });

  test('W3C properties after ; are stripped, OWS trimmed', () => {
    expect(parse('service.name = web ;ttl=3;x, k8s.namespace.name\t=\tns;p')).toMatchObject({ service: 'web', namespace: 'ns' });
  });

  test('value is everything after the first =', () => {
    expect(parse('service.name=a=b').service).toBe('a=b');
  });

  test('percent-encoding is kept verbatim, as ztunnel and Envoy do', () => {
    expect(parse('service.name=a%2Cb,k8s.namespace.name=%ZZ')).toMatchObject({ service: 'a%2Cb', namespace: '%ZZ' });
  });

  test('non-UTF-8 / non-ASCII bytes drop only that member', () => {
    const latin1 = Buffer.from([...Buffer.from('service.name=caf'), 0xe9, ...Buffer.from(',k8s.namespace.name=ns')]).toString(
      'latin1',
    );
    expect(parse(latin1)).toEqual({ ...EMPTY, namespace: 'ns' });
    expect(parse('service.name=café,k8s.cluster.name=c\u0000x,cloud.region=r')).toEqual({ ...EMPTY, region: 'r' });
    expect(parse('service.name=a b').service).toBe('');
  });

  test('200 entries', () => {
    const members = Array.from({ length: 199 }, (_, i) => `other${i}=v${i}`);
    members.push('k8s.namespace.name=ns');
    expect(parse(members.join(',')).namespace).toBe('ns');
  });

  test('8 KB value', () => {
    const long = 'x'.repeat(8 * 1024);
    expect(parse(`service.name=${long},k8s.namespace.name=ns`)).toMatchObject({ service: long, namespace: 'ns' });
  });

  test(`more than ${MAX_BAGGAGE_LENGTH} bytes → all-unknown peer, quickly`, () => {
    const start = performance.now();
    const big = `k8s.namespace.name=ns,${'a'.repeat(MAX_BAGGAGE_LENGTH)}`;
    expect(parse(big)).toEqual(EMPTY);
    expect(parse(`k8s.namespace.name=ns,${'a'.repeat(MAX_BAGGAGE_LENGTH - 30)}`).namespace).toBe('ns');
    expect(performance.now() - start).toBeLessThan(200);
  });

  test('long whitespace runs are linear', () => {
    const start = performance.now();
    expect(parse(`service.name=${' '.repeat(60_000)}x${' '.repeat(4000)}`).service).toBe('x');
    expect(performance.now() - start).toBeLessThan(200);
  });

  test('the result is frozen', () => {
    expect(Object.isFrozen(parse('k8s.namespace.name=ns'))).toBe(true);
  });
});
