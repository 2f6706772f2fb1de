/**
 * Parse a `baggage` header into the PeerInfo it describes: the reader side of `baggage.ts`.
 *
 * Keys follow ztunnel's parser (istio/ztunnel src/baggage.rs `parse_baggage_header`) plus the extra keys
 * Envoy's reads (istio/proxy extensions/common/metadata_object.cc `convertBaggageToWorkloadMetadata`):
 *
 * | key | field |
 * |---|---|
 * | `k8s.namespace.name` | namespace |
 * | `k8s.cluster.name` | cluster |
 * | `k8s.deployment.name` / `k8s.pod.name` / `k8s.job.name` / `k8s.cronjob.name` | workload, and type from the key |
 * | `service.name` | service (and app when no `app.name`) |
 * | `service.version` | revision (and version when no `app.version`) |
 * | `app.name` / `app.version` | app / version (and service / revision when no `service.*`) |
 * | `k8s.instance.name` | name (the pod) |
 * | `cloud.region` / `cloud.availability_zone` | region / availabilityZone |
 *
 * Identity never travels in baggage (it comes from the peer certificate): always `''`; labels `{}`.
 */
import type { PeerInfo } from './peer-info.ts';

/** Longest merged header value parsed: 64 KiB; longer input yields an all-unknown peer. */
export const MAX_BAGGAGE_LENGTH = 64 * 1024;

const WORKLOAD_KEYS: ReadonlyMap<string, string> = new Map([
  ['k8s.deployment.name', 'deployment'],
  ['k8s.pod.name', 'pod'],
  ['k8s.job.name', 'job'],
  ['k8s.cronjob.name', 'cronjob'],
]);

const KEYS: ReadonlySet<string> = new Set([
  'k8s.namespace.name',
  'k8s.cluster.name',
  'service.name',
  'service.version',
  'app.name',
  'app.version',
  'k8s.instance.name',
  'cloud.region',
  'cloud.availability_zone',
  ...WORKLOAD_KEYS.keys(),
]);

/**
 * Spaces and tabs (HTTP/W3C OWS) stripped from both ends, with a loop rather than a regex (no
 * backtracking on long runs of spaces). Shared with the peer-metadata header codec.
 */
export function trimOws(s: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && (s[start] === ' ' || s[start] === '\t')) start++;
  while (end > start && (s[end - 1] === ' ' || s[end - 1] === '\t')) end--;
  return s.slice(start, end);
}

/** Only visible ASCII (0x21–0x7E): what an HTTP header value's `to_str()` in ztunnel accepts, minus space. */
const VISIBLE_ASCII = /^[\x21-\x7e]*$/;

/**
 * The peer described by a `baggage` header, or `undefined` when there is no header at all (so a
 * caller can try its next discovery method, as Envoy's `BaggageMethod` does). A present header
 * always gives a PeerInfo, `''` for whatever it does not say.
 *
 * `value` is one header value or all of them (several `baggage` lines are merged with `,`, as
 * ztunnel and Envoy do). Rules:
 * - members are split on `,`; empty members (stray commas) and members without `=` are skipped;
 * - W3C properties after `;` are stripped; spaces/tabs around key and value are trimmed;
 * - the value is everything after the first `=` (W3C; ztunnel/Envoy would stop at a second `=`,
 *   which their own writers never produce);
 * - duplicate keys: the last one wins, as in ztunnel and Envoy — including an empty value, which
 *   clears an earlier one (ztunnel maps `k=` to "none"); so `k=` alone gives `''`;
 * - values are used verbatim: no percent-decoding (neither ztunnel nor Envoy decode, so the
 *   stats labels stay identical to theirs);
 * - a member whose value has bytes outside visible ASCII (non-UTF-8/latin1 header bytes, controls,
 *   inner spaces) is skipped (ztunnel would drop the whole header; dropping one member degrades
 *   more gracefully);
 * - unknown keys are ignored; input longer than {@link MAX_BAGGAGE_LENGTH} gives an all-`''` peer.
 *
 * Never throws; linear in the input.
 */
export function parseBaggage(value: string | readonly string[] | undefined): PeerInfo | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' && !Array.isArray(value)) return undefined;
  const lines = typeof value === 'string' ? [value] : value.filter((v): v is string => typeof v === 'string');
  if (lines.length === 0) return undefined;
  const merged = lines.join(',');

  const raw = new Map<string, string>();
  let workloadType = '';
  if (merged.length <= MAX_BAGGAGE_LENGTH) {
    for (const member of merged.split(',')) {
      const semi = member.indexOf(';');
      const pair = semi === -1 ? member : member.slice(0, semi);
      const eq = pair.indexOf('=');
      if (eq === -1) continue;
      const key = trimOws(pair.slice(0, eq));
      const val = trimOws(pair.slice(eq + 1));
      if (!KEYS.has(key) || !VISIBLE_ASCII.test(val)) continue;
      const type = WORKLOAD_KEYS.get(key);
      if (type !== undefined) {
        raw.set('workload', val);
        workloadType = val === '' ? '' : type;
      } else {
        raw.set(key, val);
      }
    }
  }

  const get = (key: string) => raw.get(key) ?? '';
  const serviceName = get('service.name');
  const serviceVersion = get('service.version');
  const appName = get('app.name');
  const appVersion = get('app.version');
  return Object.freeze({
    name: get('k8s.instance.name'),
    namespace: get('k8s.namespace.name'),
    cluster: get('k8s.cluster.name'),
    workload: get('workload'),
    type: workloadType,
    service: serviceName || appName,
    revision: serviceVersion || appVersion,
    app: appName || serviceName,
    version: appVersion || serviceVersion,
    identity: '',
    region: get('cloud.region'),
    availabilityZone: get('cloud.availability_zone'),
    labels: Object.freeze({}),
  });
}
