/**
 * The one way our stacks and tests run Redis: loopback only, no persistence (nothing outlives a
 * run), and keyspace notifications, which wake the async broker's waiting requests.
 */
export function redisServerArgs(port: number, dir: string, notifyKeyspaceEvents = 'Kl'): string[] {
  return [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--dir',
    dir,
    '--notify-keyspace-events',
    notifyKeyspaceEvents,
  ];
}
