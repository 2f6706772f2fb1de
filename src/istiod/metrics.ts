/**
 * Prometheus metrics of the in-cluster identity and discovery, read at scrape time:
 * - `waypoint_certificate_expiry_timestamp_seconds` (gauge): `notAfter` of the served workload
 *   certificate, Unix seconds (absent before the first certificate);
 * - `waypoint_certificate_expiry_seconds` (gauge): seconds left until then (negative once expired,
 *   which renewal failures can lead to) — alert on it, as on Envoy's
 *   `server.days_until_first_cert_expiring`;
 * - `waypoint_certificate_renewal_failures_total` (counter): failed issuances and renewals;
 * - `waypoint_wds_connected` (gauge, 0/1), `waypoint_wds_synced` (gauge, 0/1),
 *   `waypoint_wds_responses_total{result="ack"|"nack"}` (counter), `waypoint_wds_connects_total`
 *   (counter): the WDS stream to istiod.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { WorkloadCertificate } from '../identity/index.ts';
import type { WdsClient } from './wds-client.ts';

/** Register the workload certificate's expiry and renewal-failure metrics on `registry`. */
export function registerCertificateMetrics(registry: Registry, certificate: WorkloadCertificate): void {
  const registers = [registry];
  const notAfter = (): number | undefined => (certificate.issued ? certificate.current.notAfter.getTime() : undefined);
  new Gauge({
    name: 'waypoint_certificate_expiry_timestamp_seconds',
    help: 'Expiry (notAfter) of the workload certificate served, in Unix seconds.',
    registers,
    collect() {
      const t = notAfter();
      if (t !== undefined) this.set(Math.floor(t / 1000));
    },
  });
  new Gauge({
    name: 'waypoint_certificate_expiry_seconds',
    help: 'Seconds until the workload certificate served expires (negative once expired).',
    registers,
    collect() {
      const t = notAfter();
      if (t !== undefined) this.set(Math.round((t - Date.now()) / 1000));
    },
  });
  new Counter({
    name: 'waypoint_certificate_renewal_failures_total',
    help: 'Failed workload certificate issuances and renewals.',
    registers,
    collect() {
      this.reset();
      this.inc(certificate.failures);
    },
  });
}

/** Register the WDS client's connection and response metrics on `registry`. */
export function registerWdsMetrics(registry: Registry, client: WdsClient): void {
  const registers = [registry];
  new Gauge({
    name: 'waypoint_wds_connected',
    help: 'Whether the WDS stream to istiod is open and answering (1) or not (0).',
    registers,
    collect() {
      this.set(client.connected ? 1 : 0);
    },
  });
  new Gauge({
    name: 'waypoint_wds_synced',
    help: 'Whether the first full WDS sync from istiod was received (1) or not yet (0).',
    registers,
    collect() {
      this.set(client.synced ? 1 : 0);
    },
  });
  new Counter({
    name: 'waypoint_wds_responses_total',
    help: 'WDS responses from istiod, by whether they were ACKed or NACKed.',
    labelNames: ['result'],
    registers,
    collect() {
      this.reset();
      this.inc({ result: 'ack' }, client.stats.acks);
      this.inc({ result: 'nack' }, client.stats.nacks);
    },
  });
  new Counter({
    name: 'waypoint_wds_connects_total',
    help: 'WDS streams opened to istiod.',
    registers,
    collect() {
      this.reset();
      this.inc(client.stats.connects);
    },
  });
}
