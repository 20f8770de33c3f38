/**
 * The releases this one is upgraded from (CHANGELOG.md). Stub: the integrator keeps the real module.
 */
export interface Release {
  version: string;
  chartVersion: string;
  commit: string | null;
  date: string | null;
}

/** The release before this one: what a rolling upgrade to this release starts from. */
export function previousRelease(): Release {
  return {
    version: '1.0.0',
    chartVersion: '0.2.0',
    commit: '4c875b9b630f5ae82a5a843671e66b3710b7b341',
    date: '2026-11-25',
  };
}
