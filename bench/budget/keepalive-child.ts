/**
 * The local keep-alive server of the budget bench's side-call layer, in its own process so that its
 * CPU is not the client's: `node dist/bench/budget/keepalive-child.js --port P --bytes N`. Every POST gets a
 * 200 with a JSON body of about N bytes (a prefill answer's size). Prints `listening <port>`.
 */
import { createServer } from 'node:http';

const argv = process.argv.slice(2);
const bytes = Number(argv[argv.indexOf('--bytes') + 1] ?? 1024);
const port = Number(argv[argv.indexOf('--port') + 1] ?? 0);
const answer = Buffer.from(JSON.stringify({ id: 'cmpl-budget', object: 'chat.completion', pad: 'x'.repeat(Math.max(0, bytes - 64)) }));
const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': answer.length });
    res.end(answer);
  });
});
server.listen(port, '127.0.0.1', () => {
  const a = server.address();
  process.stdout.write(`listening ${typeof a === 'object' && a ? a.port : 0}\n`);
});
