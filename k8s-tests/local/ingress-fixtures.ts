/** Ingress objects of the chart's shape for the translation's tests (unit and real nginx). */
import type { IIngress } from 'kubernetes-models/networking.k8s.io/v1/Ingress';
import { REQUEST_ID_SNIPPET, type ControllerValues } from './nginx-config';

export const FIXTURE_HOST = 'api.example';

/** The controller values the chart's environments need: the limit answered with 429, the request id nginx's own. */
export const controller: ControllerValues = {
  controller: { config: { 'limit-req-status-code': '429', 'location-snippet': REQUEST_ID_SNIPPET } },
};

/** An Ingress of class nginx for FIXTURE_HOST whose paths all lead to the `api` Service's `http` port. */
export function ingress(
  name: string,
  paths: { path: string; pathType: 'Exact' | 'Prefix' | 'ImplementationSpecific' }[],
  annotations: Record<string, string> = {},
): IIngress {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'Ingress',
    metadata: { name, annotations },
    spec: {
      ingressClassName: 'nginx',
      rules: [
        {
          host: FIXTURE_HOST,
          http: {
            paths: paths.map((p) => ({
              ...p,
              backend: { service: { name: 'api', port: { name: 'http' } } },
            })),
          },
        },
      ],
    },
  };
}
