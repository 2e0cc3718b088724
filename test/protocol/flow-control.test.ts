/**
 * The ext_proc server lets Envoy send 4 MiB per stream and 16 MiB per connection before waiting
 * for a WINDOW_UPDATE (Node's default is 64 KiB for both, which made large bodies crawl). This is
 * what an HTTP/2 peer such as Envoy sees, checked with a raw HTTP/2 client.
 */
import * as http2 from 'node:http2';
import { CONNECTION_WINDOW_BYTES, STREAM_WINDOW_BYTES } from '../../src/extproc/flow-control';
import { startHarness, type Harness } from './harness';

describe('HTTP/2 receive windows of the ext_proc server', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('full_duplex');
  });
  afterAll(async () => {
    await h.close();
  });

  it(`advertise ${STREAM_WINDOW_BYTES} bytes per stream and open the connection window to ${CONNECTION_WINDOW_BYTES}`, async () => {
    const session = http2.connect(`http://127.0.0.1:${h.server.port}`);
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`initialWindowSize stayed ${session.remoteSettings.initialWindowSize}`)), 2000);
        session.on('remoteSettings', () => {
          if (session.remoteSettings.initialWindowSize !== STREAM_WINDOW_BYTES) return;
          clearTimeout(timer);
          resolve();
        });
        session.once('error', reject);
      });
      // The connection-level WINDOW_UPDATE travels with the settings; give it a round trip.
      await new Promise<void>((resolve) => session.ping(() => resolve()));
      expect(session.state.remoteWindowSize).toBe(CONNECTION_WINDOW_BYTES);
    } finally {
      session.close();
    }
  });
});
