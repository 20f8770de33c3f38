/**
 * The token server of a registry that takes tokens (registry.ts, `auth: 'bearer'`), as GHCR's and
 * Harbor's do: a token for the repositories and actions a request's scope asks for, cut down to
 * what its login may do (nothing without a login), signed with the CA's key and carrying its
 * certificate, which the registry trusts. A process of its own (`tsx registry-tokens.ts CONFIG`,
 * printing its port), so that a caller blocked on a synchronous child still has its tokens served.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import jwt from 'jsonwebtoken';

export interface RegistryLogin {
  username: string;
  password: string;
  /** What a token for this login may do (bearer only); all by default. */
  may?: ('pull' | 'push')[];
}

export interface TokenServerConfig {
  service: string;
  /** The CA's PEM key and certificate files. */
  key: string;
  cert: string;
  logins: RegistryLogin[];
}

function serve(config: TokenServerConfig): void {
  const key = readFileSync(config.key, 'utf8');
  // The certificate's DER, base64, as a token's x5c carries it.
  const certificate = readFileSync(config.cert, 'utf8').replace(/-----[^-]+-----|\s/g, '');
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://tokens');
    const [scheme, credentials] = (request.headers.authorization ?? '').split(' ');
    const [username = '', ...password] = Buffer.from(credentials ?? '', 'base64')
      .toString()
      .split(':');
    const login = config.logins.find((l) => l.username === username && l.password === password.join(':'));
    if (scheme === 'Basic' && !login) {
      response.writeHead(401).end();
      return;
    }
    const allowed: string[] = login ? (login.may ?? ['pull', 'push']) : [];
    const access = url.searchParams.getAll('scope').map((scope) => {
      const [type = '', name = '', actions = ''] = scope.split(':');
      return { type, name, actions: actions.split(',').filter((action) => allowed.includes(action)) };
    });
    const token = jwt.sign({ access }, key, {
      algorithm: 'ES256',
      issuer: config.service,
      audience: url.searchParams.get('service') ?? config.service,
      subject: username,
      expiresIn: '10m',
      notBefore: 0,
      jwtid: randomUUID(),
      header: { alg: 'ES256', x5c: [certificate] },
    });
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token }));
  });
  server.listen(0, '127.0.0.1', () => {
    const address = server.address();
    process.stdout.write(`${typeof address === 'object' && address ? address.port : ''}\n`);
  });
  process.on('SIGTERM', () => server.close(() => process.exit(0)));
}

if (require.main === module) {
  const file = process.argv[2];
  if (!file) throw new Error('usage: tsx tools/harness/registry-tokens.ts CONFIG.json');
  serve(JSON.parse(readFileSync(file, 'utf8')) as TokenServerConfig);
}
