import { ConfigError } from '../../../src/config/errors';
import {
  buildKvConnector,
  DEFAULT_SGLANG_BOOTSTRAP_PORT,
  nixlKv,
  parseSglangBootstrapPort,
  sglangKv,
  sharedStorageKv,
} from '../../../src/connectors/kv';
import { makeCtx } from '../steps/fake-upstream';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('buildKvConnector', () => {
  it('builds each named connector', () => {
    expect(buildKvConnector('kv-nixl', 'prefill')).toBe(nixlKv);
    expect(buildKvConnector('kv-shared-storage', 'prefill')).toBe(sharedStorageKv);
    expect(buildKvConnector('kv-sglang', 'decode')).toBe(sglangKv);
  });

  it('defaults "" to kv-shared-storage', () => {
    expect(buildKvConnector('', 'prefill').name).toBe('kv-shared-storage');
  });

  it('rejects an unknown name with the upstream text, as a ConfigError', () => {
    let caught: unknown;
    try {
      buildKvConnector('kv-bogus', 'prefill');
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as Error).message).toBe('prefill: unknown kv_connector: "kv-bogus"');
    expect((caught as ConfigError).key).toBe('prefill.params.kv_connector');
    expect(() => buildKvConnector('KV-NIXL', 'decode')).toThrow('decode: unknown kv_connector: "KV-NIXL"');
  });
});

describe('kv-shared-storage', () => {
  it('sends only the direction flags and ignores the prefill answer', () => {
    const ctx = makeCtx({ kvTransferParams: { block_id: 7, peer_host: 'h', ignored: true } });
    expect(sharedStorageKv.preparePrefill(ctx)).toEqual({ do_remote_decode: true, do_remote_prefill: false });
    expect(sharedStorageKv.prepareDecode(ctx)).toEqual({ do_remote_decode: false, do_remote_prefill: true });
  });
});

describe('kv-nixl', () => {
  it('names the remote fields as explicit nulls on prefill', () => {
    const p = nixlKv.preparePrefill(makeCtx());
    expect(JSON.stringify(p)).toBe(
      '{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}',
    );
  });

  it('copies every prefill-answer field to decode and flips the flags', () => {
    const fromPrefill = {
      do_remote_decode: true,
      do_remote_prefill: false,
      remote_engine_id: 'e95b',
      remote_block_ids: [[1]],
      remote_request_id: 'generate-tokens-1',
      remote_host: '10.130.5.242',
      remote_port: 5557,
      tp_size: 2,
      block_id: 'b',
      peer_host: 'p',
      peer_port: 1,
    };
    const ctx = makeCtx({ kvTransferParams: fromPrefill });
    const d = nixlKv.prepareDecode(ctx);
    expect(d).toEqual({ ...fromPrefill, do_remote_decode: false, do_remote_prefill: true });
    // A copy: the context's prefill answer keeps its own flags.
    expect(fromPrefill.do_remote_decode).toBe(true);
    expect(d).not.toBe(fromPrefill);
  });

  it('sends just the flags when prefill returned nothing or did not run', () => {
    expect(nixlKv.prepareDecode(makeCtx({ kvTransferParams: null }))).toEqual({ do_remote_decode: false, do_remote_prefill: true });
    expect(nixlKv.prepareDecode(makeCtx())).toEqual({ do_remote_decode: false, do_remote_prefill: true });
  });

  it('returns a fresh prefill object per call', () => {
    const ctx = makeCtx();
    const a = nixlKv.preparePrefill(ctx);
    a['remote_host'] = 'changed';
    expect(nixlKv.preparePrefill(ctx)['remote_host']).toBeNull();
  });
});

describe('parseSglangBootstrapPort', () => {
  it.each([
    ['', 8998, false],
    ['9100', 9100, false],
    ['65535', 65535, false],
    ['1', 1, false],
    ['abc', 8998, true],
    ['9100x', 8998, true],
    ['0', 8998, true],
    ['-1', 8998, true],
    ['65536', 8998, true],
    [' 9100', 8998, true],
    ['91.5', 8998, true],
  ])('%j -> %d (rejected: %s)', (raw, port, rejected) => {
    expect(parseSglangBootstrapPort(raw)).toEqual({ port, rejected });
  });
});

describe('kv-sglang', () => {
  const saved = process.env['SGLANG_BOOTSTRAP_PORT'];
  afterEach(() => {
    if (saved === undefined) delete process.env['SGLANG_BOOTSTRAP_PORT'];
    else process.env['SGLANG_BOOTSTRAP_PORT'] = saved;
  });

  /** A fresh copy of the module, so its process-wide port cache starts empty. */
  function freshSglang(): typeof import('../../../src/connectors/kv/sglang') {
    let mod!: typeof import('../../../src/connectors/kv/sglang');
    jest.isolateModules(() => {
      // isolateModules is synchronous, so the fresh copy must be a synchronous require.
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      mod = require('../../../src/connectors/kv/sglang');
    });
    return mod;
  }

  it('sends flags, the env port and a fresh UUIDv4 room per request; decode echoes the prefill answer', () => {
    process.env['SGLANG_BOOTSTRAP_PORT'] = '9100';
    const { sglangKv: kv } = freshSglang();
    const ctx = makeCtx();
    const p1 = kv.preparePrefill(ctx);
    const p2 = kv.preparePrefill(ctx);
    expect(p1).toEqual({ do_remote_decode: true, do_remote_prefill: false, bootstrap_port: 9100, bootstrap_room: expect.any(String) });
    expect(p1['bootstrap_room']).toMatch(UUID_V4);
    expect(p2['bootstrap_room']).not.toBe(p1['bootstrap_room']);
    expect(p1).not.toHaveProperty('bootstrap_host');

    const answer = { bootstrap_host: '10.0.0.1', bootstrap_port: 9100, bootstrap_room: 12345, do_remote_decode: true };
    expect(kv.prepareDecode(makeCtx({ kvTransferParams: answer }))).toEqual({
      bootstrap_host: '10.0.0.1',
      bootstrap_port: 9100,
      bootstrap_room: 12345,
      do_remote_decode: false,
      do_remote_prefill: true,
    });
  });

  it('reads the env once, on first use, and logs one error for an invalid value', () => {
    process.env['SGLANG_BOOTSTRAP_PORT'] = 'nope';
    const { sglangKv: kv } = freshSglang();
    const ctx = makeCtx();
    const errors: unknown[] = [];
    ctx.log.error = ((...args: unknown[]) => errors.push(args)) as typeof ctx.log.error;
    expect(kv.preparePrefill(ctx)['bootstrap_port']).toBe(DEFAULT_SGLANG_BOOTSTRAP_PORT);
    process.env['SGLANG_BOOTSTRAP_PORT'] = '9200';
    expect(kv.preparePrefill(ctx)['bootstrap_port']).toBe(DEFAULT_SGLANG_BOOTSTRAP_PORT);
    expect(errors).toHaveLength(1);
  });

  it('uses 8998 when the env is unset', () => {
    delete process.env['SGLANG_BOOTSTRAP_PORT'];
    expect(freshSglang().sglangKv.preparePrefill(makeCtx())['bootstrap_port']).toBe(8998);
  });
});
