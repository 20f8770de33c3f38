/**
 * The release before this one, as CHANGELOG.md records it. A stand-in until the reader of
 * CHANGELOG.md lands: it names the release the upgrade suite starts from.
 */
export interface Release {
  version: string;
  chartVersion: string;
  /** The commit the release was built from; null when the changelog does not name one. */
  commit: string | null;
  date: string | null;
}

export function previousRelease(): Release {
  return {
    version: '1.0.0',
    chartVersion: '0.2.0',
    commit: '4c875b9b630f5ae82a5a843671e66b3710b7b341',
    date: null,
  };
}
