-- A session's workspace measured (the runner's watchdog): its bytes are
-- the session's share of its tenant's disk usage.
--
-- KEYS[1] tenant:{tenant}:usage
-- ARGV: session id, bytes
--
-- `s:<session id>` holds the session's last measured bytes and `disk`
-- their sum; a live session not listed yet (made before the tenant's
-- usage was kept) is listed now, one more `sessions`.  The janitor takes
-- an expired session off (janitor_end.lua).
--
-- Returns the tenant's `disk`, this session included.
local f = 's:' .. ARGV[1]
local old = redis.call('HGET', KEYS[1], f)
if not old then
  redis.call('HINCRBY', KEYS[1], 'sessions', 1)
  old = 0
end
redis.call('HSET', KEYS[1], f, ARGV[2])
return redis.call('HINCRBY', KEYS[1], 'disk', tonumber(ARGV[2]) - tonumber(old))
