/**
 * The two network seams of a media download: name resolution and dialling. The downloader resolves
 * a host itself, has every candidate address checked by the SSRF guard, and dials the checked IP
 * literal through a {@link Dialer}, so the address checked is always the address connected to
 * (no second lookup inside a socket library for a rebinding DNS server to answer differently).
 * Tests inject both to observe, or to stand in for, the network.
 */
import { promises as dns } from 'node:dns';
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';

/** The addresses a host name resolves to, in the order they should be tried. */
export type Resolver = (host: string, signal: AbortSignal) => Promise<string[]>;

export interface DialTarget {
  /** An IP literal the guard has passed (IPv6 without brackets). */
  readonly ip: string;
  readonly family: 4 | 6;
  readonly port: number;
  readonly tls: boolean;
  /** The TLS server name (SNI and certificate check): the URL's host name, unless that is an IP. */
  readonly servername?: string;
}

/** Opens a connected (for TLS: handshaken) socket to exactly `target.ip`. */
export type Dialer = (target: DialTarget, signal: AbortSignal) => Promise<Socket>;

function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error('aborted');
}

/** Races `work` with `signal`; the loser is ignored. */
function withSignal<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(abortError(signal));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abortError(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/** The system resolver (`/etc/hosts`, then DNS), as Go's and curl's default lookups behave. */
export const systemResolve: Resolver = async (host, signal) => {
  const answers = await withSignal(dns.lookup(host, { all: true, verbatim: true }), signal);
  return answers.map((a) => a.address);
};

/** A plain TCP or TLS connection to the IP literal itself; never a name lookup. */
export const tcpDial: Dialer = (target, signal) => {
  if (signal.aborted) return Promise.reject(abortError(signal));
  return new Promise<Socket>((resolve, reject) => {
    const socket: Socket = target.tls
      ? tlsConnect({ host: target.ip, port: target.port, servername: target.servername, ALPNProtocols: ['http/1.1'] })
      : netConnect({ host: target.ip, port: target.port, family: target.family });
    const cleanup = (): void => {
      signal.removeEventListener('abort', onAbort);
      socket.off('error', onError);
    };
    const onAbort = (): void => {
      cleanup();
      socket.destroy();
      reject(abortError(signal));
    };
    const onError = (err: Error): void => {
      cleanup();
      socket.destroy();
      reject(err);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    socket.once('error', onError);
    socket.once(target.tls ? 'secureConnect' : 'connect', () => {
      cleanup();
      resolve(socket);
    });
  });
};
