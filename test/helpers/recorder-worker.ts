/**
 * The recording filter as a worker process of the waypoint imports it (WorkersOptions.filterModules):
 * each record goes to the test's process, the workers' primary, over the IPC channel, addressed to
 * the recorder its `filters` entry's config names (recorder.ts).
 */
import type { FilterFactory } from '../../src/pipeline/index.ts';
import { RECORDER, recordingFilter, type StreamRecord, type TunnelRecord, type WorkerRecord } from './recorder.ts';

type Body = { kind: 'opened' } | { kind: 'stream'; record: StreamRecord } | { kind: 'tunnel'; record: TunnelRecord };

const recorderInWorker: FilterFactory<{ sink: string }> = {
  name: RECORDER,
  parseConfig(raw) {
    const sink = (raw as { sink?: unknown } | undefined)?.sink;
    if (typeof sink !== 'string') throw new Error(`${RECORDER} in a worker: expected config { sink: <recorder id> }, got ${JSON.stringify(raw)}`);
    return { sink };
  },
  create({ sink }) {
    const send = (body: Body) => {
      if (process.connected) process.send!({ t: RECORDER, sink, pid: process.pid, ...body } as WorkerRecord);
    };
    return recordingFilter({
      opened: () => send({ kind: 'opened' }),
      stream: (record) => send({ kind: 'stream', record }),
      tunnel: (record) => send({ kind: 'tunnel', record }),
    });
  },
};

export const filterFactories = [recorderInWorker];
