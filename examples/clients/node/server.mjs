// A tiny server behind the ratekeeper middleware:
//
//   RATEKEEPER_URL=http://127.0.0.1:8080 node server.mjs
//
// HOST (default 127.0.0.1) and PORT (default 8000; 0 picks a free one) say
// where it listens; it prints the address once it does. The middleware is
// configured from RATEKEEPER_* (see README.md).

import http from 'node:http';
import { ratekeeper } from './ratekeeper.mjs';

const limit = ratekeeper();

const server = http.createServer((req, res) => {
  limit(req, res, () => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('hello\n');
  }).catch((error) => {
    // The middleware answers every outcome itself; this is a bug.
    console.error('middleware failed:', error);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  });
});

server.listen(Number(process.env.PORT ?? 8000), process.env.HOST ?? '127.0.0.1', () => {
  const { address, port } = server.address();
  console.log(`listening on http://${address}:${port}`);
});

// Docker and systemd stop with SIGTERM: finish what is in flight, then exit.
process.on('SIGTERM', () => server.close(() => process.exit(0)));
