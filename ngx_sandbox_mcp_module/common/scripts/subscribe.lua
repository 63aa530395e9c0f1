-- A resource subscription of an MCP session (resources/subscribe).
--
-- KEYS[1] mcp:{sid}:subs
-- ARGV: uri, the most a session holds, ttl (s: as long as a session may
-- live, refreshed)
--
-- Returns 1 (added), 0 (held already), -1 (the session holds the most:
-- nothing added).
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return 0
end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return -1 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
