/** Reading Prometheus's text format, as a scrape of the service's metrics port returns it. */

/** Samples of the Prometheus text format: `name{labels} value` per line. */
export function samples(text: string, name: string): { labels: string; value: number }[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))
    .map((line) => {
      const value = Number(line.slice(line.lastIndexOf(' ') + 1));
      const labels = line.startsWith(`${name}{`) ? line.slice(name.length + 1, line.lastIndexOf('}')) : '';
      return { labels, value };
    });
}

/** The value of the one sample with exactly these labels (`a="b",c="d"`, none by default). */
export function sample(text: string, name: string, labels = ''): number | undefined {
  return samples(text, name).find((s) => s.labels === labels)?.value;
}

/** The sum of a metric's samples whose labels include every fragment (all its samples for none). */
export const sumOf = (text: string, name: string, ...fragments: string[]): number =>
  samples(text, name)
    .filter((s) => fragments.every((f) => s.labels.includes(f)))
    .reduce((sum, s) => sum + s.value, 0);

/** A scrape of the metrics port `port` on this machine. */
export async function scrape(port: number): Promise<string> {
  const answer = await fetch(`http://127.0.0.1:${String(port)}/metrics`, {
    signal: AbortSignal.timeout(5000),
  });
  return answer.text();
}
