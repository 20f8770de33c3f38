/**
 * A private CA and server certificates it signs, made with the openssl command line (EC P-256,
 * valid two days), for servers that present TLS to the service: a PostgreSQL of a test's own,
 * PgBouncer standing in for CloudNativePG's Pooler. Files go into `dir`: <name>.crt, <name>.key.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ownForPostgres } from './postgres';

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

export interface Certificate {
  cert: string;
  key: string;
}

/** A self-signed CA named `commonName`: `<dir>/<name>.crt` and `.key`. */
export function makeCa(dir: string, name: string, commonName: string): Certificate {
  const files = { cert: path.join(dir, `${name}.crt`), key: path.join(dir, `${name}.key`) };
  openssl([
    'req',
    '-x509',
    ...EC_KEY,
    '-keyout',
    files.key,
    '-out',
    files.cert,
    '-days',
    '2',
    '-subj',
    `/CN=${commonName}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  return files;
}

/**
 * A server certificate for `names` (its subjectAltNames, which a client checks the host it dialled
 * against), signed by `ca`; owned by the postgres account, which the servers run as.
 */
export function signServer(dir: string, name: string, ca: Certificate, names: string[]): Certificate {
  const files = { cert: path.join(dir, `${name}.crt`), key: path.join(dir, `${name}.key`) };
  const csr = path.join(dir, `${name}.csr`);
  const ext = path.join(dir, `${name}.ext`);
  openssl(['req', ...EC_KEY, '-keyout', files.key, '-out', csr, '-subj', `/CN=${names[0] ?? name}`]);
  writeFileSync(
    ext,
    `subjectAltName=${names.map((n) => `DNS:${n}`).join(',')}\nextendedKeyUsage=serverAuth\n`,
  );
  openssl([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-CAcreateserial',
    '-out',
    files.cert,
    '-days',
    '2',
    '-extfile',
    ext,
  ]);
  // PostgreSQL refuses a key others may read.
  chmodSync(files.key, 0o600);
  ownForPostgres(files.cert);
  ownForPostgres(files.key);
  return files;
}
