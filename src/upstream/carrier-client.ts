/**
 * The undici Client behind each HTTP/1.1 upstream connection of a Pool (its `factory`), which
 * tells each request's handler the connection that carries it, so the overload manager can count
 * the bytes waiting in that connection's buffers against the request (pipelining is 1: one
 * request per connection at a time). Through {@link UpstreamHandler.onCarrier}.
 */
import type { Duplex } from 'node:stream';
import { Client, type Dispatcher } from 'undici';
import type { BufferHolder } from '../pipeline/index.ts';

type Connector = (opts: object, callback: (err: Error | null, socket: Duplex | null) => void) => void;

/** A handler that wants to know its connection (see the module comment). */
interface CarrierAware {
  onCarrier?(carrier: BufferHolder): void;
}

/** One connection's client; reads through to its current socket's buffers. */
class CarrierClient extends Client implements BufferHolder {
  private readonly socket: { current: Duplex | null };

  constructor(origin: URL, opts: { connect: Connector }) {
    const socket: { current: Duplex | null } = { current: null };
    const connect = opts.connect;
    super(origin, {
      ...opts,
      connect: ((o: object, cb: (err: Error | null, s: Duplex | null) => void) =>
        connect(o, (err, s) => {
          socket.current = s;
          // A closed socket's buffers are not held here (the client outlives its connections).
          s?.once('close', () => {
            if (socket.current === s) socket.current = null;
          });
          cb(err, s);
        })) as unknown as Client.Options['connect'],
    } as Client.Options);
    this.socket = socket;
  }

  get readableLength(): number {
    return this.socket.current?.readableLength ?? 0;
  }

  get writableLength(): number {
    return this.socket.current?.writableLength ?? 0;
  }

  override dispatch(opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    (handler as CarrierAware).onCarrier?.(this);
    return super.dispatch(opts, handler);
  }
}

/** The Pool `factory` making {@link CarrierClient}s. */
export function carrierClient(origin: URL, opts: object): Dispatcher {
  return new CarrierClient(origin, opts as { connect: Connector });
}
