/** Facts of the API contract that more than one suite checks the service against. */

/** Every operation of the specification's endpoint table and the two probes, as `METHOD /path` (OpenAPI paths). */
export const CONTRACT_OPERATIONS = [
  'POST /users/',
  'POST /login',
  'POST /posts/',
  'GET /posts/',
  'GET /posts/public',
  'GET /posts/{id}',
  'PUT /posts/{id}',
  'DELETE /posts/{id}',
  'POST /votes/',
  'GET /healthz/live',
  'GET /healthz/ready',
] as const;
