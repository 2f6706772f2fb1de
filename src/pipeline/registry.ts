/**
 * Name → FilterFactory registry and the chain builder. Building a chain validates the ordered
 * list from the bootstrap config: unknown names, duplicates, unmet `dependsOn`, broken `after`
 * order and a missing or misplaced router are configuration errors, reported with the filter's index.
 */
import { ConfigError } from '../util/index.ts';
import { FilterChain } from './chain.ts';
import type { Filter, FilterEnv, FilterFactory } from './filter.ts';

/** Filter factories by name; `build` turns the bootstrap `filters` list into a {@link FilterChain}. */
export class FilterRegistry {
  private readonly factories = new Map<string, FilterFactory<unknown>>();

  /** Register a factory; throws on a duplicate name. */
  register<C>(factory: FilterFactory<C>): this {
    if (this.factories.has(factory.name)) throw new Error(`filter ${factory.name} is registered twice`);
    this.factories.set(factory.name, factory as FilterFactory<unknown>);
    return this;
  }

  names(): string[] {
    return [...this.factories.keys()];
  }

  /**
   * Compile `entries` (in order) into a chain, after the `core` filters the waypoint itself puts
   * first in every chain (the access logger). Throws {@link ConfigError} with field `filters[i]`
   * for unknown, duplicate or misordered filters, a core filter listed again, and invalid filter config.
   */
  build(entries: readonly { name: string; config?: unknown }[], env: FilterEnv, core: readonly Filter[] = []): FilterChain {
    const seen = new Set<string>(core.map((f) => f.name));
    const filters: Filter[] = [...core];
    entries.forEach((entry, i) => {
      const field = `filters[${i}]`;
      if (core.some((f) => f.name === entry.name)) throw new ConfigError(`filter "${entry.name}" is always first in the chain and must not be listed`, { field });
      const factory = this.factories.get(entry.name);
      if (!factory) throw new ConfigError(`unknown filter "${entry.name}" (known: ${this.names().join(', ')})`, { field });
      if (seen.has(entry.name)) throw new ConfigError(`filter "${entry.name}" appears twice`, { field });
      for (const dep of factory.dependsOn ?? []) {
        if (!seen.has(dep)) throw new ConfigError(`filter "${entry.name}" needs "${dep}" earlier in the chain`, { field });
      }
      for (const prior of factory.after ?? []) {
        const later = entries.findIndex((e, j) => j > i && e.name === prior);
        if (later >= 0) throw new ConfigError(`filter "${entry.name}" must come after "${prior}" (filters[${later}]) in the chain`, { field });
      }
      seen.add(entry.name);
      let config: unknown;
      try {
        config = factory.parseConfig(entry.config);
      } catch (err) {
        if (err instanceof ConfigError) throw new ConfigError(err.message, { ...err.location, field: `${field}.config${err.location.field ? `.${err.location.field}` : ''}` });
        throw new ConfigError(`invalid config for "${entry.name}": ${(err as Error).message}`, { field: `${field}.config` });
      }
      filters.push(factory.create(config, env));
    });
    try {
      return new FilterChain(filters);
    } catch (err) {
      throw new ConfigError((err as Error).message, { field: 'filters' });
    }
  }
}
