/** A grpc.health.v1 client, as kubelet probes and Envoy's gRPC health checker use it. */
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';

export type Status = 'SERVING' | 'NOT_SERVING' | 'UNKNOWN' | 'SERVICE_UNKNOWN';

const HealthClient = grpc.makeClientConstructor(healthService as unknown as grpc.ServiceDefinition, 'grpc.health.v1.Health');

interface RawHealthClient extends grpc.Client {
  check(req: { service: string }, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: { status: Status }) => void): void;
  watch(req: { service: string }): grpc.ClientReadableStream<{ status: Status }>;
}

export class HealthProbe {
  private readonly client: RawHealthClient;

  constructor(target: string, credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure()) {
    // The test certificates name `localhost` (and 127.0.0.1); SNI must be a host name.
    this.client = new HealthClient(target, credentials, { 'grpc.ssl_target_name_override': 'localhost' }) as unknown as RawHealthClient;
  }

  /** The status of `service`; rejects with the gRPC error (e.g. UNAVAILABLE when the handshake fails). */
  check(service = '', timeoutMs = 3000): Promise<Status> {
    return new Promise((resolve, reject) => {
      this.client.check({ service }, { deadline: Date.now() + timeoutMs }, (err, res) => (err ? reject(err) : resolve(res!.status)));
    });
  }

  /** Statuses pushed by Watch, as they arrive. */
  watch(service = ''): { statuses: Status[]; cancel(): void } {
    const call = this.client.watch({ service });
    const statuses: Status[] = [];
    call.on('data', (m: { status: Status }) => statuses.push(m.status));
    call.on('error', () => undefined);
    return { statuses, cancel: () => call.cancel() };
  }

  close(): void {
    this.client.close();
  }
}
