/**
 * `x-data-parallel-rank` for kv-nixl (reference §4.4, upstream PR #2480) and the
 * `kv_connector_params` / concurrent-connector rules (§12.4, §12.10). Expected ranks were computed
 * independently with Python's hashlib.blake2s.
 */
import { ConfigError } from '../../../src/config/errors';
import {
  buildConcurrentKvConnector,
  buildKvConnector,
  decodeDataParallelRank,
  hashDataParallelRank,
  nixlKv,
  randomBootstrapRoom,
  sglangKv,
} from '../../../src/connectors/kv';
import { makeCtx } from '../steps/fake-upstream';

describe('hashDataParallelRank', () => {
  it.each([
    ['req-1', [1, 2, 1, 5, 5]],
    ['abc', [0, 1, 2, 2, 2]],
    ['0f3c6a4e-6a1b-4c1e-9d2a-1b2c3d4e5f60', [1, 1, 1, 1, 9]],
  ])('%s: first 8 bytes of BLAKE2s-256, big-endian, mod dp_size', (id, ranks) => {
    expect([2, 3, 4, 8, 16].map((n) => hashDataParallelRank(id, n))).toEqual(ranks);
    expect(hashDataParallelRank(id, 1)).toBe(0);
  });
});

describe('decodeDataParallelRank', () => {
  it('prefers a valid remote_dp_rank from the prefill answer', () => {
    expect(decodeDataParallelRank({ remote_dp_rank: 3 }, 'req-1', 4)).toBe(3);
    expect(decodeDataParallelRank({ remote_dp_rank: 0 }, 'req-1', 4)).toBe(0);
  });
  it.each([[{ remote_dp_rank: 4 }], [{ remote_dp_rank: -1 }], [{ remote_dp_rank: 1.5 }], [{ remote_dp_rank: '2' }], [{}], [null]])(
    'falls back to the hash for %j',
    (answer) => {
      expect(decodeDataParallelRank(answer as Record<string, unknown> | null, 'req-1', 4)).toBe(1);
    },
  );
});

describe('kv-nixl with dp_size', () => {
  it('adds the rank header to prefill and decode when dp_size > 1; bodies unchanged', () => {
    const kv = buildKvConnector('kv-nixl', 'prefill', { dpSize: 8 });
    const ctx = makeCtx({ requestId: 'req-1', kvTransferParams: { remote_host: 'h' } });
    expect(kv.preparePrefill(ctx)).toEqual(nixlKv.preparePrefill(ctx));
    expect(kv.prepareDecode(ctx)).toEqual(nixlKv.prepareDecode(ctx));
    expect(kv.prefillHeaders!(ctx)).toEqual({ 'x-data-parallel-rank': '5' });
    expect(kv.decodeHeaders!(ctx)).toEqual({ 'x-data-parallel-rank': '5' });
    ctx.kvTransferParams = { remote_dp_rank: 2 };
    expect(kv.decodeHeaders!(ctx)).toEqual({ 'x-data-parallel-rank': '2' });
  });

  it('is plain kv-nixl for dp_size 1 (no header at all)', () => {
    expect(buildKvConnector('kv-nixl', 'prefill', { dpSize: 1 })).toBe(nixlKv);
    expect(buildKvConnector('kv-nixl', 'prefill')).toBe(nixlKv);
  });

  it('kv-sglang and kv-shared-storage ignore dp_size', () => {
    expect(buildKvConnector('kv-sglang', 'prefill', { dpSize: 4 })).toBe(sglangKv);
    expect(buildKvConnector('', 'prefill', { dpSize: 4 }).prefillHeaders).toBeUndefined();
  });

  it.each([0, -1, 1.5])('rejects dp_size %p', (dpSize) => {
    expect(() => buildKvConnector('kv-nixl', 'prefill', { dpSize })).toThrow(ConfigError);
  });
});

describe('kv_connector_params', () => {
  it('sets the kv-sglang bootstrap port, over the environment', () => {
    const kv = buildKvConnector('kv-sglang', 'prefill', { connectorParams: { bootstrap_port: 9300 } });
    expect(kv.preparePrefill(makeCtx())['bootstrap_port']).toBe(9300);
    const concurrent = buildConcurrentKvConnector('kv-sglang', 'prefill-decode', { connectorParams: { bootstrap_port: 9301 } });
    expect(concurrent.transferFields('10.0.3.7', makeCtx().log)['bootstrap_port']).toBe(9301);
  });

  it('an empty map counts as absent', () => {
    expect(buildKvConnector('kv-sglang', 'prefill', { connectorParams: {} })).toBe(sglangKv);
    expect(buildKvConnector('kv-nixl', 'prefill', { connectorParams: {} })).toBe(nixlKv);
  });

  it.each([
    [{ bootstrap_port: 0 }, 'kv_connector_params.bootstrap_port'],
    [{ bootstrap_port: -1 }, 'kv_connector_params.bootstrap_port'],
    [{ bootstrap_port: 65536 }, 'kv_connector_params.bootstrap_port'],
    [{ bootstrap_port: '9100' }, 'kv_connector_params.bootstrap_port'],
    [{ bootstrap_prot: 9100 }, 'bootstrap_prot'],
    ['bootstrap_port=9100', 'kv_connector_params'],
    [[9100], 'kv_connector_params'],
  ])('kv-sglang rejects %j at start-up, naming %s', (connectorParams, named) => {
    expect(() => buildKvConnector('kv-sglang', 'prefill', { connectorParams })).toThrow(named);
  });

  it('a connector that takes none rejects them', () => {
    expect(() => buildKvConnector('kv-nixl', 'prefill', { connectorParams: { bootstrap_port: 9100 } })).toThrow(/kv_connector_params/);
    expect(() => buildKvConnector('', 'prefill', { connectorParams: { bootstrap_port: 9100 } })).toThrow(/kv_connector_params/);
  });
});

describe('concurrent kv-sglang (prefill-decode)', () => {
  it('writes bootstrap_host, the port and an integer room; drops DP steering', () => {
    delete process.env['SGLANG_BOOTSTRAP_PORT'];
    const kv = buildConcurrentKvConnector('kv-sglang', 'prefill-decode');
    const a = kv.transferFields('10.0.3.7', makeCtx().log);
    const b = kv.transferFields('10.0.3.7', makeCtx().log);
    expect(a).toEqual({ bootstrap_host: '10.0.3.7', bootstrap_port: expect.any(Number), bootstrap_room: expect.any(Number) });
    expect(Number.isSafeInteger(a['bootstrap_room'])).toBe(true);
    expect(a['bootstrap_room']).not.toBe(b['bootstrap_room']);
    expect(kv.removedBodyFields).toEqual(['routed_dp_rank', 'data_parallel_rank', 'disagg_prefill_dp_rank']);
    expect(kv.conflictingHeaders).toEqual(['x-data-parallel-rank']);
  });

  it('rooms are exact JSON integers in [0, 2^53)', () => {
    for (let i = 0; i < 200; i++) {
      const r = randomBootstrapRoom();
      expect(Number.isSafeInteger(r) && r >= 0).toBe(true);
      expect(JSON.parse(JSON.stringify({ r })).r).toBe(r);
    }
  });

  it.each([['kv-nixl'], ['kv-shared-storage'], ['']])("refuses the serial connector %j with upstream's message", (name) => {
    expect(() => buildConcurrentKvConnector(name, 'prefill-decode')).toThrow(
      /prefill-decode: kv_connector "kv-(nixl|shared-storage)" sends prefill and decode one after the other; use the "prefill" and "decode" steps/,
    );
  });

  it('refuses an unknown connector as unknown', () => {
    expect(() => buildConcurrentKvConnector('kv-bogus', 'prefill-decode')).toThrow('prefill-decode: unknown kv_connector: "kv-bogus"');
  });
});
