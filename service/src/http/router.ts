import { Router } from 'express';

/**
 * A router that matches paths exactly: /login and /users/ are rate-limited by the proxy at exactly
 * those paths, so /login/, /Login or /users must not reach them unlimited. Express routers do not
 * inherit the app's routing settings, so every router is made here.
 */
export function exactRouter(): Router {
  return Router({ strict: true, caseSensitive: true });
}
