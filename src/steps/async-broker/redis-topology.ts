/**
 * The multi-host `redis_url` forms, for a Sentinel-managed master and for a Redis Cluster. go-redis
 * has no URL for either (only `FailoverOptions` / `ClusterOptions` in code), so the shape follows
 * the most common convention (Lettuce, Camellia, Harbor): the hosts comma-separated in the
 * authority, the master name as the first path segment.
 *
 *   redis-sentinel://[user:pass@]host:port[,host:port...]/<master-name>[/<db>][?options]
 *   redis-cluster://[user:pass@]host:port[,host:port...][?options]
 *
 * `rediss-sentinel://` and `rediss-cluster://` use TLS. The credentials are the data nodes'; a
 * Sentinel's own are `sentinel_username` / `sentinel_password` options. Sentinels default to port
 * 26379, cluster nodes to 6379. A Cluster has only DB 0, so a DB there is refused.
 */
import { applyOptions, dbIndex, parseRedisUrl, RedisUrlError, type HostPort, type MutableTarget, type RedisTarget } from './redis-url';

const MULTI_HOST = /^(rediss?)-(sentinel|cluster):\/\/(?:([^@/?#]*)@)?([^/?#]*)(\/[^?#]*)?(?:\?([^#]*))?$/;
/** Enough for any real deployment; bounds the work a hostile config can ask for. */
const MAX_HOSTS = 64;

/** `redis_url` in any accepted form. */
export function parseRedisTarget(text: string): RedisTarget {
  return /^rediss?-(sentinel|cluster):/i.test(text) ? parseMultiHostUrl(text) : parseRedisUrl(text);
}

function hostPort(raw: string, defaultPort: number): HostPort {
  let u: URL;
  try {
    u = new URL(`redis://${raw}`);
  } catch {
    throw new RedisUrlError(`invalid host: ${JSON.stringify(raw)}`);
  }
  if (u.hostname === '' || u.pathname !== '' || u.username !== '') throw new RedisUrlError(`invalid host: ${JSON.stringify(raw)}`);
  return { host: u.hostname.replace(/^\[(.*)\]$/, '$1'), port: u.port === '' ? defaultPort : Number(u.port) };
}

function decode(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new RedisUrlError('invalid percent-encoding in the credentials');
  }
}

export function parseMultiHostUrl(text: string): RedisTarget {
  const m = MULTI_HOST.exec(text);
  if (!m) throw new RedisUrlError('not a redis-sentinel:// or redis-cluster:// URL');
  const [, scheme, kind, userinfo, hostList, path, query] = m;
  const sentinel = kind === 'sentinel';
  const hosts = (hostList ?? '').split(',').filter((h) => h !== '');
  if (hosts.length === 0) throw new RedisUrlError(`no ${sentinel ? 'sentinel' : 'cluster node'} address`);
  if (hosts.length > MAX_HOSTS) throw new RedisUrlError(`more than ${MAX_HOSTS} addresses`);
  const nodes = hosts.map((h) => hostPort(h, sentinel ? 26379 : 6379));

  const segments = (path ?? '').split('/').filter((s) => s !== '');
  let masterName = '';
  let db = 0;
  if (sentinel) {
    if (segments.length < 1 || segments.length > 2) throw new RedisUrlError('expected /<master-name>[/<db>] after the sentinel addresses');
    masterName = decode(segments[0]!);
    if (segments[1] !== undefined) db = dbIndex(segments[1]);
  } else if (segments.length > 0) {
    throw new RedisUrlError('a Redis Cluster has no database path (it has DB 0 only)');
  }

  const out: MutableTarget = {
    topology: { kind: 'single' },
    host: nodes[0]!.host,
    port: nodes[0]!.port,
    db,
    tls: scheme === 'rediss',
    skipVerify: false,
  };
  if (userinfo) {
    const colon = userinfo.indexOf(':');
    const user = colon < 0 ? userinfo : userinfo.slice(0, colon);
    if (user) out.username = decode(user);
    if (colon >= 0 && colon < userinfo.length - 1) out.password = decode(userinfo.slice(colon + 1));
  }
  let sentinelUsername: string | undefined;
  let sentinelPassword: string | undefined;
  applyOptions(out, new URLSearchParams(query ?? ''), (name, value) => {
    if (sentinel && name === 'sentinel_username') sentinelUsername = value;
    else if (sentinel && name === 'sentinel_password') sentinelPassword = value;
    else return false;
    return true;
  });
  if (!sentinel && out.db !== 0) throw new RedisUrlError('a Redis Cluster has DB 0 only');
  out.topology = sentinel
    ? {
        kind: 'sentinel',
        sentinels: nodes,
        masterName,
        ...(sentinelUsername !== undefined ? { sentinelUsername } : {}),
        ...(sentinelPassword !== undefined ? { sentinelPassword } : {}),
      }
    : { kind: 'cluster', nodes };
  return out;
}
