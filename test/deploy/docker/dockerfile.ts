/**
 * A reader for the subset of Dockerfile syntax the project's Dockerfile uses: enough to replay its
 * stages without a Docker engine and to check what the final image declares.
 */

export interface Instruction {
  readonly keyword: string;
  readonly args: string;
  readonly line: number;
}

export interface Stage {
  readonly name: string;
  readonly image: string;
  readonly instructions: readonly Instruction[];
}

export interface CopyInstruction {
  readonly from?: string;
  readonly sources: string[];
  readonly dest: string;
}

/** Joins `\` continuations, drops comments and blank lines. Line numbers are 1-based, of the first line. */
export function instructions(text: string): Instruction[] {
  const out: Instruction[] = [];
  const lines = text.split(/\r?\n/);
  let pending = '';
  let start = 0;
  lines.forEach((raw, i) => {
    const trimmed = raw.trim();
    if (pending === '' && (trimmed === '' || trimmed.startsWith('#'))) return;
    if (pending !== '' && trimmed.startsWith('#')) return;
    if (pending === '') start = i + 1;
    if (trimmed.endsWith('\\')) {
      pending += trimmed.slice(0, -1) + ' ';
      return;
    }
    const full = (pending + trimmed).trim();
    pending = '';
    const m = /^(\S+)\s*(.*)$/s.exec(full)!;
    out.push({ keyword: m[1]!.toUpperCase(), args: m[2]!.trim(), line: start });
  });
  if (pending !== '') throw new Error('Dockerfile ends inside a line continuation');
  return out;
}

/** `${NAME}` / `$NAME` from the ARGs declared before the first FROM (their defaults). */
function substitute(text: string, args: Record<string, string>): string {
  return text.replace(/\$\{(\w+)\}|\$(\w+)/g, (whole, a: string | undefined, b: string | undefined) => {
    const name = (a ?? b)!;
    if (!(name in args)) throw new Error(`Dockerfile uses undeclared ARG ${name} in ${whole}`);
    return args[name]!;
  });
}

export function parseDockerfile(text: string): Stage[] {
  const globalArgs: Record<string, string> = {};
  const stages: { name: string; image: string; instructions: Instruction[] }[] = [];
  for (const ins of instructions(text)) {
    if (ins.keyword === 'ARG' && stages.length === 0) {
      const m = /^(\w+)(?:=(.*))?$/.exec(ins.args);
      if (!m) throw new Error(`line ${ins.line}: cannot read ARG ${ins.args}`);
      globalArgs[m[1]!] = (m[2] ?? '').replace(/^"(.*)"$/, '$1');
      continue;
    }
    if (ins.keyword === 'FROM') {
      const m = /^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      if (!m) throw new Error(`line ${ins.line}: cannot read FROM ${ins.args}`);
      stages.push({ name: m[2] ?? String(stages.length), image: substitute(m[1]!, globalArgs), instructions: [] });
      continue;
    }
    if (stages.length === 0) throw new Error(`line ${ins.line}: ${ins.keyword} before the first FROM`);
    stages[stages.length - 1]!.instructions.push(ins);
  }
  return stages;
}

/** Exec form (`["a", "b"]`) of CMD / ENTRYPOINT / RUN / COPY; `undefined` for the shell form. */
export function execForm(args: string): string[] | undefined {
  if (!args.startsWith('[')) return undefined;
  const parsed: unknown = JSON.parse(args);
  if (!Array.isArray(parsed) || !parsed.every((x) => typeof x === 'string')) throw new Error(`not a JSON string array: ${args}`);
  return parsed as string[];
}

export function parseCopy(args: string): CopyInstruction {
  const words = args.split(/\s+/);
  let from: string | undefined;
  while (words[0]?.startsWith('--')) {
    const flag = words.shift()!;
    if (flag.startsWith('--from=')) from = flag.slice('--from='.length);
    else if (!/^--(chown|chmod)=|^--link$/.test(flag)) throw new Error(`unsupported COPY flag ${flag}`);
  }
  const list = execForm(words.join(' ')) ?? words;
  if (list.length < 2) throw new Error(`COPY needs a source and a destination: ${args}`);
  return { from, sources: list.slice(0, -1), dest: list[list.length - 1]! };
}

/** The last value of a keyword in a stage (CMD, ENTRYPOINT, USER and WORKDIR: the last one wins). */
export function last(stage: Stage, keyword: string): Instruction | undefined {
  return [...stage.instructions].reverse().find((i) => i.keyword === keyword);
}
