import { type RequestHandler, type Router } from 'express';
import swaggerUi from 'swagger-ui-express';
import { sendJson } from '../http/json';
import { exactRouter } from '../http/router';
import { pageHeaders } from '../http/security-headers';

/**
 * Only the files the page links to: swagger-ui-express serves the whole swagger-ui-dist folder,
 * whose stock index.html and swagger-initializer.js open a foreign example API, and answers any
 * path ending in /package.json with a bare text/plain 404. Any other path leaves this router for
 * the app's problem+json 404.
 */
function onlyLinkedFrom(page: string): RequestHandler {
  const linked = new Set([...page.matchAll(/(?:href|src)="\/docs(\/[^"?#]+)"/g)].map((match) => match[1]));
  return (req, _res, next) => {
    next(linked.has(req.path) ? undefined : 'router');
  };
}

/** `/openapi.json` and the Swagger UI page at `/docs`, serving the one document the app built. */
export function docsRouter(document: object): Router {
  const router = exactRouter();
  router.get('/openapi.json', (_req, res) => {
    sendJson(res, document);
  });
  const uiOptions = {
    customSiteTitle: 'Social Posts API',
    // The token lives in the page (localStorage), never in a cookie.
    swaggerOptions: { persistAuthorization: true, validatorUrl: null },
  };
  // The page answers 200 at /docs itself (no redirect to /docs/), so its asset links are absolute.
  const page = swaggerUi.generateHTML(document, uiOptions).replace(/(href|src)="\.\//g, '$1="/docs/');
  router.get(['/docs', '/docs/'], pageHeaders, (_req, res) => {
    res.type('html').send(page);
  });
  router.use('/docs', onlyLinkedFrom(page), pageHeaders, swaggerUi.serveFiles(document, uiOptions));
  return router;
}
