import { ConfigError } from '../config/errors';
import { parseDuration } from '../config/duration';
import type { StepParams } from './step';

/**
 * Readers for step params, checked once when the pipeline is built. Each throws a
 * {@link ConfigError} naming `<step>.<key>` and what was expected.
 */
export class ParamReader {
  constructor(
    private readonly step: string,
    private readonly params: StepParams,
  ) {}

  private key(k: string): string {
    return `${this.step}.params.${k}`;
  }

  has(k: string): boolean {
    return this.params[k] !== undefined && this.params[k] !== null;
  }

  /** An integer; integral floats such as `5.0` are accepted (YAML and JSON both produce them). */
  int(k: string, def: number, check?: { min?: number; max?: number }): number {
    const v = this.params[k];
    if (v === undefined || v === null) return def;
    if (typeof v !== 'number' || !Number.isInteger(v)) throw new ConfigError(this.key(k), 'an integer', v);
    if (check?.min !== undefined && v < check.min) throw new ConfigError(this.key(k), `an integer >= ${check.min}`, v);
    if (check?.max !== undefined && v > check.max) throw new ConfigError(this.key(k), `an integer <= ${check.max}`, v);
    return v;
  }

  /** A Go-style duration string (`30s`), returned in ms. */
  durationMs(k: string, defMs: number): number {
    const v = this.params[k];
    if (v === undefined || v === null) return defMs;
    const ms = typeof v === 'string' ? parseDuration(v) : null;
    if (ms === null || ms < 0) throw new ConfigError(this.key(k), 'a duration such as "30s"', v);
    return ms;
  }

  string(k: string, def: string): string {
    const v = this.params[k];
    if (v === undefined || v === null) return def;
    if (typeof v !== 'string') throw new ConfigError(this.key(k), 'a string', v);
    return v;
  }

  bool(k: string, def: boolean): boolean {
    const v = this.params[k];
    if (v === undefined || v === null) return def;
    if (typeof v !== 'boolean') throw new ConfigError(this.key(k), 'true or false', v);
    return v;
  }

  /** A list of strings; a single string counts as a one-element list. */
  stringList(k: string): string[] {
    const v = this.params[k];
    if (v === undefined || v === null) return [];
    if (typeof v === 'string') return [v];
    if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) throw new ConfigError(this.key(k), 'a list of strings', v);
    return v as string[];
  }

  oneOf<T extends string>(k: string, def: T, allowed: readonly T[], emptyMeans: T = def): T {
    const v = this.string(k, def);
    if (v === '') return emptyMeans;
    if (!(allowed as readonly string[]).includes(v)) throw new ConfigError(this.key(k), `one of ${allowed.join(', ')}`, v);
    return v as T;
  }
}
