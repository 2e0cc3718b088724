import type { Exchange, HeaderBudget, RequestHandler, RequestHead } from './decision';
import { BadRequestError, PathNotServedError, TooManyHeadersError } from './errors';
import type { HandlerOptions } from './exchange-base';
import { PassthroughExchange, RefusedExchange, RouteExchange } from './exchanges';
import { DEFAULT_HEADER_POLICY, invalidHeaderMessage, screenHeaders } from './header-policy';
import { isInferenceRequest, stripQuery } from './inference-request';
import { DEFAULT_PATH_POLICY, pathAllowed } from './path-policy';
import { PipelineExchange } from './pipeline-exchange';
import type { Route } from './step';

export type { HandlerOptions } from './exchange-base';

/**
 * Bridges the protocol layer to the pipeline: one {@link Exchange} per request Envoy shows us. It
 * screens the head (path policy, header policy, header budget) and picks the exchange: the
 * pipeline for an inference request (pipeline-exchange.ts), else a refusal, a step's route or a
 * passthrough (exchanges.ts).
 */
export class PipelineHandler implements RequestHandler {
  constructor(private readonly opts: HandlerOptions) {}

  begin(head: RequestHead): Exchange | null {
    // First: a path the allow-list does not name is never forwarded, whatever Envoy's route was.
    if (!pathAllowed(this.opts.pathPolicy ?? DEFAULT_PATH_POLICY, head.path)) {
      return new RefusedExchange(this.opts, head.path, head.headers, new PathNotServedError(), 'path');
    }
    const path = stripQuery(head.path);
    // Before anything reads them: untrusted gateway headers go, a non-ASCII value is refused.
    const screened = screenHeaders(head.headers, this.opts.headerPolicy ?? DEFAULT_HEADER_POLICY, head.origin, head.laterValues);
    const refusal = headRefusal(head.headerBudgetExceeded, screened.invalid);
    if (isInferenceRequest(head.method, path) && !this.routeFor(head.method, path)) {
      const exchange = new PipelineExchange(this.opts, path, screened.headers, head.method, screened.removed);
      if (refusal) exchange.refuse(refusal);
      return exchange;
    }
    // Outside the pipeline the head is refused the same way, answered at once.
    if (refusal) return new RefusedExchange(this.opts, path, screened.headers, refusal, 'headers');
    const matched = this.routeFor(head.method, path);
    if (matched) return new RouteExchange(this.opts, path, screened.headers, matched.route, matched.params);
    this.opts.observer?.decided('passthrough');
    return new PassthroughExchange(this.opts, path, screened);
  }

  private routeFor(method: string, path: string): { route: Route; params: Record<string, string> } | undefined {
    for (const route of this.opts.routes ?? []) {
      if (route.method !== method) continue;
      const params = route.match(path);
      if (params) return { route, params };
    }
    return undefined;
  }
}

/**
 * Why the head alone refuses a request, if it does: a header value we would not forward (400,
 * naming it), or more headers than leave room for our mutation (431).
 */
function headRefusal(budget: HeaderBudget | undefined, invalidHeader: string | undefined): Error | undefined {
  if (invalidHeader !== undefined) return new BadRequestError(invalidHeaderMessage(invalidHeader));
  if (budget) return new TooManyHeadersError(budget.entries, budget.allowed);
  return undefined;
}
