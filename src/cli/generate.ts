/**
 * `waypoint generate`: print the Kubernetes objects of a namespace waypoint (as `istioctl waypoint
 * generate` prints Envoy's), ready for `| kubectl apply -f -`.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { baseOptions, generateYaml, nameProblem, namespaceProblem } from '../deploy/index.ts';
import { VERSION } from '../util/index.ts';
import { REQUIRED } from './flags.ts';

/** A commander argument parser refusing what `problem` finds wrong (a usage error: exit 2). */
function checked(problem: (v: string) => string | undefined): (v: string) => string {
  return (v) => {
    const p = problem(v);
    if (p) throw new InvalidArgumentError(p);
    return v;
  };
}

/** The `generate` command. */
export function generateCommand(): Command {
  const defaults = baseOptions(VERSION);
  return new Command('generate')
    .description('print the Kubernetes objects of a namespace waypoint (ServiceAccount, RBAC, Service, Deployment, PDB, HPA, Gateway)')
    .addOption(new Option('-n, --namespace <ns>', `namespace of the waypoint and of the workloads it serves${REQUIRED}`).argParser(checked(namespaceProblem)).makeOptionMandatory())
    .addOption(new Option('--name <name>', 'name of the Gateway, its ServiceAccount, Service and Deployment').default(defaults.name).argParser(checked(nameProblem)))
    .addOption(new Option('--image <ref>', 'container image (built from this repository\'s Dockerfile)').default(defaults.image).argParser(checked((v) => (/^\S+$/.test(v) ? undefined : 'expected an image reference without spaces'))))
    .option('--cluster-domain <domain>', 'Kubernetes cluster domain (the Service FQDN in the Gateway address)', defaults.clusterDomain)
    .action((o: { namespace: string; name: string; image: string; clusterDomain: string }) => {
      process.stdout.write(generateYaml(o, VERSION));
    });
}
