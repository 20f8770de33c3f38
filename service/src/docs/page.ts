import { type RequestHandler, type Router } from 'express';
import swaggerUi from 'swagger-ui-express';
import { sendJson } from '../http/json';
import { exactRouter } from '../http/router';
import { pageHeaders } from '../http/security-headers';

// swagger-ui-express answers any path ending in /package.json with a bare text/plain 404;
// leaving this router sends such paths to the app's problem+json 404 instead.
const leaveForPackageJson: RequestHandler = (req, _res, next) => {
  next(req.path.endsWith('/package.json') ? 'router' : undefined);
};

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
  router.use('/docs', pageHeaders, leaveForPackageJson, swaggerUi.serveFiles(document, uiOptions));
  return router;
}
