/** FilterRegistry.build: validation of the configured filter list and chain compilation. */
import { describe, expect, test } from 'vitest';
import { ConfigError } from '../../../src/util/errors.ts';
import type { Filter, FilterEnv, FilterFactory, TerminalFilter } from '../../../src/pipeline/filter.ts';
import { Registry } from 'prom-client';
import { FilterRegistry } from '../../../src/pipeline/registry.ts';
import { log } from '../../../src/util/log.ts';
import { caught } from '../../helpers/config-error.ts';

const ROUTER = 'envoy.filters.http.router';
const env: FilterEnv = { mesh: { current: {} as never }, log, metrics: new Registry() };

interface Made {
  factory: string;
  config: unknown;
  env: FilterEnv;
}

function plain(name: string, made: Made[], opts: { dependsOn?: string[]; after?: string[]; parse?: (raw: unknown) => unknown } = {}): FilterFactory {
  return {
    name,
    dependsOn: opts.dependsOn,
    after: opts.after,
    parseConfig: opts.parse ?? ((raw) => ({ parsed: raw })),
    create(config, e): Filter {
      made.push({ factory: name, config, env: e });
      return { name };
    },
  };
}

function router(made: Made[]): FilterFactory {
  return {
    name: ROUTER,
    parseConfig: () => ({}),
    create(config, e): TerminalFilter {
      made.push({ factory: ROUTER, config, env: e });
      return { name: ROUTER, forward() {} };
    },
  };
}

function registry(made: Made[] = []): FilterRegistry {
  return new FilterRegistry()
    .register(plain('istio.peer_metadata', made))
    .register(plain('istio.stats', made, { dependsOn: ['istio.peer_metadata'] }))
    .register(plain('istio.authz', made, { after: ['istio.peer_metadata'] }))
    .register(
      plain('istio.strict', made, {
        parse(raw) {
          if (raw !== undefined) throw new Error('takes no options');
          return 'strict-config';
        },
      }),
    )
    .register(
      plain('istio.located', made, {
        parse() {
          throw new ConfigError('bad rule', { field: 'rules[2].path' });
        },
      }),
    )
    .register(
      plain('istio.unlocated', made, {
        parse() {
          throw new ConfigError('bad config');
        },
      }),
    )
    .register(router(made));
}


describe('build errors', () => {
  const cases: { name: string; entries: { name: string; config?: unknown }[]; field: string; message: RegExp[] }[] = [
    {
      name: 'an unknown filter names its index and the known filters',
      entries: [{ name: 'istio.peer_metadata' }, { name: 'istio.nope' }, { name: ROUTER }],
      field: 'filters[1]',
      message: [/unknown filter "istio\.nope"/, /istio\.peer_metadata/, /istio\.stats/, /istio\.strict/, new RegExp(ROUTER.replaceAll('.', '\\.'))],
    },
    {
      name: 'an `after` constraint: a filter listed before one it must follow names both and the later index',
      entries: [{ name: 'istio.authz' }, { name: 'istio.peer_metadata' }, { name: ROUTER }],
      field: 'filters[0]',
      message: [/"istio\.authz" must come after "istio\.peer_metadata" \(filters\[1\]\)/],
    },
    {
      name: 'a duplicate filter names the second occurrence',
      entries: [{ name: 'istio.peer_metadata' }, { name: 'istio.strict' }, { name: 'istio.peer_metadata' }, { name: ROUTER }],
      field: 'filters[2]',
      message: [/"istio\.peer_metadata" appears twice/],
    },
    {
      name: 'an unmet dependency names both filters',
      entries: [{ name: 'istio.stats' }, { name: ROUTER }],
      field: 'filters[0]',
      message: [/"istio\.stats" needs "istio\.peer_metadata" earlier/],
    },
    {
      name: 'a dependency placed later is still unmet',
      entries: [{ name: 'istio.strict' }, { name: 'istio.stats' }, { name: 'istio.peer_metadata' }, { name: ROUTER }],
      field: 'filters[1]',
      message: [/"istio\.stats" needs "istio\.peer_metadata"/],
    },
    {
      name: 'a parseConfig Error becomes a ConfigError on filters[i].config naming the filter',
      entries: [{ name: 'istio.peer_metadata' }, { name: 'istio.strict', config: { x: 1 } }, { name: ROUTER }],
      field: 'filters[1].config',
      message: [/invalid config for "istio\.strict"/, /takes no options/],
    },
    {
      name: 'a parseConfig ConfigError keeps its message and nests its field under filters[i].config',
      entries: [{ name: 'istio.located' }, { name: ROUTER }],
      field: 'filters[0].config.rules[2].path',
      message: [/^bad rule$/],
    },
    {
      name: 'a parseConfig ConfigError without a field points at filters[i].config',
      entries: [{ name: 'istio.peer_metadata' }, { name: 'istio.unlocated' }, { name: ROUTER }],
      field: 'filters[1].config',
      message: [/^bad config$/],
    },
    {
      name: 'a chain without the router is rejected',
      entries: [{ name: 'istio.peer_metadata' }],
      field: 'filters',
      message: [/terminal filter/],
    },
    {
      name: 'a router that is not last is rejected',
      entries: [{ name: ROUTER }, { name: 'istio.peer_metadata' }],
      field: 'filters',
      message: [/terminal filter/],
    },
    {
      name: 'an empty list is rejected',
      entries: [],
      field: 'filters',
      message: [/terminal filter/],
    },
  ];
  test.each(cases)('$name', ({ entries, field, message }) => {
    const err = caught(() => registry().build(entries, env));
    expect(err.location.field).toBe(field);
    for (const m of message) expect(err.message).toMatch(m);
  });
});

describe('build', () => {
  test('a valid list builds a chain in configuration order whose terminal is the last filter', () => {
    const made: Made[] = [];
    const chain = registry(made).build([{ name: 'istio.peer_metadata', config: { a: 1 } }, { name: 'istio.stats' }, { name: 'istio.strict' }, { name: ROUTER }], env);
    expect(chain.filters.map((f) => f.name)).toEqual(['istio.peer_metadata', 'istio.stats', 'istio.strict', ROUTER]);
    expect(chain.terminal.name).toBe(ROUTER);
    expect(chain.terminal).toBe(chain.filters[3]);
  });

  test('each factory creates its filter from its parsed config and the env', () => {
    const made: Made[] = [];
    registry(made).build([{ name: 'istio.peer_metadata', config: { a: 1 } }, { name: 'istio.strict' }, { name: ROUTER }], env);
    expect(made.map((m) => [m.factory, m.config])).toEqual([
      ['istio.peer_metadata', { parsed: { a: 1 } }],
      ['istio.strict', 'strict-config'],
      [ROUTER, {}],
    ]);
    for (const m of made) expect(m.env).toBe(env);
  });

  test('every build creates fresh filter instances', () => {
    const reg = registry();
    const a = reg.build([{ name: ROUTER }], env);
    const b = reg.build([{ name: ROUTER }], env);
    expect(a).not.toBe(b);
    expect(a.terminal).not.toBe(b.terminal);
  });
});

describe('after', () => {
  test('is met when the other filter is absent or earlier', () => {
    expect(() => registry().build([{ name: 'istio.authz' }, { name: ROUTER }], env)).not.toThrow();
    expect(() => registry().build([{ name: 'istio.peer_metadata' }, { name: 'istio.authz' }, { name: ROUTER }], env)).not.toThrow();
  });

  test('the real stats filter must follow istio.peer_metadata when both are listed', async () => {
    const { statsFactory } = await import('../../../filters/stats/index.ts');
    expect(statsFactory.after).toEqual(['istio.peer_metadata']);
  });
});

describe('core filters', () => {
  const core: Filter = { name: 'envoy.access_loggers.file', onStreamComplete() {} };

  test('come first, before the configured filters, and count as seen', () => {
    const chain = registry().build([{ name: 'istio.peer_metadata' }, { name: ROUTER }], env, [core]);
    expect(chain.filters.map((f) => f.name)).toEqual(['envoy.access_loggers.file', 'istio.peer_metadata', ROUTER]);
    expect(chain.filters[0]).toBe(core);
  });

  test('listing a core filter again is a ConfigError on its index', () => {
    const err = caught(() => registry().build([{ name: 'istio.peer_metadata' }, { name: 'envoy.access_loggers.file' }, { name: ROUTER }], env, [core]));
    expect(err.location.field).toBe('filters[1]');
    expect(err.message).toMatch(/always first in the chain/);
  });
});

describe('register', () => {
  test('a second factory with the same name throws', () => {
    expect(() => registry().register(router([]))).toThrow(`filter ${ROUTER} is registered twice`);
  });

  test('names() lists registered factories in registration order', () => {
    const reg = new FilterRegistry().register(plain('b', [])).register(plain('a', []));
    expect(reg.names()).toEqual(['b', 'a']);
  });
});
