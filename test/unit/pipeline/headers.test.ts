/** HeaderList (flat raw header block) and hop-by-hop stripping. */
import { describe, expect, test } from 'vitest';
import { HeaderList, isHopByHop, namesMoreHeaders, stripHopByHop } from '../../../src/pipeline/headers.ts';

describe('HeaderList.get', () => {
  const raw = ['Host', 'example', 'Content-Type', 'text/html', 'X-Multi', 'one', 'x-multi', 'two', 'ETag', '"abc"'];
  const cases: { name: string; expected: string | undefined }[] = [
    { name: 'host', expected: 'example' },
    { name: 'content-type', expected: 'text/html' },
    { name: 'x-multi', expected: 'one' },
    { name: 'etag', expected: '"abc"' },
    { name: 'content', expected: undefined },
    { name: 'content-typ', expected: undefined },
    { name: 'content-types', expected: undefined },
    { name: 'accept', expected: undefined },
  ];
  test.each(cases)('get($name) matches stored names case-insensitively → $expected', ({ name, expected }) => {
    expect(new HeaderList([...raw]).get(name)).toBe(expected);
  });

  test('an empty list has no headers', () => {
    expect(new HeaderList().get('host')).toBeUndefined();
    expect(new HeaderList().raw).toEqual([]);
  });

  test('values are not mistaken for names', () => {
    expect(new HeaderList(['x-a', 'host', 'x-b', 'v']).get('host')).toBeUndefined();
  });
});

describe('HeaderList mutations', () => {
  const base = () => ['Host', 'h', 'X-Foo', '1', 'Accept', '*/*', 'x-foo', '2', 'User-Agent', 'ua'];
  const cases: { name: string; run: (h: HeaderList) => unknown; result?: unknown; raw: string[] }[] = [
    {
      name: 'set replaces every value of a present name with one value, keeping the others in order and case',
      run: (h) => h.set('x-foo', '3'),
      raw: ['Host', 'h', 'Accept', '*/*', 'User-Agent', 'ua', 'x-foo', '3'],
    },
    {
      name: 'set appends an absent name at the end',
      run: (h) => h.set('x-new', 'n'),
      raw: ['Host', 'h', 'X-Foo', '1', 'Accept', '*/*', 'x-foo', '2', 'User-Agent', 'ua', 'x-new', 'n'],
    },
    {
      name: 'append adds a value and keeps the existing ones',
      run: (h) => h.append('X-Foo', '3'),
      raw: ['Host', 'h', 'X-Foo', '1', 'Accept', '*/*', 'x-foo', '2', 'User-Agent', 'ua', 'X-Foo', '3'],
    },
    {
      name: 'remove drops every value of a name whatever its case and returns the count',
      run: (h) => h.remove('x-foo'),
      result: 2,
      raw: ['Host', 'h', 'Accept', '*/*', 'User-Agent', 'ua'],
    },
    {
      name: 'remove of the first header keeps the rest in order',
      run: (h) => h.remove('host'),
      result: 1,
      raw: ['X-Foo', '1', 'Accept', '*/*', 'x-foo', '2', 'User-Agent', 'ua'],
    },
    {
      name: 'remove of the last header keeps the rest in order',
      run: (h) => h.remove('user-agent'),
      result: 1,
      raw: ['Host', 'h', 'X-Foo', '1', 'Accept', '*/*', 'x-foo', '2'],
    },
    {
      name: 'remove of an absent name changes nothing and returns 0',
      run: (h) => h.remove('x-absent'),
      result: 0,
      raw: base(),
    },
  ];
  test.each(cases)('$name', ({ run, result, raw }) => {
    const h = new HeaderList(base());
    const r = run(h);
    if (result !== undefined) expect(r).toBe(result);
    expect(h.raw).toEqual(raw);
  });

  test('get after set returns the new value; after remove, undefined', () => {
    const h = new HeaderList(base());
    h.set('x-foo', '9');
    expect(h.get('x-foo')).toBe('9');
    h.remove('x-foo');
    expect(h.get('x-foo')).toBeUndefined();
  });

  test('mutations edit the flat list handed to the constructor (it is passed to writeHead as is)', () => {
    const list = ['a', '1'];
    const h = new HeaderList(list);
    h.append('b', '2');
    h.remove('a');
    expect(h.raw).toBe(list);
    expect(list).toEqual(['b', '2']);
  });
});

describe('stripHopByHop', () => {
  const endToEnd = ['Host', 'h', 'Content-Type', 'text/plain', 'X-Keep', 'k', 'Authorization', 'Bearer t', 'Content-Length', '5'];
  const hopByHop = [
    'Connection',
    'Keep-Alive',
    'Proxy-Connection',
    'TE',
    'Trailer',
    'Transfer-Encoding',
    'Upgrade',
    'Proxy-Authenticate',
    'Proxy-Authorization',
  ];

  test.each(hopByHop.flatMap((n) => [n, n.toLowerCase(), n.toUpperCase()]))('removes %s and keeps everything else in order', (name) => {
    const raw = ['Host', 'h', name, 'v', 'X-Keep', 'k'];
    expect(stripHopByHop(raw, undefined)).toEqual(['Host', 'h', 'X-Keep', 'k']);
  });

  test('removes every hop-by-hop header at once, keeping end-to-end headers in order with their case', () => {
    const raw = [
      'Connection', 'keep-alive',
      'Host', 'h',
      'Keep-Alive', 'timeout=5',
      'Proxy-Connection', 'keep-alive',
      'Content-Type', 'text/plain',
      'TE', 'trailers',
      'Trailer', 'x-checksum',
      'X-Keep', 'k',
      'Transfer-Encoding', 'chunked',
      'Upgrade', 'h2c',
      'Authorization', 'Bearer t',
      'Proxy-Authenticate', 'Basic',
      'Proxy-Authorization', 'Basic eA==',
      'Content-Length', '5',
    ];
    expect(stripHopByHop(raw, 'keep-alive')).toEqual(endToEnd);
  });

  const connectionCases: { connection: string; raw: string[]; expected: string[] }[] = [
    {
      connection: 'X-Foo',
      raw: ['Connection', 'X-Foo', 'x-foo', '1', 'X-Bar', '2'],
      expected: ['X-Bar', '2'],
    },
    {
      connection: ' x-foo , X-BAR ,,',
      raw: ['X-Foo', '1', 'Accept', 'a', 'x-bar', '2', 'X-Baz', '3'],
      expected: ['Accept', 'a', 'X-Baz', '3'],
    },
    {
      connection: 'close',
      raw: ['Connection', 'close', 'Accept', 'a', 'X-Close', 'c'],
      expected: ['Accept', 'a', 'X-Close', 'c'],
    },
    {
      connection: 'keep-alive, X-Secret',
      raw: ['Keep-Alive', 'timeout=5', 'X-Secret', 's', 'X-Public', 'p'],
      expected: ['X-Public', 'p'],
    },
    {
      connection: '',
      raw: ['Accept', 'a'],
      expected: ['Accept', 'a'],
    },
  ];
  test.each(connectionCases)('with Connection "$connection" removes the listed names case-insensitively', ({ connection, raw, expected }) => {
    expect(stripHopByHop(raw, connection)).toEqual(expected);
    // What the one-pass readers (request head, upstream response) decide from: fixed names, then whether a second pass is needed.
    const onePass = raw.filter((_, i) => i % 2 === 0 && !isHopByHop(raw[i])).flatMap((n) => [n, raw[raw.indexOf(n) + 1]]);
    expect(namesMoreHeaders(connection) ? stripHopByHop(onePass, connection) : onePass).toEqual(expected);
  });

  test('isHopByHop: the fixed names in any case, nothing else', () => {
    for (const n of ['Connection', 'KEEP-ALIVE', 'proxy-connection', 'Proxy-Authenticate', 'proxy-authorization', 'TE', 'Trailer', 'transfer-encoding', 'Upgrade']) expect(isHopByHop(n), n).toBe(true);
    for (const n of ['Content-Length', 'Host', 'x-keep-alive', 'Trailers', 'te2', '']) expect(isHopByHop(n), n).toBe(false);
  });

  test('namesMoreHeaders: only tokens other than close and keep-alive', () => {
    expect([namesMoreHeaders('keep-alive'), namesMoreHeaders(' Close '), namesMoreHeaders('close, keep-alive'), namesMoreHeaders('')]).toEqual([false, false, false, false]);
    expect([namesMoreHeaders('x-foo'), namesMoreHeaders('keep-alive, X-Hop'), namesMoreHeaders('Upgrade')]).toEqual([true, true, true]);
  });

  test('returns a new list and leaves the input untouched', () => {
    const raw = ['Connection', 'x-a', 'X-A', '1', 'B', '2'];
    const copy = [...raw];
    const out = stripHopByHop(raw, 'x-a');
    expect(out).toEqual(['B', '2']);
    expect(out).not.toBe(raw);
    expect(raw).toEqual(copy);
  });

  test('a list without hop-by-hop headers comes back equal', () => {
    expect(stripHopByHop(endToEnd, undefined)).toEqual(endToEnd);
  });
});
