import { ConfigError } from '../../../src/config/errors';
import { buildEcConnector, nixlEc, sharedStorageEc } from '../../../src/connectors/ec';
import { makeCtx } from '../steps/fake-upstream';

describe('buildEcConnector', () => {
  it('builds both named connectors and defaults "" to ec-shared-storage', () => {
    expect(buildEcConnector('ec-nixl', 'encode')).toBe(nixlEc);
    expect(buildEcConnector('ec-shared-storage', 'encode')).toBe(sharedStorageEc);
    expect(buildEcConnector('', 'prefill').name).toBe('ec-shared-storage');
  });

  it('rejects an unknown name with the upstream text', () => {
    expect(() => buildEcConnector('ec-bogus', 'encode')).toThrow(ConfigError);
    expect(() => buildEcConnector('ec-bogus', 'encode')).toThrow(/^encode: unknown ec_connector: "ec-bogus"$/);
  });
});

describe('ec-shared-storage', () => {
  it('records nothing and emits nothing', () => {
    const ctx = makeCtx();
    sharedStorageEc.mergeEncodeResponse(ctx, { 'hash-a': { peer_host: 'h' } });
    expect(ctx.ecTransferParams).toBeNull();
    expect(sharedStorageEc.preparePrefill(ctx)).toEqual({});
  });
});

describe('ec-nixl', () => {
  const descA = { peer_host: '10.0.0.1', peer_port: 5501, size_bytes: 2359296, nixl_agent_metadata_b64: 'AAA=' };
  const descB = { peer_host: '10.0.0.2', peer_port: 5502, size_bytes: 1024, nixl_agent_metadata_b64: 'BBB=' };

  it('is empty before any merge, then flattens merges into one map keyed by hash', () => {
    const ctx = makeCtx();
    expect(nixlEc.preparePrefill(ctx)).toEqual({});
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': descA });
    nixlEc.mergeEncodeResponse(ctx, { 'hash-b': descB });
    expect(ctx.ecTransferParams).toEqual([{ 'hash-a': descA }, { 'hash-b': descB }]);
    expect(nixlEc.preparePrefill(ctx)).toEqual({ 'hash-a': descA, 'hash-b': descB });
  });

  it('de-duplicates identical descriptors for one hash', () => {
    const ctx = makeCtx();
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': descA });
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': { ...descA } });
    expect(nixlEc.preparePrefill(ctx)).toEqual({ 'hash-a': descA });
  });

  it('rejects conflicting descriptors for one hash', () => {
    const ctx = makeCtx();
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': descA });
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': descB });
    expect(() => nixlEc.preparePrefill(ctx)).toThrow(
      'ec_transfer_params: conflicting descriptors for mm_hash "hash-a" across encoder responses',
    );
  });

  it('keeps every key of a multi-key response', () => {
    const ctx = makeCtx();
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': descA, 'hash-b': descB });
    expect(Object.keys(nixlEc.preparePrefill(ctx)).sort()).toEqual(['hash-a', 'hash-b']);
  });

  it('records a null descriptor but drops it from the prefill params', () => {
    const ctx = makeCtx();
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': descA, 'hash-x': null });
    expect(ctx.ecTransferParams).toHaveLength(1);
    expect(nixlEc.preparePrefill(ctx)).toEqual({ 'hash-a': descA });
  });

  it('passes a non-object descriptor through unchanged', () => {
    const ctx = makeCtx();
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': 'opaque-token', 'hash-b': 42 });
    expect(nixlEc.preparePrefill(ctx)).toEqual({ 'hash-a': 'opaque-token', 'hash-b': 42 });
  });

  it('returns copies: editing the output does not touch the context', () => {
    const ctx = makeCtx();
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': { ...descA } });
    const out = nixlEc.preparePrefill(ctx);
    (out['hash-a'] as Record<string, unknown>)['peer_host'] = 'evil';
    out['hash-z'] = {};
    expect(ctx.ecTransferParams![0]!['hash-a']).toEqual(descA);
    expect(nixlEc.preparePrefill(ctx)).toEqual({ 'hash-a': descA });
  });

  it('is idempotent and returns a fresh map each call', () => {
    const ctx = makeCtx();
    nixlEc.mergeEncodeResponse(ctx, { 'hash-a': descA });
    const a = nixlEc.preparePrefill(ctx);
    const b = nixlEc.preparePrefill(ctx);
    expect(a).toEqual(b);
    expect(a).not.toBe(b);
  });

  it('ignores null and empty encode answers', () => {
    const ctx = makeCtx();
    nixlEc.mergeEncodeResponse(ctx, null);
    nixlEc.mergeEncodeResponse(ctx, {});
    expect(ctx.ecTransferParams).toBeNull();
    expect(nixlEc.preparePrefill(ctx)).toEqual({});
  });
});
