import http2 from 'node:http2'; import fs from 'node:fs';
const n = +process.argv[2] || 100;
const s = http2.connect('https://127.0.45.1:15008', { ca: fs.readFileSync('ca/root-cert.pem'), cert: fs.readFileSync('certs/client-cert.pem'), key: fs.readFileSync('certs/client-key.pem'), ALPNProtocols: ['h2'], checkServerIdentity: () => undefined });
s.on('error', e => console.error('sess', e.message));
let done = 0;
for (let i = 0; i < n; i++) {
  const st = s.request({ ':method': 'CONNECT', ':authority': '127.0.45.102:84' }, { endStream: false });
  let got = 0;
  st.on('response', () => st.write('GET /big?mb=50 HTTP/1.1\r\nHost: a\r\n\r\n'));
  st.on('data', d => { got += d.length; if (got > 1e6 && !st.closed) { st.close(http2.constants.NGHTTP2_CANCEL); } });
  st.on('close', () => { if (++done === n) { console.log('all reset'); setTimeout(() => { s.close(); }, +process.env.HOLD || 0); } });
  st.on('error', () => {});
}
