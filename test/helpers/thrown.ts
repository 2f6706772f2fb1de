/** What `fn` throws (undefined when it returns), for tests that look at an error's fields. */
export function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}
