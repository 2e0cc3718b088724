/**
 * `.dockerignore` matching as the Docker builder does it: patterns are anchored at the context
 * root, `*` and `?` stay within one path segment, `**` spans any number of them, a pattern that
 * matches a directory excludes everything below it, `!` re-includes, and the last match wins.
 */

interface Rule {
  readonly negate: boolean;
  readonly re: RegExp;
}

function toRegExp(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '*') {
      if (pattern[i + 1] === '*') {
        // `**/` matches zero or more whole segments; a trailing `**` matches everything.
        if (pattern[i + 2] === '/') {
          re += '(?:.*/)?';
          i += 2;
        } else {
          re += '.*';
          i += 1;
        }
      } else {
        re += '[^/]*';
      }
    } else if (c === '?') {
      re += '[^/]';
    } else {
      re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
  }
  return new RegExp(`^${re}$`);
}

export class DockerIgnore {
  private readonly rules: Rule[];

  constructor(text: string) {
    this.rules = text
      .split(/\r?\n/)
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#'))
      .map((l) => {
        const negate = l.startsWith('!');
        const body = (negate ? l.slice(1) : l).trim().replace(/^\/+/, '').replace(/\/+$/, '');
        return { negate, re: toRegExp(body) };
      });
  }

  /** `rel` is a path relative to the context root, with `/` separators. */
  excludes(rel: string): boolean {
    const parts = rel.split('/').filter((p) => p !== '' && p !== '.');
    let excluded = false;
    for (const rule of this.rules) {
      // The path itself or any directory above it.
      for (let n = 1; n <= parts.length; n++) {
        if (rule.re.test(parts.slice(0, n).join('/'))) {
          excluded = !rule.negate;
          break;
        }
      }
    }
    return excluded;
  }
}
