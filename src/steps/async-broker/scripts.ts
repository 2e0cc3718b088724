/**
 * Lua scripts, byte for byte as upstream where upstream has them,
 * so both sides run the same logic (the AP's quota gate runs identical logic under another SHA).
 * ioredis `defineCommand` runs them as EVALSHA with an EVAL fallback on NOSCRIPT, as go-redis does.
 */

/** KEYS[1] quota key; ARGV limit, window seconds. 1 = reserved (counted), 0 = overflow. */
export const QUOTA_ACQUIRE = `local current = redis.call("GET", KEYS[1])
if current and tonumber(current) >= tonumber(ARGV[1]) then
	return 0
end
redis.call("INCR", KEYS[1])
redis.call("EXPIRE", KEYS[1], ARGV[2])
return 1
`;

/** KEYS[1] quota key; ARGV window seconds. Never below 0; stops refreshing the TTL at 0. */
export const QUOTA_RELEASE = `local current = redis.call("GET", KEYS[1])
if current and tonumber(current) > 0 then
	local remaining = redis.call("DECR", KEYS[1])
	if remaining > 0 then
		redis.call("EXPIRE", KEYS[1], ARGV[1])
	end
end
`;

/**
 * The producer's `markRequestCancelledScript`. KEYS request-active, request-cancel; ARGV TTL seconds.
 * Copies the current token into the cancel marker; 1 = marked, 0 = nothing active.
 */
export const MARK_CANCELLED = `local active = redis.call("GET", KEYS[1])
if not active then
  return 0
end
redis.call("SET", KEYS[2], active, "EX", ARGV[1])
return 1
`;

/**
 * The later revision's "un-cancel". KEYS request-active,
 * request-cancel. Deletes the cancel marker only while it still equals the live token, so a retry
 * revives a cancelled but still queued copy and never touches another generation's marker.
 * 1 = revived, 0 = nothing to revive.
 */
export const UNCANCEL = `local active = redis.call("GET", KEYS[1])
if not active then
  return 0
end
if redis.call("GET", KEYS[2]) == active then
  redis.call("DEL", KEYS[2])
  return 1
end
return 0
`;

/**
 * The AP's `cleanupRequestStateScript` (compare-and-delete). KEYS request-active, request-cancel;
 * ARGV token. The step runs it only to take back its own marker after a failed submit; the test
 * processor runs it after each result.
 */
export const CLEANUP_REQUEST_STATE = `local token = ARGV[1]
if token == "" then
  return 0
end
if redis.call("GET", KEYS[1]) == token then
  redis.call("DEL", KEYS[1])
end
if redis.call("GET", KEYS[2]) == token then
  redis.call("DEL", KEYS[2])
end
return 1
`;
