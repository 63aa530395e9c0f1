-- An MCP session's lookup, which refreshes its TTL once less than half of
-- it is left: most lookups only read, so a read-only load writes nothing
-- (no PEXPIRE in the append-only file or to the replicas).  With a third
-- key, the hash the request's tool reads (a run: opencode_get_result) comes
-- back with the version in the same round trip; the caller shows it only
-- if the session is found, and checks its tenant itself.
--
-- KEYS[1] mcp:{sid}   KEYS[2] revoked   KEYS[3] (optional) run:{id}
-- ARGV: tenant, ttl (ms), token id (jti; '' when the worker's revoked set
-- is current)
--
-- Returns the negotiated protocol version ('' if none was stored), or with
-- KEYS[3] {version, HGETALL of KEYS[3]}; nil for an unknown session or
-- another tenant's (the same answer on purpose; KEYS[3] not read); or the
-- status REVOKED (nothing refreshed, nothing read).
if ARGV[3] ~= '' and redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then
  return redis.status_reply('REVOKED')
end
local h = redis.call('HMGET', KEYS[1], 'tenant', 'protocol')
if h[1] ~= ARGV[1] then return nil end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) / 2 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if KEYS[3] then
  return {h[2] or '', redis.call('HGETALL', KEYS[3])}
end
return h[2] or ''
