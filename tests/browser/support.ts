/** What the browser tests share: the service as its own process, Debian's Chromium, small page servers. */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { serviceEnv } from '../../tools/harness/env';
import { pollUntil } from '../../tools/harness/poll';
import { ROOT, startService as startServiceProcess } from '../../tools/harness/service';

const ARTIFACTS = path.join(ROOT, 'test-artifacts');

/** Debian's package, installed by .ci/run: never a downloaded browser. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/**
 * The flags the closed CI network needs: without them Chromium keeps trying its own background
 * connections (updates, sync, QUIC probes) and stalls.
 */
const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

/** A fresh profile every time (--user-data-dir, which playwright passes for a persistent context). */
async function launchBrowser(): Promise<Browser> {
  const profile = mkdtempSync(path.join(tmpdir(), 'sp-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_FLAGS,
    viewport: { width: 1280, height: 900 },
  });
  context.setDefaultTimeout(30_000);
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

export interface RequestLine {
  id: string;
  method: string;
  path: string;
  status: number;
}

export interface Service {
  /** http://127.0.0.1:<port> */
  url: string;
  /** The request log lines (one per request) written so far. */
  requests(): RequestLine[];
  /**
   * The lines written after the first `since` that `keep` keeps, once there are `count` of them or
   * 5 s have passed: a line is written when its answer is finished, possibly after the page saw it.
   */
  requestsAfter(since: number, keep: (line: RequestLine) => boolean, count: number): Promise<RequestLine[]>;
  stop(): Promise<void>;
}

/**
 * The service as operators run it (tsx on service/src/main.ts), on ephemeral ports and the embedded
 * in-memory database, with the given extra settings.
 */
async function startService(settings: Record<string, string>): Promise<Service> {
  // Always the embedded database: these tests are about the browser, not about PostgreSQL.
  // Loopback is trusted as a proxy: the test's own calls name their log lines with X-Request-Id.
  const env = serviceEnv(
    {
      PORT: '0',
      METRICS_PORT: '0',
      LOG_LEVEL: 'info',
      SHUTDOWN_DELAY_SECONDS: '0',
      TRUSTED_PROXIES: '127.0.0.1,::1',
      ...settings,
    },
    'embedded',
  );
  const service = await startServiceProcess(env);
  const requests = () =>
    service.lines
      .filter((entry) => entry.msg === 'request completed')
      .map((entry) => {
        const req = entry.req as { id: string; method: string; path: string };
        return { ...req, status: (entry.res as { status: number }).status };
      });
  return {
    url: service.base,
    requests,
    requestsAfter: async (since, keep, count) =>
      (
        await pollUntil(
          () => requests().slice(since).filter(keep),
          (seen) => seen.length >= count,
          { withinMs: 5000, everyMs: 50 },
        )
      ).value,
    stop: async () => {
      const code = await service.stop('SIGTERM');
      if (code !== 0) throw new Error(`the service exited with ${String(code)}:\n${service.stderr()}`);
    },
  };
}

/**
 * For a file's cases: the service with `settings` (read when it starts, so they may name what an
 * earlier hook made) and a browser, started before the first case and stopped after the last. The
 * objects are returned at once and filled in when they start.
 */
export function serviceAndBrowser(settings: () => Record<string, string> = () => ({})): {
  service: Service;
  browser: Browser;
} {
  const service = {} as Service;
  const browser = {} as Browser;
  beforeAll(async () => {
    Object.assign(service, await startService(settings()));
    Object.assign(browser, await launchBrowser());
  });
  afterAll(async () => {
    // Only what started is stopped: a failed start has already said why.
    if ('close' in browser) await browser.close();
    if ('stop' in service) await service.stop();
  });
  return { service, browser };
}

export interface PageServer {
  origin: string;
  close(): Promise<void>;
}

/** Serves one HTML page at / from its own origin (127.0.0.1 and a port of its own). */
export async function servePage(html: string): Promise<PageServer> {
  const server: Server = createServer((req, res) => {
    if (req.url === '/') res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' }).end(html);
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  };
}

export function artifactPath(name: string): string {
  mkdirSync(ARTIFACTS, { recursive: true });
  return path.join(ARTIFACTS, name);
}
