import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import express, { type Response } from 'express';
import { sendJson } from '../../service/src/http/json';

/**
 * sendJson stands in for Express's res.json on every JSON answer (service/src/http/json.ts): what
 * reaches a client must be byte for byte what res.json sends, headers in the same order.
 */
const BODIES: Record<string, unknown> = {
  list: [
    { id: 1, title: 'Ünïcödé — and "quotes"', created_at: new Date('2026-11-25T10:00:00.123Z') },
    { id: 2, title: '𝄞 four-byte', owner: { id: 7, email: 'a@example.com' } },
  ],
  long: { content: 'x'.repeat(5000) },
  empty: [],
  message: { message: 'successfully added vote' },
};

function appWith(send: (res: Response, body: unknown) => void) {
  const app = express();
  app.disable('x-powered-by');
  app.all('/:name/:status', (req, res) => {
    res.status(Number(req.params.status));
    send(res, BODIES[req.params.name]);
  });
  return app;
}

let viaExpress: Server;
let viaHelper: Server;

const listen = (server: Server) =>
  new Promise<number>((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve((server.address() as AddressInfo).port);
    });
  });
let ports: { express: number; helper: number };

beforeAll(async () => {
  viaExpress = createServer(appWith((res, body) => res.json(body)));
  viaHelper = createServer(appWith(sendJson));
  ports = { express: await listen(viaExpress), helper: await listen(viaHelper) };
});
afterAll(async () => {
  await Promise.all([viaExpress, viaHelper].map((s) => new Promise((r) => s.close(r))));
});

/** The whole answer as sent, less the Date header (the clock moves between the two requests). */
function rawAnswer(port: number, head: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      resolve(
        Buffer.concat(chunks)
          .toString('latin1')
          .replace(/\r\nDate: [^\r]*/, ''),
      );
    });
    socket.end(`${head}Host: localhost\r\nConnection: close\r\n\r\n`);
  });
}

async function bothAnswers(head: string): Promise<[string, string]> {
  return [await rawAnswer(ports.express, head), await rawAnswer(ports.helper, head)];
}

describe('JSON answers (sendJson against res.json)', () => {
  test.each([
    ['GET', 'list', 200],
    ['GET', 'long', 200],
    ['GET', 'empty', 200],
    ['POST', 'message', 201],
    ['PUT', 'list', 200],
    ['HEAD', 'list', 200],
    ['GET', 'message', 404],
  ])(
    'When %s asks for %s answered with %i, then the bytes are the same as res.json',
    async (method, name, status) => {
      const [expected, actual] = await bothAnswers(`${method} /${name}/${String(status)} HTTP/1.1\r\n`);
      expect(actual).toMatch(new RegExp(`^HTTP/1.1 ${String(status)} `));
      expect(actual).toContain('ETag: W/"');
      expect(actual).toBe(expected);
    },
  );

  test('When a GET carries the ETag it was given, then 304 without a body, as res.json answers', async () => {
    const first = await rawAnswer(ports.helper, 'GET /list/200 HTTP/1.1\r\n');
    const tag = /\r\nETag: ([^\r]+)/.exec(first)?.[1];
    expect(tag).toMatch(/^W\/"[0-9a-f]+-/);
    const [expected, actual] = await bothAnswers(
      `GET /list/200 HTTP/1.1\r\nIf-None-Match: ${String(tag)}\r\n`,
    );
    expect(actual).toMatch(/^HTTP\/1.1 304 /);
    expect(actual).not.toContain('Content-Type');
    expect(actual.endsWith('\r\n\r\n')).toBe(true);
    expect(actual).toBe(expected);
  });

  test('When the ETag does not match, or the method is not GET or HEAD, then the full answer', async () => {
    for (const head of [
      'GET /list/200 HTTP/1.1\r\nIf-None-Match: W/"0-nothing"\r\n',
      'POST /message/201 HTTP/1.1\r\nIf-None-Match: *\r\n',
    ]) {
      const [expected, actual] = await bothAnswers(head);
      expect(actual).toMatch(/^HTTP\/1.1 20[01] /);
      expect(actual).toBe(expected);
    }
  });
});
