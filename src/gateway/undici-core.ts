/**
 * The undici classes the service uses, loaded without undici's index.
 *
 * `require('undici')` loads fetch, WebSocket, EventSource, the cache stores and the mock agents
 * along with the HTTP/1.1 client: 6.1 MB of V8 heap in a service whose whole heap is about 20 MB
 * when idle, and which every full collection marks again (at one request a second V8's memory
 * reducer runs them over and over). The modules below cost about 2.5 MB. undici has no exports map,
 * so its files are requirable; the lockfile pins its version, and
 * test/unit/gateway/undici-core.test.ts checks that these are the very classes undici exports and
 * that loading the service does not load the index.
 */
import type * as Undici from 'undici';

/* eslint-disable @typescript-eslint/no-require-imports -- undici's own modules, typed from its index's declarations */
export const UndiciClient = require('undici/lib/dispatcher/client') as typeof Undici.Client;
export const UndiciDispatcher = require('undici/lib/dispatcher/dispatcher') as typeof Undici.Dispatcher;
export const buildConnector = require('undici/lib/core/connect') as typeof Undici.buildConnector;
export const errors = require('undici/lib/core/errors') as typeof Undici.errors;
/**
 * `Dispatcher.prototype.request`, which undici's index installs on every dispatcher: called with a
 * client as `this` (`undiciRequest.call(client, options)`), it is `client.request(options)`.
 */
export const undiciRequest = require('undici/lib/api/api-request') as (
  this: Undici.Dispatcher,
  options: Undici.Dispatcher.RequestOptions,
) => Promise<Undici.Dispatcher.ResponseData>;
/* eslint-enable @typescript-eslint/no-require-imports */
