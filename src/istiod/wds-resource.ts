/**
 * Decode and validate one WDS resource (an `Any` holding an `istio.workload.Address`), refusing
 * what ztunnel refuses when it converts a resource (istio/ztunnel src/state/workload.rs,
 * src/state/service.rs `TryFrom`): addresses that are not 4 or 16 bytes, a `GatewayAddress` with
 * no destination, a `services` key without `/`, enum values it does not know. A refused resource
 * is NACKed and keeps its previous state (wds-client.ts).
 */
import { fromBinary } from '@bufbuild/protobuf';
import { normalizeIp } from '../state/index.ts';
import {
  ADDRESS_TYPE_URL,
  AddressSchema,
  IpFamiliesValue,
  LbHealthPolicyValue,
  LbModeValue,
  LbScopeValue,
  NetworkModeValue,
  TunnelProtocolValue,
  WorkloadStatusValue,
  type GatewayAddress,
  type NetworkAddress,
  type WdsService,
  type WdsWorkload,
} from './proto-workload.ts';
import type { Resource } from './proto-xds.ts';

/** A resource that decoded and validated. */
export type WdsEntry = { readonly kind: 'workload'; readonly value: WdsWorkload } | { readonly kind: 'service'; readonly value: WdsService };

/** The IP of 4 or 16 raw bytes, normalised (IPv4-mapped IPv6 unwrapped); undefined for another length. */
export function ipFromBytes(bytes: Uint8Array): string | undefined {
  if (bytes.length === 4) return bytes.join('.');
  if (bytes.length !== 16) return undefined;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] << 8) | bytes[i + 1]).toString(16));
  return normalizeIp(groups.join(':'));
}

/** The enum's known values. */
const known = (values: Readonly<Record<string, number>>) => new Set(Object.values(values));
const TUNNEL = known(TunnelProtocolValue);
const STATUS = known(WorkloadStatusValue);
const NETWORK_MODE = known(NetworkModeValue);
const IP_FAMILIES = known(IpFamiliesValue);
const LB_SCOPE = known(LbScopeValue);
const LB_MODE = known(LbModeValue);
const LB_HEALTH = known(LbHealthPolicyValue);

function checkEnum(value: number, values: ReadonlySet<number>, what: string): void {
  if (!values.has(value)) throw new Error(`${what} has unknown value ${value}`);
}

function checkNetworkAddress(a: NetworkAddress, what: string): void {
  const ip = ipFromBytes(a.address);
  if (ip === undefined) throw new Error(`${what}: an address is ${a.address.length} bytes (an IP address is 4 or 16)`);
  if (a.length !== undefined && a.length > (a.address.length === 4 ? 32 : 128)) throw new Error(`${what}: prefix length ${a.length} is too long for ${ip}`);
}

function checkGatewayAddress(g: GatewayAddress, what: string): void {
  const d = g.destination;
  if (d.case === undefined) throw new Error(`${what} has no destination (hostname or address)`);
  if (d.case === 'address') checkNetworkAddress(d.value, what);
  else if (!d.value.hostname) throw new Error(`${what} has an empty hostname`);
  if (g.hboneMtlsPort > 65535) throw new Error(`${what}: hbone_mtls_port ${g.hboneMtlsPort} is not a port`);
}

function checkPort(n: number, what: string, allowZero: boolean): void {
  if (n > 65535 || (n === 0 && !allowZero)) throw new Error(`${what} ${n} is not a port number`);
}

function checkWorkload(w: WdsWorkload): void {
  if (!w.uid) throw new Error('workload without uid');
  w.addresses.forEach((a) => {
    if (ipFromBytes(a) === undefined) throw new Error(`an address is ${a.length} bytes (an IP address is 4 or 16)`);
  });
  checkEnum(w.tunnelProtocol, TUNNEL, 'tunnel_protocol');
  checkEnum(w.status, STATUS, 'status');
  checkEnum(w.networkMode, NETWORK_MODE, 'network_mode');
  if (w.waypoint) checkGatewayAddress(w.waypoint, 'waypoint');
  if (w.networkGateway) checkGatewayAddress(w.networkGateway, 'network_gateway');
  for (const [key, list] of Object.entries(w.services)) {
    const slash = key.indexOf('/');
    if (slash <= 0 || slash === key.length - 1) throw new Error(`services key ${JSON.stringify(key)} is not namespace/hostname`);
    for (const p of list.ports) {
      checkPort(p.servicePort, `services[${key}] service_port`, false);
      checkPort(p.targetPort, `services[${key}] target_port`, true);
    }
  }
}

function checkService(s: WdsService): void {
  if (!s.namespace || !s.hostname) throw new Error('service without namespace or hostname');
  s.addresses.forEach((a) => checkNetworkAddress(a, 'addresses'));
  for (const p of s.ports) {
    checkPort(p.servicePort, 'service_port', false);
    checkPort(p.targetPort, 'target_port', true);
  }
  if (s.waypoint) checkGatewayAddress(s.waypoint, 'waypoint');
  s.weightedWaypoints.forEach((w) => {
    if (!w.destination) throw new Error('weighted_waypoints entry has no destination');
    checkGatewayAddress(w.destination, 'weighted_waypoints destination');
  });
  checkEnum(s.ipFamilies, IP_FAMILIES, 'ip_families');
  const lb = s.loadBalancing;
  if (lb) {
    lb.routingPreference.forEach((r) => checkEnum(r, LB_SCOPE, 'load_balancing.routing_preference'));
    checkEnum(lb.mode, LB_MODE, 'load_balancing.mode');
    checkEnum(lb.healthPolicy, LB_HEALTH, 'load_balancing.health_policy');
  }
}

/**
 * The workload or service of `resource`.
 * @throws Error saying why it is refused (no payload, another type, undecodable, invalid field).
 */
export function decodeAddressResource(resource: Resource): WdsEntry {
  const any = resource.resource;
  if (!any) throw new Error('no resource in the xDS payload');
  if (any.typeUrl !== ADDRESS_TYPE_URL) throw new Error(`resource of type ${JSON.stringify(any.typeUrl)}, expected ${ADDRESS_TYPE_URL}`);
  let address;
  try {
    address = fromBinary(AddressSchema, any.value);
  } catch (err) {
    throw new Error(`cannot be decoded: ${(err as Error).message}`, { cause: err });
  }
  const t = address.type;
  if (t.case === 'workload') {
    checkWorkload(t.value);
    return { kind: 'workload', value: t.value };
  }
  if (t.case === 'service') {
    checkService(t.value);
    return { kind: 'service', value: t.value };
  }
  throw new Error('Address holds neither a workload nor a service');
}
