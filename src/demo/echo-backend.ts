/**
 * The demo's application: a tiny HTTP/1.1 server on a pod IP. GET answers a JSON description of
 * the request and which pod served it; a request with a body gets the body echoed back.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** Start the echo app on `host:port`, naming itself `pod` in `x-served-by`. Rejects on a bind error (EADDRINUSE). */
export async function startEchoBackend(host: string, port: number, pod: string): Promise<http.Server & { address(): AddressInfo }> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (body.length > 0) {
        res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/octet-stream', 'content-length': body.length, 'x-served-by': pod });
        res.end(body);
        return;
      }
      const text = `${JSON.stringify({ pod, method: req.method, url: req.url, headers: req.headers }, null, 2)}\n`;
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), 'x-served-by': pod });
      res.end(text);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return server as http.Server & { address(): AddressInfo };
}
