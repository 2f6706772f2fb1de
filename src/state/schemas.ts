/**
 * zod shapes of the Kubernetes / Istio / Gateway API objects the mesh compiler reads. Only the
 * fields this project uses are listed; extra fields are allowed and dropped. `null` is accepted
 * wherever a field is optional (YAML `labels:` with nothing after it), as the API server does.
 * Messages are written to be read after `file:line: ... field spec.ports[1].port:`.
 */
import { z } from 'zod';

import { normalizeIp, normalizeIpOrCidr } from './ip.ts';

const show = (v: unknown): string => (v === undefined ? 'nothing' : JSON.stringify(v));

/** A required string; `what` names it in the message. */
const text = (what = 'a string') =>
  z.string({ error: (iss) => (iss.input === undefined ? 'is required' : `must be ${what}, got ${show(iss.input)}`) });

const optText = text().nullish();

/** Integer 1–65535. */
export const portNumber = z
  .int({ error: (iss) => (iss.input === undefined ? 'is required' : `must be an integer port number (1-65535), got ${show(iss.input)}`) })
  .min(1, { error: (iss) => `must be a port number between 1 and 65535, got ${show(iss.input)}` })
  .max(65535, { error: (iss) => `must be a port number between 1 and 65535, got ${show(iss.input)}` });

/** Kubernetes IntOrString port: a port number or a (container) port name. */
const intOrPortName = z.union([portNumber, z.string().min(1)], {
  error: (iss) => `must be a port number (1-65535) or a port name, got ${show(iss.input)}`,
});

/** An IP literal (see `normalizeIp`). */
const ipText = text('an IP address').refine((s) => normalizeIp(s) !== undefined, {
  error: (iss) => `${show(iss.input)} is not a valid IP address`,
});

/** String → string map (labels, annotations, selectors). */
const stringMap = (what: string) =>
  z
    .record(
      z.string(),
      z.string({ error: (iss) => `${what} values must be strings (quote numbers and booleans), got ${show(iss.input)}` }),
      { error: (iss) => `must be a mapping of ${what}, got ${show(iss.input)}` },
    )
    .nullish();

const labels = stringMap('label');

const objectMeta = z.object({
  labels,
  annotations: stringMap('annotation'),
});

/** `metadata` + `spec` where only labels/annotations of metadata are read. */
const withMeta = <T extends z.ZodType>(spec: T) => z.object({ metadata: objectMeta, spec });

/** `Namespace`: only its labels matter (use-waypoint, dataplane-mode). */
export const NamespaceSchema = z.object({ metadata: objectMeta });

/** Kubernetes `Service` (core/v1): cluster IPs, selector, ports. */
export const ServiceSchema = withMeta(
  z
    .object({
      type: optText,
      clusterIP: text().nullish(),
      clusterIPs: z.array(text(), { error: 'must be a list of IP addresses' }).nullish(),
      selector: stringMap('selector'),
      ports: z
        .array(
          z.object({
            name: optText,
            port: portNumber,
            targetPort: intOrPortName.nullish(),
            appProtocol: optText,
            protocol: optText,
          }),
          { error: 'must be a list of ports' },
        )
        .nullish(),
    })
    .nullish(),
);
/** A validated `Service`. */
export type ServiceDoc = z.output<typeof ServiceSchema>;

const containerSchema = z.object({
  name: optText,
  ports: z
    .array(z.object({ name: optText, containerPort: portNumber, protocol: optText }), { error: 'must be a list of ports' })
    .nullish(),
});

/** `Pod` (core/v1): owners, service account, container ports, IPs and readiness. */
export const PodSchema = z.object({
  metadata: objectMeta.extend({
    ownerReferences: z
      .array(z.object({ kind: text(), name: text(), controller: z.boolean().nullish() }), {
        error: 'must be a list of owner references',
      })
      .nullish(),
    deletionTimestamp: z.unknown().optional(),
  }),
  spec: z
    .object({
      serviceAccountName: optText,
      serviceAccount: optText,
      nodeName: optText,
      containers: z.array(containerSchema, { error: 'must be a list of containers' }).nullish(),
    })
    .nullish(),
  status: z
    .object({
      phase: optText,
      podIP: ipText.nullish(),
      podIPs: z.array(z.object({ ip: ipText }), { error: 'must be a list of {ip: ...}' }).nullish(),
      conditions: z.array(z.object({ type: text(), status: text() }), { error: 'must be a list of conditions' }).nullish(),
    })
    .nullish(),
});
/** A validated `Pod`. */
export type PodDoc = z.output<typeof PodSchema>;

/** Fields shared by WorkloadEntry.spec and ServiceEntry.spec.endpoints[]. */
const workloadEntryFields = {
  labels,
  ports: z.record(z.string(), portNumber, { error: 'must be a mapping of port name to port number' }).nullish(),
  serviceAccount: optText,
  network: optText,
  locality: optText,
};

/** Istio `WorkloadEntry`: an IP `address` (DNS names rejected), labels, named ports, identity. */
export const WorkloadEntrySchema = withMeta(
  z
    .object({
      ...workloadEntryFields,
      address: text('an IP address')
        .refine((s) => normalizeIp(s) !== undefined, {
          error: (iss) => `${show(iss.input)} is not an IP address (DNS names in WorkloadEntry.address are not supported)`,
        })
        .nullish(),
    })
    .nullish(),
);
/** A validated `WorkloadEntry`. */
export type WorkloadEntryDoc = z.output<typeof WorkloadEntrySchema>;

/** Istio `ServiceEntry`: hosts (at least one), addresses (IPs or CIDRs), ports, selector, inline endpoints. */
export const ServiceEntrySchema = withMeta(
  z.object(
    {
      hosts: z.array(text('a hostname').min(1, { error: 'must not be empty' }), { error: 'must be a list of hostnames' }).min(1, {
        error: 'must list at least one host',
      }),
      addresses: z
        .array(
          text('an IP address or CIDR').refine((s) => normalizeIpOrCidr(s) !== undefined, {
            error: (iss) => `${show(iss.input)} is not a valid IP address or CIDR`,
          }),
          { error: 'must be a list of IP addresses' },
        )
        .nullish(),
      ports: z
        .array(z.object({ number: portNumber, name: optText, protocol: optText, targetPort: portNumber.nullish() }), {
          error: 'must be a list of ports',
        })
        .nullish(),
      resolution: optText,
      location: optText,
      workloadSelector: z.object({ labels }).nullish(),
      endpoints: z
        .array(z.object({ ...workloadEntryFields, address: text('an address') }), { error: 'must be a list of endpoints' })
        .nullish(),
    },
    { error: (iss) => (iss.input === undefined ? 'is required' : 'must be a mapping') },
  ),
);
/** A validated `ServiceEntry`. */
export type ServiceEntryDoc = z.output<typeof ServiceEntrySchema>;

/**
 * Gateway API `Gateway`: class name, labels (`istio.io/waypoint-for`) and `status.addresses`
 * (where istiod says the waypoint is reached: a `Hostname` or an `IPAddress`, the default type).
 */
export const GatewaySchema = withMeta(z.object({ gatewayClassName: optText }).nullish()).extend({
  status: z
    .object({
      addresses: z.array(z.object({ type: optText, value: text() }), { error: 'must be a list of addresses' }).nullish(),
    })
    .nullish(),
});

/** Gateway API `GatewayClass`: only its labels matter (`istio.io/waypoint-for`, the Gateways' default). */
export const GatewayClassSchema = z.object({ metadata: objectMeta });

/** `ConfigMap`: string `data` (the `istio` one carries MeshConfig under `mesh`). */
export const ConfigMapSchema = z.object({
  data: z.record(z.string(), z.string({ error: 'ConfigMap data values must be strings' })).nullish(),
});
