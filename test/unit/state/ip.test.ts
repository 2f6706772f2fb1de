import { describe, expect, test } from 'vitest';

import { formatHostPort, normalizeIp, normalizeIpOrCidr, parseCidr, parseHostPort } from '../../../src/state/ip.ts';

describe('normalizeIp', () => {
  test.each([
    ['10.0.0.1', '10.0.0.1'],
    ['255.255.255.255', '255.255.255.255'],
    ['::1', '::1'],
    ['2001:DB8:0:0:0:0:0:1', '2001:db8::1'],
    ['fd00:10:96::0020', 'fd00:10:96::20'],
    ['::ffff:10.0.0.1', '10.0.0.1'],
    ['::ffff:127.0.0.1', '127.0.0.1'],
    ['::FFFF:a00:1', '10.0.0.1'],
    ['::', '::'],
  ])('%s → %s', (input, expected) => {
    expect(normalizeIp(input)).toBe(expected);
  });

  test.each([
    'localhost',
    'reviews.shop.svc.cluster.local',
    '10.1',
    '010.0.0.1',
    '10.0.0.01',
    '0x0a.0.0.1',
    '10.0.0.256',
    '10.0.0.1/32',
    '[::1]',
    'fe80::1%eth0',
    '',
    ' 10.0.0.1',
    '1.2.3.4.5',
  ])('%j is not an IP', (input) => {
    expect(normalizeIp(input)).toBeUndefined();
  });
});

describe('formatHostPort', () => {
  test.each([
    ['10.0.0.1', 80, '10.0.0.1:80'],
    ['::1', 80, '[::1]:80'],
    ['2001:db8::1', 15008, '[2001:db8::1]:15008'],
  ])('%s + %d → %s', (ip, port, expected) => {
    expect(formatHostPort(ip, port)).toBe(expected);
  });
});

describe('parseHostPort', () => {
  test.each([
    ['10.0.0.1:80', { ip: '10.0.0.1', port: 80 }],
    ['[::1]:80', { ip: '::1', port: 80 }],
    ['[2001:DB8::1]:65535', { ip: '2001:db8::1', port: 65535 }],
    ['[::ffff:127.0.0.1]:8080', { ip: '127.0.0.1', port: 8080 }],
    ['127.0.0.1:1', { ip: '127.0.0.1', port: 1 }],
  ])('%s', (authority, expected) => {
    expect(parseHostPort(authority)).toEqual(expected);
  });

  test.each([
    ['no port', '10.0.0.1'],
    ['empty port', '10.0.0.1:'],
    ['port 0', '10.0.0.1:0'],
    ['port too big', '10.0.0.1:65536'],
    ['huge port', '10.0.0.1:99999999'],
    ['negative port', '10.0.0.1:-1'],
    ['plus sign', '10.0.0.1:+80'],
    ['leading zero', '10.0.0.1:080'],
    ['hex port', '10.0.0.1:0x50'],
    ['fractional port', '10.0.0.1:80.5'],
    ['space', '10.0.0.1: 80'],
    ['hostname', 'reviews:80'],
    ['fqdn', 'reviews.shop.svc.cluster.local:9080'],
    ['unbracketed IPv6', '::1:80'],
    ['bracketed IPv4', '[10.0.0.1]:80'],
    ['unclosed bracket', '[::1:80'],
    ['bracket without port', '[::1]'],
    ['garbage after bracket', '[::1]x80'],
    ['bad IPv4', '10.0.0.300:80'],
    ['shorthand IPv4', '10.1:80'],
    ['empty', ''],
  ])('rejects %s (%j)', (_name, authority) => {
    expect(parseHostPort(authority)).toBeUndefined();
  });
});

describe('CIDRs', () => {
  test.each([
    ['10.0.0.7/24', '10.0.0.0/24'],
    ['10.0.0.7/32', '10.0.0.7'],
    ['2001:db8::7/64', '2001:db8::/64'],
    ['10.0.0.7', '10.0.0.7'],
  ])('normalizeIpOrCidr(%s) → %s', (input, expected) => {
    expect(normalizeIpOrCidr(input)).toBe(expected);
  });

  test.each(['10.0.0.0/33', '10.0.0.0/', '10.0.0.0/x', 'host/24', '2001:db8::/129'])('rejects %s', (input) => {
    expect(normalizeIpOrCidr(input)).toBeUndefined();
  });

  test('contains checks family and range', () => {
    const cidr = parseCidr('10.0.0.0/24')!;
    expect(cidr.contains('10.0.0.200')).toBe(true);
    expect(cidr.contains('10.0.1.1')).toBe(false);
    expect(cidr.contains('::1')).toBe(false);
    expect(parseCidr('10.0.0.1')).toBeUndefined();
  });
});
