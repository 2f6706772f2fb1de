import { ConfigError } from '../../src/util/errors.ts';

/** Run `fn` and return the ConfigError it throws; fails the test if it throws nothing or something else. */
export function caught(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('expected a ConfigError');
}
