/** Reading a Prometheus text exposition in tests. */

/** Samples of one metric family: labels string (`{a="b"}`, or `''`) -> value. */
export function samples(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m && m[1] === name) out.set(m[2] ?? '', Number(m[3]));
  }
  return out;
}

/** One sample; `labels` as written inside the braces (`model_name="m"`), `''` for none. */
export const sample = (text: string, name: string, labels = ''): number | undefined =>
  samples(text, name).get(labels === '' ? '' : `{${labels}}`);

export async function scrape(port: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics on ${port}: HTTP ${res.status}`);
  return res.text();
}
