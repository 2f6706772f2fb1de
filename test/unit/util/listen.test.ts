/**
 * Listen addresses (src/util/listen.ts): `[::]` on a host without IPv6 binds IPv4's wildcard
 * instead, as Node's own `listen(port)` does; other bind errors are not retried.
 */
import net from 'node:net';
import { expect, test } from 'vitest';
import { listenOn } from '../../../src/util/index.ts';

/** A server on a host with no IPv6 (`::` fails with `code`); IPv4's wildcard is bound on loopback here. */
class NoIpv6Server extends net.Server {
  readonly asked: string[] = [];
  readonly code: string;
  constructor(code: string) {
    super();
    this.code = code;
    const listen = this.listen.bind(this) as (port: number, host: string, cb: () => void) => this;
    (this as { listen: unknown }).listen = (port: number, host: string, cb: () => void) => {
      this.asked.push(host);
      if (host !== '::') return listen(port, host === '0.0.0.0' ? '127.0.226.1' : host, cb);
      process.nextTick(() => this.emit('error', Object.assign(new Error(`listen ${this.code} ${host}`), { code: this.code })));
      return this;
    };
  }
}

test.each(['EAFNOSUPPORT', 'EADDRNOTAVAIL'])('[::] without IPv6 (%s): bound on 0.0.0.0', async (code) => {
  const server = new NoIpv6Server(code);
  const bound = await listenOn(server, '[::]:0');
  expect(server.asked).toEqual(['::', '0.0.0.0']);
  expect(bound.port).toBeGreaterThan(0);
  server.close();
});

test('any other address or error is not retried', async () => {
  const server = new NoIpv6Server('EACCES');
  await expect(listenOn(server, '[::]:0')).rejects.toThrow(/EACCES/);
  expect(server.asked).toEqual(['::']);
  await expect(listenOn(new net.Server(), 'nonsense')).rejects.toThrow(/invalid listen address "nonsense"/);
});
