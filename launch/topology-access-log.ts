/** The access log of the no-Kubernetes topology's Envoy (launch/epp-topology.ts): its line format and its parse. */

/**
 * The access-log line, `key=value` separated by spaces (values never hold a space: Envoy writes `-`
 * for a missing one). `upstream=` is the endpoint Envoy connected to (the EPP's pick); `prefiller=`
 * the prefill worker named on the request (llm-d's `x-prefiller-host-port`, else the prefill pod
 * epd-coordinator pinned with `x-llm-d-pin-host-port`). The public listener adds our metadata.
 */
export function accessLogFormat(listener: 'public' | 'gateway' | 'async'): string {
  const base = [
    `[envoy] listener=${listener} start=%START_TIME% method=%REQ(:METHOD)% path=%REQ(:PATH)% code=%RESPONSE_CODE%`,
    'flags=%RESPONSE_FLAGS% details=%RESPONSE_CODE_DETAILS% cluster=%UPSTREAM_CLUSTER% upstream=%UPSTREAM_HOST%',
    'prefiller=%REQ(X-PREFILLER-HOST-PORT?X-LLM-D-PIN-HOST-PORT)% epp-profile=%REQ(EPP-PROFILE)% id=%REQ(X-REQUEST-ID)% dur=%DURATION%',
  ];
  if (listener !== 'gateway') {
    base.push(
      ['request_id', 'path_taken', 'steps', 'total_ms', 'status', 'error_step', 'error_class', 'upstream_status']
        .map((k) => `${k}=%DYNAMIC_METADATA(epd.coordinator:${k})%`)
        .join(' '),
    );
  }
  return `${base.join(' ')}\n`;
}

/** One access-log line parsed back into its fields (`-` stays `-`). Lines of other loggers: null. */
export function parseAccessLogLine(line: string): Record<string, string> | null {
  if (!line.startsWith('[envoy] ')) return null;
  const out: Record<string, string> = {};
  for (const tok of line.slice(8).trim().split(/\s+/)) {
    const eq = tok.indexOf('=');
    if (eq > 0) out[tok.slice(0, eq)] = tok.slice(eq + 1);
  }
  return out;
}

export function fileAccessLog(path: string, listener: 'public' | 'gateway' | 'async'): unknown[] {
  return [
    {
      name: 'envoy.access_loggers.file',
      typed_config: {
        '@type': 'type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog',
        path,
        log_format: { text_format_source: { inline_string: accessLogFormat(listener) } },
      },
    },
  ];
}
