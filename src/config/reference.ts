/**
 * Generates docs/configuration.md: the scalar keys come from `KEYS` (the table the loader itself
 * reads), the step params from the data below. Regenerate after changing either:
 *
 *   npx tsx src/config/reference.ts > docs/configuration.md
 *
 * test/unit/config/config-reference.test.ts fails while the committed page differs.
 */
import { envName } from './config';
import { KEYS, type KeySpec } from './schema';

export const REGENERATE_COMMAND = 'npx tsx src/config/reference.ts > docs/configuration.md';

export interface StepParamSpec {
  readonly name: string;
  readonly type: string;
  /** As written in YAML; `undefined` = no default. */
  readonly default?: string;
  readonly doc: string;
}

export interface StepSpec {
  readonly type: string;
  readonly doc: string;
  readonly params: readonly StepParamSpec[];
}

// The three params every step receives from the `pipeline:` section unless it sets its own.
const USE_OPENAI_FORMAT: StepParamSpec = {
  name: 'use_openai_format',
  type: 'bool',
  default: 'from `pipeline.use_openai_format`',
  doc: '`false` sends the tokens-in `/inference/v1/generate` format to the workers.',
};
const KV_CONNECTOR: StepParamSpec = {
  name: 'kv_connector',
  type: 'enum: kv-shared-storage, kv-nixl, kv-sglang',
  default: 'from `pipeline.kv_connector`, else kv-shared-storage',
  doc: 'Shape of the `kv_transfer_params` handed from prefill to decode. Unknown names stop start-up.',
};
const EC_CONNECTOR: StepParamSpec = {
  name: 'ec_connector',
  type: 'enum: ec-shared-storage, ec-nixl',
  default: 'from `pipeline.ec_connector`, else ec-shared-storage',
  doc: 'Shape of the `ec_transfer_params` handed from encode to prefill. Unknown names stop start-up.',
};

const KV_CONNECTOR_PARAMS: StepParamSpec = {
  name: 'kv_connector_params',
  type: 'map',
  default: '{}',
  doc: 'kv-sglang only: `{bootstrap_port: 1-65535}`. Without it, env `SGLANG_BOOTSTRAP_PORT`, else 8998. Other connectors take no params.',
};

/** The step types of the upstream coordinator (same names and params), in pipeline order. */
export const STEPS: readonly StepSpec[] = [
  {
    type: 'replace-media-urls',
    doc: 'Downloads every `image_url` of a chat request and inlines it as a `data:` URL, with an SSRF guard. No gateway call.',
    params: [
      { name: 'download_timeout', type: 'duration', default: '10s', doc: 'Total time per download, redirects and body included.' },
      { name: 'max_concurrent_downloads', type: 'int > 0', default: '10', doc: 'Downloads in flight for one request.' },
      { name: 'max_multimodal_entries', type: 'int >= 0', default: '0', doc: 'Most image parts per request (0 = no limit); more is a 400 before any download.' },
      { name: 'max_download_size', type: 'int > 0 (MiB)', default: '10', doc: 'Largest image; larger is a 400.' },
      { name: 'allow_private_networks', type: 'bool', default: 'false', doc: 'Allow RFC 1918 addresses. Loopback, link-local, CGNAT and IPv6 unique-local stay blocked.' },
      { name: 'allowed_domains', type: 'list of strings', default: '[] (any host)', doc: 'Host names an image may come from, matched case-insensitively, also on every redirect.' },
      { name: 'allowed_ip_ranges', type: 'list of CIDR strings', default: '[]', doc: 'Exemptions from the address guard, e.g. `127.0.0.1/32` for a local image server. A range covering every address is refused; configured ranges are logged at start-up.' },
    ],
  },
  {
    type: 'render',
    doc: 'Tokenizes once: chat, Responses and completions-string prompts go to the render service, called directly (not through the gateway).',
    params: [
      { name: 'address', type: 'string (URL)', default: '""', doc: 'Base URL of the render service. Needed for chat and string prompts; an empty address fails those requests with 502.' },
      { name: 'timeout', type: 'duration', default: '30s', doc: 'Total time per render call.' },
      { name: 'max_idle_conns_per_host', type: 'int >= 0', default: '100', doc: "Most idle keep-alive connections kept to the render service (more are closed as their calls end; those in use are not capped). `0` = Go's default, 2." },
      { name: 'idle_conn_timeout', type: 'duration', default: '90s', doc: 'How long an idle render connection is kept.' },
      { name: 'max_total_tokens', type: 'int >= 0', default: '0', doc: 'Most prompt tokens (0 = no limit); more is a 400.' },
      { name: 'max_total_placeholder_tokens', type: 'int >= 0', default: '0', doc: 'Most multimodal placeholder tokens in a chat request (0 = no limit); more is a 400.' },
      { name: 'responses_via', type: 'enum: auto, chat, native', default: 'auto', doc: 'How a `/v1/responses` request is rendered. `native`: at `/v1/responses/render`. `chat`: at `/v1/chat/completions/render`, as the chat request it stands for (`instructions` a system message, input items chat messages, as vLLM maps them; docs/responses-api.md). `auto`: native first; a 404 there (llm-d-inference-sim and vLLM\'s render service have no Responses route) falls back to chat, and the address goes straight to chat from then on.' },
    ],
  },
  {
    type: 'conditional-decode',
    doc: 'Asks a decode worker with `Prefer: if-available` whether it can answer from cache. A 412 continues the cascade; any other answer goes to the client.',
    params: [USE_OPENAI_FORMAT],
  },
  {
    type: 'encode',
    doc: 'One encode call per image (EPP-Profile: encode), in parallel; collects the `ec_transfer_params`.',
    params: [
      { name: 'max_parallel', type: 'int > 0', default: '8', doc: 'Encode calls in flight for one request; the first failure cancels the rest.' },
      USE_OPENAI_FORMAT,
      EC_CONNECTOR,
    ],
  },
  {
    type: 'prefill',
    doc: 'One prefill call (EPP-Profile: prefill) with max_tokens 1 and stream false; collects the `kv_transfer_params`.',
    params: [
      USE_OPENAI_FORMAT,
      KV_CONNECTOR,
      EC_CONNECTOR,
      KV_CONNECTOR_PARAMS,
      { name: 'dp_size', type: 'int >= 1', default: '1', doc: 'Data-parallel engine ranks behind each worker pod; only kv-nixl uses it.' },
      { name: 'retries', type: 'int 0-3', default: '1', doc: 'Extra prefill attempts after a connect failure, a reset or a 5xx. Decode has not started yet, so a retry never repeats work.' },
      {
        name: 'min_prompt_tokens',
        type: 'int >= 0',
        default: '0',
        doc: 'Selective disaggregation: a request whose rendered prompt has fewer tokens sends no prefill leg and decodes aggregated (no `kv_transfer_params`); access-log `disaggregation: aggregated_short_prompt`. 0 = always disaggregate. Without a render step the count is unknown and the request is disaggregated.',
      },
      {
        name: 'fallback_to_decode',
        type: 'bool',
        default: 'false',
        doc: 'When the EPP answers the prefill leg that there is no prefill endpoint at all (`429` + `x-llm-d-request-dropped-reason: rejected-saturated` + body `no endpoints available for the given request`, or newer EPPs\' `503` + `rejected-no-endpoints`), serve the request aggregated on decode instead of passing the error on (`disaggregation: aggregated_fallback`). Flow-control saturation of existing prefill pods (a `429 rejected-saturated` with any other body) is still passed on. Only a complete EPP answer triggers it, never a prefill leg that reached a worker.',
      },
    ],
  },
  {
    type: 'decode',
    doc: 'Rewrites the client request into the decode request (EPP-Profile: decode) that Envoy forwards; the answer streams back through Envoy. Last step.',
    params: [
      USE_OPENAI_FORMAT,
      KV_CONNECTOR,
      { name: 'force_stream', type: 'bool', default: 'false', doc: 'Runs a non-streaming chat, completions, generate or responses request upstream as a streaming one and answers the client the JSON reassembled from the SSE (docs/force-stream.md). Requests with tools, functions or logprobs pass through.' },
      { name: 'force_stream_buffer_size', type: 'size (`KiB`/`MiB`/`GiB`, `KB`/`MB`/`GB`, or bytes)', default: '"1GiB"', doc: 'Read only with `force_stream`. Process-wide bytes that buffered force-stream requests (generate, responses, n > 1) may reserve together; a request that does not fit passes through.' },
      { name: 'force_stream_max_request_size', type: 'size', default: '"256KiB", or the buffer size when smaller', doc: 'Cap on one buffered request\'s reservation (16 bytes per output token, 256 per choice, 2048 base); above it the request passes through. Must not exceed `force_stream_buffer_size`.' },
    ],
  },
  {
    type: 'prefill-decode',
    doc: 'Replaces `prefill` + `decode` for connectors whose two legs must be in flight together (kv-sglang): reserves a prefill pod through the EPP (`Prefer: reserve-endpoint`), names it in both bodies, then sends prefill while Envoy forwards the decode request. Last step.',
    params: [
      USE_OPENAI_FORMAT,
      { ...KV_CONNECTOR, type: 'enum: kv-sglang', doc: 'Must be a connector that runs both legs at once; today only kv-sglang. Others stop start-up.' },
      EC_CONNECTOR,
      KV_CONNECTOR_PARAMS,
    ],
  },
  {
    type: 'async-broker',
    doc: 'Optional first step bridging to the llm-d-async Redis broker, chosen per request by a header. Unknown params stop start-up. Details: [async-broker.md](async-broker.md).',
    params: [
      { name: 'redis_url', type: 'string (URL)', doc: 'Required. `redis://user:pass@host:port/db` or `rediss://`; Sentinel `redis-sentinel://host:port,host:port/<master>[/db]`; Cluster `redis-cluster://host:port,host:port` (hash-tagged keys, see async-broker.md).' },
      { name: 'mode_header', type: 'string', default: 'X-AP-Mode', doc: 'Request header choosing `passthrough`, `enqueue` or `wait` (case-insensitive); absent = step does nothing.' },
      { name: 'tenant_header', type: 'string', default: 'X-Team', doc: 'Request header naming the tenant.' },
      { name: 'timeout_header', type: 'string', default: 'X-Request-Timeout-Seconds', doc: 'Request header with the client\'s deadline in seconds.' },
      { name: 'timeouts', type: 'map enqueue/wait -> {default_seconds, max_seconds}', default: 'wait 60, enqueue 3600, no max', doc: 'Deadline when the client sends none, and the cap on what it may ask for.' },
      { name: 'wait_cap_seconds', type: 'int', default: '0', doc: 'Above 0, a `wait` request still pending after this long gets 202 instead of holding on.' },
      { name: 'fetch_grace_seconds', type: 'int >= 0', default: '60', doc: 'How long a delivered result stays readable (0 = deleted on delivery).' },
      { name: 'routes', type: 'list of {model, tenant, queue, tier}', default: '[]', doc: 'First match wins; an empty model or tenant matches anything; an empty queue or tier inherits the default.' },
      { name: 'default_queue', type: 'string', default: 'request-sortedset', doc: 'Queue for requests no route names.' },
      { name: 'default_tier', type: 'string', default: '""', doc: 'Tier for requests no route names.' },
      { name: 'objectives', type: 'map tier -> {reserved, overflow}', default: '{}', doc: 'Objective stamped on passthrough requests, by tier and quota state.' },
      { name: 'objective_header', type: 'string', default: 'x-llm-d-inference-objective', doc: 'Header carrying the objective.' },
      { name: 'fairness_header', type: 'string', default: 'x-llm-d-inference-fairness-id', doc: 'Header carrying the fairness id.' },
      { name: 'quota.prefix', type: 'string', default: 'quota:', doc: 'Prefix of the Redis quota counters.' },
      { name: 'quota.attribute', type: 'string', default: 'userid', doc: 'Metadata key carrying the tenant.' },
      { name: 'quota.limits', type: 'map tenant -> int', default: '{}', doc: 'Reserved concurrency per tenant; absent or <= 0 = always reserved.' },
      { name: 'quota.window_seconds', type: 'int', default: '300', doc: 'Lifetime of a quota counter.' },
      { name: 'forward_headers', type: 'list of strings', default: '[x-llm-d-slo-ttft-ms, x-llm-d-slo-tpot-ms]', doc: 'Request headers copied into the queued envelope.' },
      { name: 'wakeup_mode', type: 'enum: auto, notify, poll', default: 'auto', doc: 'How a waiting request learns its result landed: keyspace notifications, polling, or notifications with polling as fallback.' },
      { name: 'ack_replicas', type: 'int >= 0', default: '1 with Sentinel or Cluster, else 0', doc: 'Replicas that must confirm an enqueue (`WAIT`) before the 202; the 202 then carries `x-ap-replicated: true` or `false`.' },
      { name: 'ack_timeout_ms', type: 'int', default: '1000', doc: 'The `WAIT` timeout; below the command timeout (`read_timeout`, 3 s).' },
      { name: 'queue_metrics', type: 'bool', default: 'true', doc: 'Export the routed queues\' depth and oldest age from the one replica holding the lease in Redis.' },
    ],
  },
];

/** Table cells may not hold a raw `|` or a line break. */
function cell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\r?\n/g, ' ');
}

function keyType(spec: KeySpec): string {
  let t: string;
  switch (spec.type) {
    case 'enum':
      t = `enum: ${spec.values!.join(', ')}`;
      break;
    case 'int':
      t = spec.min !== undefined ? `int >= ${spec.min}` : 'int';
      break;
    default:
      t = spec.type;
  }
  // Accepted so that upstream files load; the loader warns that it has no effect.
  return spec.inert ? `${t} (inert)` : t;
}

function keyDefault(spec: KeySpec): string {
  if (spec.default === undefined) return '—';
  return `\`${typeof spec.default === 'string' && spec.type === 'string' ? JSON.stringify(spec.default) : String(spec.default)}\``;
}

function sectionOf(key: string): string {
  const dot = key.indexOf('.');
  return dot < 0 ? '(top level)' : key.slice(0, dot);
}

/** The whole page, deterministic (same input, same bytes). */
export function renderConfigurationReference(keys: readonly KeySpec[] = KEYS, steps: readonly StepSpec[] = STEPS): string {
  const out: string[] = [];
  out.push(
    '# Configuration reference',
    '',
    `<!-- Generated from src/config/schema.ts and src/config/reference.ts. Do not edit by hand: ${REGENERATE_COMMAND} -->`,
    '',
    'epd-coordinator reads one YAML file, given by `--config` (default `config/coordinator.yaml`; the',
    'container image uses `/etc/epd-coordinator/coordinator.yaml`). `-v N` overrides `log_level`.',
    'The `pipeline:` section has the keys of the upstream llm-d coordinator and loads unchanged;',
    '`server:` describes the gRPC ext_proc listener instead of an HTTP one.',
    '',
    'A bad value stops start-up with a message naming the key and what was expected. Unknown keys are',
    'logged as warnings and ignored, and so are the *inert* keys: upstream HTTP-server settings that are',
    'accepted so that an upstream file loads, but have no effect here.',
    '',
    '## Environment overrides',
    '',
    'Every key below can be set from the environment: `COORDINATOR_` + the key upper-cased with `.`',
    'replaced by `_`. The environment wins over the file, also for keys the file does not mention.',
    'Values are read with the key\'s type (`true`/`false`/`1`/`0` for bools, Go-style durations such as',
    '`30s` or `1m30s`). Step params live in a list and cannot be set from the environment.',
    '',
    '## Differences from upstream\'s loader (viper)',
    '',
    '- Keys are case-insensitive, as upstream: `Server:` or `LOG_LEVEL:` (and a step\'s own param keys)',
    '  load as their lower-case spelling, with a warning naming each; two spellings of one key stop',
    '  start-up.',
    '- A quoted number or boolean in the file (`max_request_body_size: "16"`, `use_openai_format: "false"`)',
    '  loads as upstream reads it. Durations stay strict: upstream reads a bare `timeout: 60` as 60',
    '  nanoseconds; here it stops start-up asking for a duration such as `"60s"`.',
    '- Upstream applies an environment override only to keys its file (or a default) names, so',
    '  `COORDINATOR_GATEWAY_ADDRESS` is ignored when the file has no `gateway.address`. Here every key',
    '  can be overridden, whether the file names it or not.',
    '- A step param the step does not read is ignored upstream without a word; here each is logged',
    '  once at start-up as a warning naming the step, its position and the key.',
    '- `server.metrics_port` (upstream) and `server.metrics_addr` (ours) both work; see below.',
    '',
    '## Keys',
    '',
  );
  let section = '';
  for (const spec of keys) {
    const s = sectionOf(spec.key);
    if (s !== section) {
      if (section !== '') out.push('');
      section = s;
      out.push(`### ${s === '(top level)' ? 'Top level' : `\`${s}\``}`, '');
      out.push('| key | type | default | environment | meaning |', '| --- | --- | --- | --- | --- |');
    }
    out.push(`| \`${spec.key}\` | ${cell(keyType(spec))} | ${cell(keyDefault(spec))} | \`${envName(spec.key)}\` | ${cell(spec.doc)} |`);
  }
  out.push(
    '',
    '### `pipeline.steps`',
    '',
    'The ordered list of steps every request runs, each `{type, params}`. An empty list lets every',
    'request through unchanged. The pipeline-level `kv_connector`, `ec_connector`, `use_openai_format`',
    'and `dp_size` are handed to every step unless the step sets its own; a step ignores the ones it has',
    'no use for. `pipeline.use_openai_format: false` needs a `render` step.',
    '',
    '### `pipeline.forward_response_headers`',
    '',
    'A list of header names (upstream PR #2301). Each one a phase\'s answer carries (render, prefill, and',
    'encode, where the value most sub-requests agree on wins; a tie goes to the first seen) is sent on',
    'every later phase request and on the decode request; a later phase\'s value replaces an earlier one.',
    'A client\'s own values of listed headers are never sent. Absent = `[x-llm-d-disagg-revision]`;',
    '`[]` disables. Names are trimmed and lower-cased; an empty entry, a duplicate or a header the',
    'service owns (`content-type`, `content-length`, `host`, `epp-profile`, `x-request-id`, hop-by-hop',
    'headers) stops start-up, and so do more than 4 names (each may add a header to the decode request,',
    'and the header budget reserves room for them). Not settable from the environment.',
    '',
    'Independently of the list, `x-peer-topology` from the prefill answer (PR #2319) is set on the',
    'decode request, and a client\'s value is dropped. What Envoy does for us: the decode answer',
    'streams to the client through Envoy and never through the service, so its headers pass untouched;',
    'only the internal `x-peer-topology` and `epp-profile` are removed there, by Envoy\'s header',
    'mutation (`envoy/`) or the route\'s `ResponseHeaderModifier` (`config/k8s/`) (PR #2365). A worker',
    'answer the service relays itself (a conditional-decode hit) is stripped by the service.',
    '',
    '### `pipeline.request_limits`',
    '',
    'Bounds on the request fields that make a worker allocate (the keys `pipeline.request_limits.*` above,',
    'each with its default and why). They are checked after the body is parsed and before the first step,',
    'so before any side call and before the async broker queues a request: on the top level of chat,',
    'completions, Responses and generate requests, in generate\'s `sampling_params`, and on `/v1/messages`,',
    'the one passthrough API whose JSON carries such fields. A value must be a safe integer (a float, a',
    'negative, a numeric string or a number beyond 2^53 is refused) within its limit; `null` counts as',
    'absent. A value outside gets a 400 naming the field and the limit, e.g. `n must be an integer from 1',
    'to 128, got 9007199254740992`. Chat\'s `logprobs` is a boolean (`top_logprobs` is the count).',
    '',
    '### `pipeline.kv_connector_params`',
    '',
    'A map for the pipeline\'s KV connector, handed to every step that names neither its own',
    '`kv_connector` nor its own `kv_connector_params` (a step\'s own map replaces it). Only kv-sglang',
    'takes any: `{bootstrap_port: 1-65535}`; an empty map counts as absent; any other key, or params for',
    'another connector, stop start-up naming the key. Not settable from the environment.',
    '',
    '```yaml',
    'pipeline:',
    '  steps:',
    '    - type: render',
    '      params:',
    '        address: "http://vllm-render:8000"',
    '    - type: prefill',
    '    - type: decode',
    '```',
    '',
    '## Step params',
    '',
    'A step type the build does not register stops start-up with the list of the known ones.',
  );
  for (const step of steps) {
    out.push('', `### \`${step.type}\``, '', step.doc, '');
    out.push('| param | type | default | meaning |', '| --- | --- | --- | --- |');
    for (const p of step.params) {
      out.push(`| \`${p.name}\` | ${cell(p.type)} | ${p.default === undefined ? '—' : cell(p.default)} | ${cell(p.doc)} |`);
    }
  }
  out.push('');
  return out.join('\n');
}

if (require.main === module) {
  process.stdout.write(renderConfigurationReference());
}
