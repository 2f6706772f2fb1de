import { PassThrough } from 'node:stream';
import { describe, expect, test } from 'vitest';
import { classify, sniff } from '../../../src/listener/sniff.ts';

const b = (s: string) => Buffer.from(s, 'latin1');

describe('classify', () => {
  test.each([
    ['GET / HTTP/1.1\r\n', 'HTTP/1.1'],
    ['POST /x?y HTTP/1.0\r\nHost: a\r\n', 'HTTP/1.1'],
    ['PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'HTTP/2'],
    ['SSH-2.0-OpenSSH\r\n', 'TCP'],
    ['\x16\x03\x01\x02\x00', 'TCP'],
    ['GET / HTTP/2.0\r\n', 'TCP'],
    ['GET /\r\n', 'HTTP/0.9'],
    ['POST /a/b?c\r\n', 'HTTP/0.9'],
    ['GET key\r\n', 'TCP'],
    ['FOO /x\r\n', 'TCP'],
    // The line ends at its LF, as for Envoy's inspector: a line protocol is TCP at once.
    ['send 10 then=end\n', 'TCP'],
    ['PING\n', 'TCP'],
    ['GET / HTTP/1.1\n', 'HTTP/1.1'],
    // Control characters cannot be in a request line: no need to wait for its end.
    ['GET /\x00', 'TCP'],
    ['HELO\x01', 'TCP'],
  ])('%j → %s', (input, expected) => {
    expect(classify(b(input))).toBe(expected);
  });

  test.each(['G', 'GET', 'GET /a', 'GET /a\tb', 'GET /a HTTP/1.1\r', 'PRI * HT', 'PRI * HTTP/2.0\r\n\r\nSM'])('%j needs more bytes', (input) => {
    expect(classify(b(input))).toBeUndefined();
  });

  test('a request line that never ends gives up as TCP after 8 KiB', () => {
    expect(classify(b(`GET /${'a'.repeat(9000)}`))).toBe('TCP');
  });
});

describe('sniff', () => {
  test('bytes split across chunks are classified and pushed back whole', async () => {
    const s = new PassThrough();
    const result = sniff(s, 0);
    s.write('PRI * HTTP/2');
    s.write('.0\r\n\r\nSM\r\n\r\nrest');
    const r = await result;
    expect(r.protocol).toBe('HTTP/2');
    expect(r.head).toBeUndefined();
    expect(s.read()?.toString()).toBe('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nrest');
  });

  test('silence past the detection timeout means TCP, nothing consumed', async () => {
    const s = new PassThrough();
    const r = await sniff(s, 20);
    expect(r).toEqual({ protocol: 'TCP', head: undefined, ended: false });
    s.write('late');
    expect(s.read()?.toString()).toBe('late');
  });

  test('a client that ends before a decision: TCP, its bytes handed back as head', async () => {
    const s = new PassThrough();
    const result = sniff(s, 0);
    s.end('GE');
    const r = await result;
    expect(r.protocol).toBe('TCP');
    expect(r.ended).toBe(true);
    expect(r.head?.toString()).toBe('GE');
  });

  test('a client that ends before sending any byte: ended, no head', async () => {
    const s = new PassThrough();
    const result = sniff(s, 0);
    s.end();
    expect(await result).toEqual({ protocol: 'TCP', head: undefined, ended: true });
  });

  test('a stream destroyed before a decision is closed', async () => {
    const s = new PassThrough();
    const result = sniff(s, 0);
    s.destroy();
    expect((await result).protocol).toBe('closed');
  });
});
