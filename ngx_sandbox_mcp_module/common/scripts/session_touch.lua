-- An MCP session's lookup, which refreshes its TTL once less than half of
-- it is left: most lookups only read, so a read-only load writes nothing
-- (no PEXPIRE in the append-only file or to the replicas).  The module
-- reads a session with plain commands (HMGET tenant protocol, PTTL,
-- pipelined: no Lua on a read) and comes here only when less than half of
-- the TTL is left, so that the refresh and its checks are one step.
--
-- KEYS[1] mcp:{sid}   KEYS[2] revoked
-- ARGV: tenant, ttl (ms), token id (jti; '' when the worker's revoked set
-- is current)
--
-- Returns the negotiated protocol version ('' if none was stored); nil for
-- an unknown session or another tenant's (the same answer on purpose); or
-- the status REVOKED (nothing refreshed).
if ARGV[3] ~= '' and redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then
  return redis.status_reply('REVOKED')
end
local h = redis.call('HMGET', KEYS[1], 'tenant', 'protocol')
if h[1] ~= ARGV[1] then return nil end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) / 2 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return h[2] or ''
