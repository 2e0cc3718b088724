/** Several side-call observers as one (metrics and tracing on the same client). */
import type { SideCallObserver } from '../gateway/client';

export function combineSideCallObservers(observers: ReadonlyArray<SideCallObserver | undefined>): SideCallObserver | undefined {
  const list = observers.filter((o): o is SideCallObserver => o !== undefined);
  if (list.length <= 1) return list[0];
  return {
    started(phase, path, headers) {
      // Each observer sees the headers the previous one chose (tracing replaces traceparent).
      let current = headers;
      let replaced: Record<string, string> | undefined;
      const observations = list.map((o) => {
        const obs = o.started(phase, path, current);
        if (obs.headers) current = replaced = obs.headers;
        return obs;
      });
      return {
        headers: replaced,
        ended: (outcome, noEndpoint) => {
          for (const obs of observations) obs.ended(outcome, noEndpoint);
        },
      };
    },
  };
}
