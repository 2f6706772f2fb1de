/**
 * Long computations written once as generators (`yield` at points where it is safe to pause) and
 * run either to the end at once ({@link runNow}) or in slices that give the event loop back
 * between them ({@link runInSlices}): the mesh compile uses the second on a running waypoint so
 * that a huge mesh file does not stall the traffic it serves (one slice ≈ one YAML document or
 * one object), and the first where a caller needs the answer synchronously (tests, inline meshes).
 * A step may also yield a promise (a part loading filter modules): {@link runInSlices} waits for
 * it, {@link runNow} cannot and throws.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * A computation that may pause at each `yield` and finally returns a `T`. A step that yields a
 * promise asks to be resumed once it settled (the promise must not reject: the step reads its own
 * outcome after resuming).
 */
export type Stepwise<T> = Generator<void | Promise<unknown>, T, void>;

/**
 * Run `steps` to the end now and return its result (throws what it throws).
 * @throws Error when a step must wait for a promise (run it with {@link runInSlices}).
 */
export function runNow<T>(steps: Stepwise<T>): T {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    if (r.value !== undefined) {
      // Close the computation (its `finally` blocks run); the promise never rejects, so it can be left.
      steps.return(undefined as T);
      throw new Error('this computation waits for asynchronous work (e.g. loading WaypointFilter modules) and cannot run synchronously: use runInSlices (MeshStore.open)');
    }
  }
}

/** Longest run (ms) between two turns of the event loop, by default. */
export const DEFAULT_SLICE_MS = 10;

/**
 * Run `steps`, yielding to the event loop (`setImmediate`, so I/O and timers due get their turn)
 * whenever `sliceMs` have passed since the last turn. Rejects with what `steps` throws.
 */
export async function runInSlices<T>(steps: Stepwise<T>, sliceMs = DEFAULT_SLICE_MS): Promise<T> {
  let start = performance.now();
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    if (r.value !== undefined) {
      await r.value;
      start = performance.now();
    } else if (performance.now() - start >= sliceMs) {
      await nextTurn();
      start = performance.now();
    }
  }
}
