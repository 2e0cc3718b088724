/** Fault rules: validated once (they may come from the control API), then matched per request. */

import { SimulatorConfigError } from './errors';
import { isObject } from './request-fields';
import type { FaultRule } from './types';

const MAX_RULES = 100;
const MAX_DELAY_MS = 10 * 60 * 1000;
const MAX_FAULT_BODY_CHARS = 1024 * 1024;
const MAX_TIMES = 1_000_000;
const MAX_MATCH_CHARS = 2048;
const MAX_FAULT_HEADERS = 16;
/** An HTTP token name and a value without control characters. */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9a-zA-Z]{1,256}$/;
const HEADER_VALUE = /^[\x20-\x7e\t]{0,4096}$/;

const RULE_KEYS = new Set(['match', 'status', 'body', 'headers', 'delayMs', 'hang', 'reset', 'resetMidBody', 'chunkDelayMs', 'times']);
const MATCH_KEYS = new Set(['path', 'profile']);

function fail(index: number, message: string): never {
  throw new SimulatorConfigError(`fault rule ${index}: ${message}`);
}

function intIn(value: unknown, min: number, max: number, index: number, key: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    fail(index, `${key} must be an integer in [${min}, ${max}]`);
  }
  return value;
}

function boolOf(value: unknown, index: number, key: string): boolean | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'boolean') fail(index, `${key} must be a boolean`);
  return value;
}

function matchString(value: unknown, index: number, key: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_MATCH_CHARS) {
    fail(index, `match.${key} must be a non-empty string of at most ${MAX_MATCH_CHARS} characters`);
  }
  return value;
}

function parseRule(raw: unknown, index: number): FaultRule {
  if (!isObject(raw)) fail(index, 'must be an object');
  for (const key of Object.keys(raw)) if (!RULE_KEYS.has(key)) fail(index, `unknown key "${key}"`);
  const rule: FaultRule = {};
  if (raw.match !== undefined) {
    if (!isObject(raw.match)) fail(index, 'match must be an object');
    for (const key of Object.keys(raw.match)) if (!MATCH_KEYS.has(key)) fail(index, `unknown key "match.${key}"`);
    const path = matchString(raw.match.path, index, 'path');
    const profile = matchString(raw.match.profile, index, 'profile');
    rule.match = {};
    if (path !== undefined) rule.match.path = path;
    if (profile !== undefined) rule.match.profile = profile;
  }
  const status = intIn(raw.status, 200, 599, index, 'status');
  if (status !== undefined) rule.status = status;
  if (raw.body !== undefined) {
    if (typeof raw.body !== 'string' || raw.body.length > MAX_FAULT_BODY_CHARS) {
      fail(index, `body must be a string of at most ${MAX_FAULT_BODY_CHARS} characters`);
    }
    rule.body = raw.body;
  }
  if (raw.headers !== undefined) {
    if (!isObject(raw.headers)) fail(index, 'headers must be an object');
    const entries = Object.entries(raw.headers);
    if (entries.length > MAX_FAULT_HEADERS) fail(index, `at most ${MAX_FAULT_HEADERS} headers`);
    const headers: Record<string, string> = {};
    for (const [name, value] of entries) {
      if (!HEADER_NAME.test(name) || typeof value !== 'string' || !HEADER_VALUE.test(value))
        fail(index, `header "${name}" must be a token name with a printable string value`);
      headers[name.toLowerCase()] = value;
    }
    rule.headers = headers;
  }
  const delayMs = intIn(raw.delayMs, 0, MAX_DELAY_MS, index, 'delayMs');
  if (delayMs !== undefined) rule.delayMs = delayMs;
  const chunkDelayMs = intIn(raw.chunkDelayMs, 0, MAX_DELAY_MS, index, 'chunkDelayMs');
  if (chunkDelayMs !== undefined) rule.chunkDelayMs = chunkDelayMs;
  const times = intIn(raw.times, 1, MAX_TIMES, index, 'times');
  if (times !== undefined) rule.times = times;
  for (const key of ['hang', 'reset', 'resetMidBody'] as const) {
    const flag = boolOf(raw[key], index, key);
    if (flag !== undefined) rule[key] = flag;
  }
  return rule;
}

/** Validates rules from code or from JSON. Throws SimulatorConfigError naming the rule and key. */
export function parseFaultRules(raw: unknown): FaultRule[] {
  if (!Array.isArray(raw)) throw new SimulatorConfigError('fault rules must be an array');
  if (raw.length > MAX_RULES) throw new SimulatorConfigError(`at most ${MAX_RULES} fault rules`);
  return raw.map(parseRule);
}

interface ActiveRule {
  readonly rule: FaultRule;
  remaining: number | undefined;
}

export class FaultTable {
  private active: ActiveRule[] = [];

  /** Replaces all rules; throws SimulatorConfigError (leaving the old rules) when one is invalid. */
  set(rules: unknown): void {
    this.active = parseFaultRules(rules).map((rule) => ({ rule, remaining: rule.times }));
  }

  list(): FaultRule[] {
    return this.active.map(({ rule, remaining }) => (remaining === undefined ? { ...rule } : { ...rule, times: remaining }));
  }

  /** The first rule matching this request, consuming one of its `times`. */
  take(path: string, profile: string | undefined): FaultRule | undefined {
    const index = this.active.findIndex(({ rule }) => {
      const match = rule.match;
      if (match?.path !== undefined && match.path !== path) return false;
      if (match?.profile !== undefined && match.profile.toLowerCase() !== profile?.trim().toLowerCase()) {
        return false;
      }
      return true;
    });
    if (index < 0) return undefined;
    const entry = this.active[index];
    if (entry.remaining !== undefined) {
      entry.remaining -= 1;
      if (entry.remaining <= 0) this.active.splice(index, 1);
    }
    return entry.rule;
  }
}
